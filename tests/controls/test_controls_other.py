"""telemetry, workload_identity, change_control, containment: both ways, and unknown when unfed."""

from __future__ import annotations

import dataclasses
from typing import Any

from ctl_kit import NOW, facts_for

from flow_kit import AUX, MGMT, STORAGE, W0, W1, lab_policy, policy_variant
from ringfence.controls import change_control, containment, telemetry, workload_identity
from ringfence.controls.interface import Facts, Verdict

POLICY = lab_policy()


def _verdicts(findings: list[Any]) -> set[Verdict]:
    return {f.verdict for f in findings}


def test_telemetry_pass_and_fail() -> None:
    ok = telemetry.evaluate(POLICY, facts_for(POLICY, [{"src": W0, "dst": W1, "dport": 29500}]))
    assert [(f.verdict, f.subject) for f in ok if f.requirement == telemetry.ATTRIBUTED] == [
        (Verdict.PASS, "flow source pcap:test.pcap")
    ]
    bad = telemetry.evaluate(POLICY, facts_for(POLICY, [{"src": "192.0.2.1", "dst": W1, "dport": 22}]))
    assert Verdict.FAIL in _verdicts(bad)
    assert any(f.subject == "address 192.0.2.1" and "flow log without workload identity" in f.message for f in bad)


def test_telemetry_identity_counts_as_context() -> None:
    row = {"src": "10.200.0.9", "dst": W1, "dport": 29500, "src_identity": "spiffe://lab/job/train-a"}
    found = telemetry.evaluate(POLICY, facts_for(POLICY, [row]))
    assert _verdicts([f for f in found if f.requirement == telemetry.ATTRIBUTED]) == {Verdict.PASS}


def test_workload_identity() -> None:
    plain = workload_identity.evaluate(POLICY, facts_for(POLICY, [{"src": W0, "dst": W1, "dport": 29500}]))
    assert _verdicts(plain) == {Verdict.UNKNOWN}
    good = {"src": W0, "dst": W1, "dport": 29500, "src_identity": "spiffe://lab/job/train-a"}
    spoof = {"src": AUX, "dst": W1, "dport": 29500, "sport": 1, "src_identity": "spiffe://lab/node/worker-0"}
    f = workload_identity.evaluate(POLICY, facts_for(POLICY, [good, spoof]))
    assert any(x.verdict is Verdict.PASS and x.subject == "identity spiffe://lab/job/train-a" for x in f)
    assert any(
        x.verdict is Verdict.FAIL and "node aux presents identity spiffe://lab/node/worker-0" in x.message for x in f
    )
    certs = {
        "certificates": [
            {"identity": n.identity, "node": n.name, "not_after": "2026-12-01T00:00:00+00:00"}
            for n in POLICY.nodes
            if n.identity and n.name != "aux"
        ]
        + [{"identity": "spiffe://lab/node/aux", "not_after": "2026-11-29T00:00:00+00:00"}]
    }
    f = workload_identity.evaluate(POLICY, Facts(now=NOW, keys=certs))
    fails = {x.subject for x in f if x.verdict is Verdict.FAIL}
    assert fails == {"certificate spiffe://lab/node/aux"}
    # aux holds no valid certificate: not proven (it may authenticate otherwise), never a pass.
    assert any(x.verdict is Verdict.UNKNOWN and x.subject == "node aux" for x in f)


def test_workload_identity_missing_in_policy() -> None:
    def change(doc: dict[str, Any]) -> None:
        doc["nodes"][2].pop("identity")  # aux

    policy = policy_variant(change)
    f = workload_identity.evaluate(policy, facts_for(policy, [{"src": AUX, "dst": MGMT, "dport": 8000}]))
    assert any(x.verdict is Verdict.FAIL and x.subject == "node aux" for x in f)


def _exc(expires: str, trigger: str = "quarterly review") -> Any:
    def change(doc: dict[str, Any]) -> None:
        doc["exceptions"] = [
            {"id": "exc-1", "control": "zones", "subject": "node:aux", "owner": "netsec@lab", "reason": "migration",
             "expires": expires, "review_trigger": trigger}
        ]  # fmt: skip

    return policy_variant(change)


def test_change_control_exceptions() -> None:
    good = change_control.evaluate(_exc("2027-01-01"), Facts(now=NOW))
    assert [(f.verdict, f.subject) for f in good if f.subject.startswith("exception")] == [
        (Verdict.PASS, "exception exc-1")
    ]
    expired = change_control.evaluate(_exc("2026-01-01"), Facts(now=NOW))
    assert any(f.verdict is Verdict.FAIL and "expired on 2026-01-01" in f.message for f in expired)
    untriggered = change_control.evaluate(_exc("2027-01-01", ""), Facts(now=NOW))
    assert any(f.verdict is Verdict.FAIL and "no review trigger" in f.message for f in untriggered)


def test_change_control_changes() -> None:
    assert any(
        f.verdict is Verdict.UNKNOWN and "ringfence apply" in f.message
        for f in change_control.evaluate(POLICY, Facts(now=NOW))
    )
    changes = [
        {"id": "v1", "applied_at": "2026-11-30T09:00:00+00:00", "approved_by": "cab@lab", "verified": True},
        {"id": "v2", "applied_at": "2026-11-30T10:00:00+00:00", "approved_by": ""},
    ]
    f = change_control.evaluate(POLICY, Facts(now=NOW, changes=changes))
    assert {(x.verdict, x.subject) for x in f if x.subject.startswith("change ")} == {
        (Verdict.PASS, "change v1"),
        (Verdict.FAIL, "change v2"),
    }


def test_exception_exempts_path_control_and_expired_fails() -> None:
    from ringfence.controls import zones

    row = [{"src": AUX, "dst": STORAGE, "dport": 9999}]
    active = _exc("2027-01-01")
    assert _verdicts([f for f in zones.evaluate(active, facts_for(active, row)) if f.subject.startswith("flow")]) == {
        Verdict.EXEMPT
    }
    lapsed = _exc("2026-01-01")
    assert _verdicts([f for f in zones.evaluate(lapsed, facts_for(lapsed, row)) if f.subject.startswith("flow")]) == {
        Verdict.FAIL
    }


def test_containment() -> None:
    assert _verdicts(containment.evaluate(POLICY, Facts(now=NOW))) == {Verdict.UNKNOWN}
    good = {
        "drills": [
            {
                "node": "aux",
                "isolated": True,
                "by_policy": True,
                "others_unaffected": True,
                "restored": True,
                "points": {"node": True, "fabric": True},
                "seconds": 1.5,
            }
        ]
    }
    assert _verdicts(containment.evaluate(POLICY, Facts(now=NOW, containment=good))) == {Verdict.PASS}
    leaky = {"drills": [{"node": "aux", "isolated": False, "by_policy": False, "others_unaffected": True}]}
    assert Verdict.FAIL in _verdicts(containment.evaluate(POLICY, Facts(now=NOW, containment=leaky)))
    unproven = {"drills": [{"node": "aux", "isolated": True, "by_policy": None}]}
    assert _verdicts(containment.evaluate(POLICY, Facts(now=NOW, containment=unproven))) == {Verdict.UNKNOWN}


def test_telemetry_traces_pass_fail_and_unknown() -> None:
    from ringfence.controls.telemetry import ALLOWED, DENIED

    def trace(sample: str, attributed: bool) -> dict[str, object]:
        return {"sample": sample, "attributed": attributed, "flow": {"src": "10.99.9.9", "dst": W1},
                "decision": {"rule": None, "verdict": "drop"}, "src": {"address": "10.99.9.9"}, "dst": {"node": "w1"}}

    base = facts_for(POLICY, [{"src": W0, "dst": W1, "dport": 29500}])
    both = (trace("allowed", True), trace("denied", False))
    found = telemetry.evaluate(POLICY, dataclasses.replace(base, traces=both))
    by_req = {f.requirement: f for f in found if f.requirement in (ALLOWED, DENIED)}
    assert by_req[ALLOWED].verdict is Verdict.PASS
    assert by_req[DENIED].verdict is Verdict.FAIL and "cannot be attributed" in by_req[DENIED].message
    only_allowed = telemetry.evaluate(POLICY, dataclasses.replace(base, traces=(trace("allowed", True),)))
    denied = [f for f in only_allowed if f.requirement == DENIED]
    assert [f.verdict for f in denied] == [Verdict.UNKNOWN] and "ringfence trace --sample denied" in denied[0].message
    unfed = [f for f in telemetry.evaluate(POLICY, base) if f.verdict is Verdict.UNKNOWN]
    assert unfed and "ringfence trace --sample allowed" in unfed[-1].message
