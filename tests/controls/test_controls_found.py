"""The cases a skeptical review found (issue 10), one test each: each was a ``pass`` without its proof."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from ctl_kit import NOW, TAKEN, by_control, facts_for
from test_controls_requirements import CHANGES, CONTAINMENT, KEYS, PROBES, RULESET, complete

from flow_kit import MGMT, STORAGE, W0, W1, lab_policy, policy_variant
from ringfence.controls.interface import Verdict

POLICY = lab_policy()
PATHS = ("zones", "admin_paths", "storage_flows", "training_traffic", "egress")


def test_empty_capture_with_probes_proves_no_path_control() -> None:
    """An empty capture is "no facts", not "no bad flows": probes alone prove only the denied half."""
    facts = facts_for(POLICY, [], probes=PROBES, ruleset=RULESET, keys=KEYS, changes=CHANGES,
                      containment=CONTAINMENT)
    results = by_control(POLICY, facts)
    for cid in (*PATHS, "encryption_keys", "telemetry"):
        assert results[cid].verdict is not Verdict.PASS, cid
    for cid in PATHS:
        missing = {f.requirement for f in results[cid].findings if f.verdict is Verdict.UNKNOWN}
        assert {"approved-path-observed", "no-unapproved-flow"} <= missing, cid


def test_zones_needs_its_permitted_half() -> None:
    """Only deny probes and no observed approved pair: zones shows its denied half only — not a pass."""
    only_other = [{"src": W0, "dst": STORAGE, "dport": 8080, "protection": "encrypted", "protocol": "tls1.3"}]
    result = by_control(POLICY, facts_for(POLICY, only_other, probes=PROBES))["zones"]
    assert result.verdict is Verdict.UNKNOWN
    assert any(f.requirement == "approved-path-observed" and f.verdict is Verdict.UNKNOWN for f in result.findings)


def _drill(**change: Any) -> dict[str, Any]:
    drill = {**CONTAINMENT["drills"][0], **change}
    return {"drills": [{k: v for k, v in drill.items() if v is not _MISSING}]}


_MISSING = object()


@pytest.mark.parametrize(
    "change",
    [
        {"restored": None},  # not released
        {"others_unaffected": None},  # no other job watched
        {"isolated": "yes"},  # not a boolean
        {"by_policy": 1},
        {"isolated": _MISSING},
        {"restored": _MISSING},
        {"points": {"node": True}},  # proof at the node only
        {"points": {"node": True, "fabric": None}},
        {"points": _MISSING},
    ],
)
def test_containment_passes_only_on_real_booleans_at_both_points(change: dict[str, Any]) -> None:
    facts = dataclasses.replace(complete(), containment=_drill(**change))
    assert by_control(POLICY, facts)["containment"].verdict is Verdict.UNKNOWN


def test_containment_failure_still_fails() -> None:
    facts = dataclasses.replace(complete(), containment=_drill(isolated=False))
    assert by_control(POLICY, facts)["containment"].verdict is Verdict.FAIL


@pytest.mark.parametrize("verified", [None, "yes", 1])
def test_change_nobody_verified_is_not_a_pass(verified: object) -> None:
    facts = dataclasses.replace(complete(), changes=[{**CHANGES[0], "verified": verified}])
    result = by_control(POLICY, facts)["change_control"]
    assert result.verdict is Verdict.UNKNOWN
    assert any("never verified" in f.message for f in result.findings)


def test_telemetry_from_a_single_pcap_is_unknown() -> None:
    rows = [{"src": W0, "dst": W1, "dport": 29500}, {"src": W0, "dst": STORAGE, "dport": 8080}]
    result = by_control(POLICY, facts_for(POLICY, rows))["telemetry"]
    assert result.verdict is Verdict.UNKNOWN
    assert any("a flow log alone" in f.message for f in result.findings)


def test_telemetry_passes_when_an_allowed_flow_and_a_denied_attempt_are_reconstructed() -> None:
    result = by_control(POLICY, complete())["telemetry"]
    assert result.verdict is Verdict.PASS
    subjects = {f.subject for f in result.findings if f.verdict is Verdict.PASS}
    assert any(s.startswith("denied flow 10.77.1.50:") and "(aux → storage)" in s for s in subjects)
    assert any(s.startswith("allowed flow ") and "(worker-0 → storage)" in s for s in subjects)


def test_unrecognised_protocol_on_a_layered_class_is_not_a_pass() -> None:
    row = {"src": W0, "dst": STORAGE, "dport": 8080, "protection": "encrypted", "protocol": "mystery-cipher"}
    facts = dataclasses.replace(complete(), flows=facts_for(POLICY, [row]).flows)
    found = by_control(POLICY, facts)["encryption_keys"]
    assert found.verdict is not Verdict.PASS
    odd = [f for f in found.findings if f.subject.startswith("flow ") and "(storage)" in f.subject]
    assert [f.verdict for f in odd] == [Verdict.UNKNOWN] and "unrecognised protocol" in odd[0].message


@pytest.mark.parametrize("at", ["", None, "2026-11-30T10:00:00", "yesterday"])
def test_rotation_without_an_aware_time_never_passes(at: object) -> None:
    keys = {**KEYS, "rotations": [{**KEYS["rotations"][0], "at": at}]}
    result = by_control(POLICY, dataclasses.replace(complete(), keys=keys))["encryption_keys"]
    assert result.verdict is Verdict.UNKNOWN
    assert not any("at None" in f.message for f in result.findings)


def test_overdue_rotation_fails() -> None:
    keys = {**KEYS, "rotations": [{**KEYS["rotations"][0], "at": "2026-11-01T00:00:00+00:00"}]}
    result = by_control(POLICY, dataclasses.replace(complete(), keys=keys))["encryption_keys"]
    assert result.verdict is Verdict.FAIL and any("overdue" in f.message for f in result.findings)


def test_a_failed_trust_boundary_check_fails_encryption_keys() -> None:
    scope = [{"path": "train-a-collective", "traffic_class": "collective", "verdict": "fail",
              "reason": "RDMA is outside the scope of wireguard"}]
    result = by_control(POLICY, dataclasses.replace(complete(), keys={**KEYS, "scope": scope}))["encryption_keys"]
    assert result.verdict is Verdict.FAIL
    assert any(f.subject == "scope of path train-a-collective" and "RDMA" in f.message for f in result.findings)


def test_uncovered_class_in_verify_coverage_fails() -> None:
    coverage = {**KEYS["coverage"], "replication": {"traffic_class": "replication", "status": "uncovered",
                                                    "layer": None, "verdict": "fail", "reason": "no layer"}}
    result = by_control(POLICY, dataclasses.replace(complete(), keys={**KEYS, "coverage": coverage}))
    assert result["encryption_keys"].verdict is Verdict.FAIL


def test_pass_text_claims_only_the_sample() -> None:
    result = by_control(POLICY, complete())["encryption_keys"]
    texts = [f.message for f in result.findings if f.subject.startswith("class ")]
    assert texts and all("payload sample" in t and "carried no plaintext payload" not in t for t in texts)


def test_workload_identity_reads_the_certificates_verify_writes() -> None:
    result = by_control(POLICY, complete())["workload_identity"]
    assert result.verdict is Verdict.PASS
    assert any(f.subject == "certificate spiffe://lab/node/storage" and f.verdict is Verdict.PASS
               for f in result.findings)


@pytest.mark.parametrize("subject", ["nodes:aux", "node:auxx", "flow:no-such-flow", "zone:nowhere", "address:10.0.0",
                                     "classs:storage"])
def test_exception_subjects_are_validated_against_the_inventory(subject: str) -> None:
    def change(doc: dict[str, Any]) -> None:
        doc["exceptions"] = [{"id": "exc-typo", "control": "zones", "subject": subject, "owner": "netsec@lab",
                              "reason": "migration", "expires": "2027-01-01", "review_trigger": "quarterly"}]

    policy = policy_variant(change)
    result = by_control(policy, facts_for(policy, [{"src": W0, "dst": MGMT, "dport": 8000}]))["change_control"]
    bad = [f for f in result.findings if f.subject == "exception exc-typo"]
    assert [f.verdict for f in bad] == [Verdict.FAIL] and subject in bad[0].message


def test_a_valid_exception_subject_passes() -> None:
    def change(doc: dict[str, Any]) -> None:
        doc["exceptions"] = [{"id": "exc-ok", "control": "zones", "subject": "node:aux", "owner": "netsec@lab",
                              "reason": "migration", "expires": "2027-01-01", "review_trigger": "quarterly"}]

    policy = policy_variant(change)
    found = by_control(policy, facts_for(policy, []))["change_control"].findings
    assert [f.verdict for f in found if f.subject == "exception exc-ok"] == [Verdict.PASS]


def test_naive_times_in_facts_prove_nothing_and_never_raise() -> None:
    """Hand-made facts with naive times (the schema refuses them at the edge; the controls survive them)."""
    naive = {**KEYS, "inventory": [{**KEYS["inventory"][0], "not_after": "2027-01-01T00:00:00"}]}
    facts = dataclasses.replace(complete(), keys=naive, changes=[{**CHANGES[0], "applied_at": "2026-11-30T09:00:00"}],
                                taken={**complete().taken, "keys": TAKEN.replace(tzinfo=None)})
    results = by_control(POLICY, facts)
    assert results["workload_identity"].verdict is not Verdict.PASS
    assert results["change_control"].verdict is not Verdict.PASS
    assert results["encryption_keys"].verdict is not Verdict.PASS
    assert NOW.tzinfo is not None


def _point(**change: Any) -> dict[str, Any]:
    fabric = {**RULESET["points"]["fabric"], **change}
    return {**RULESET, "points": {"fabric": fabric}}


@pytest.mark.parametrize(
    ("change", "subject", "words"),
    [
        ({"missing_flows": ["admin-ssh"]}, "enforcement point fabric: flow admin-ssh", "has no accept rule"),
        ({"extra_flows": ["aux-lateral"]}, "enforcement point fabric: flow aux-lateral", "does not place here"),
        ({"audit": True}, "enforcement point fabric", "audit mode"),
        ({"present": False}, "enforcement point fabric", "nothing enforces"),
    ],
)
def test_zones_judges_the_live_ruleset_drift_fails_naming_the_rule(change: dict[str, Any], subject: str,
                                                                   words: str) -> None:
    result = by_control(POLICY, dataclasses.replace(complete(), ruleset=_point(**change)))["zones"]
    assert result.verdict is Verdict.FAIL
    assert any(f.subject == subject and words in f.message for f in result.findings if f.verdict is Verdict.FAIL)


def test_zones_without_the_live_ruleset_is_unknown() -> None:
    result = by_control(POLICY, dataclasses.replace(complete(), ruleset=None))["zones"]
    assert result.verdict is Verdict.UNKNOWN
    assert any(f.requirement == "live-state-matches" for f in result.findings if f.verdict is Verdict.UNKNOWN)


def test_ruleset_gathered_for_another_matrix_proves_nothing() -> None:
    result = by_control(POLICY, dataclasses.replace(complete(), ruleset=_point(expected_flows=["old"])))["zones"]
    assert result.verdict is Verdict.UNKNOWN
