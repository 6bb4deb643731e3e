"""The five path controls: unapproved flows fail in the right control, approved ones pass; probes."""

from __future__ import annotations

import pytest
from ctl_kit import NOW, by_control, facts_for, verdicts

from flow_kit import AUX, EXT, JUMP, MGMT, STORAGE, USER, W0, W1, lab_policy
from ringfence.controls.interface import Facts, ProbeResult, Verdict
from ringfence.controls.registry import REGISTRY

POLICY = lab_policy()

APPROVED = [
    {"src": W0, "dst": W1, "dport": 29500},
    {"src": W0, "dst": STORAGE, "dport": 8080},
    {"src": JUMP, "dst": MGMT, "dport": 22},
    {"src": USER, "dst": MGMT, "dport": 8000},
    {"src": STORAGE, "dst": EXT, "dport": 9000},
]


@pytest.fixture(scope="module")
def clean() -> dict:  # type: ignore[type-arg]
    return by_control(POLICY, facts_for(POLICY, APPROVED))


@pytest.mark.parametrize(
    ("control", "rule"),
    [
        ("training_traffic", "train-a-collective"),
        ("storage_flows", "train-a-storage"),
        ("admin_paths", "admin-ssh"),
        ("zones", "user-submit"),
        ("egress", "checkpoint-replication"),
    ],
)
def test_approved_flows_pass_in_their_control(clean: dict, control: str, rule: str) -> None:  # type: ignore[type-arg]
    result = clean[control]
    assert ("pass", f"approved flow {rule}") in verdicts(result)
    assert Verdict.FAIL not in {f.verdict for f in result.findings}
    # No probes gathered: the denied side is unproven, so the control is unknown — never pass.
    assert result.verdict is Verdict.UNKNOWN


@pytest.mark.parametrize(
    ("row", "control", "words"),
    [
        ({"src": AUX, "dst": STORAGE, "dport": 8080}, "storage_flows", "node aux (zone workload) reached storage-http"),
        ({"src": AUX, "dst": MGMT, "dport": 22}, "admin_paths", "administrative access to mgmt-ssh from a workload"),
        ({"src": USER, "dst": MGMT, "dport": 22}, "admin_paths", "from node user (zone user) is not an approved"),
        (
            {"src": AUX, "dst": W0, "dport": 29500},
            "training_traffic",
            "between a member of job train-a and a non-member",
        ),
        ({"src": W0, "dst": EXT, "dport": 9000}, "egress", "to external zone external"),
        ({"src": W0, "dst": "203.0.113.9", "dport": 443}, "egress", "address 203.0.113.9 (not in the inventory)"),
        ({"src": AUX, "dst": STORAGE, "dport": 9999}, "zones", "unclassified traffic, not in the approved matrix"),
        ({"src": USER, "dst": STORAGE, "dport": 2049}, "zones", "node user (zone user) → node storage"),
    ],
)
def test_unapproved_flow_fails_in_its_control(row: dict, control: str, words: str) -> None:  # type: ignore[type-arg]
    results = by_control(POLICY, facts_for(POLICY, [row]))
    failing = {cid for cid, r in results.items() if any(f.verdict is Verdict.FAIL for f in r.findings)}
    assert control in failing
    assert not failing & {"zones", "admin_paths", "storage_flows", "training_traffic", "egress"} - {control}
    finding = next(f for f in results[control].findings if f.verdict is Verdict.FAIL)
    assert words in finding.message
    assert finding.evidence == ("ev-flows",) and finding.remediation


def test_subject_names_the_flow() -> None:
    results = by_control(POLICY, facts_for(POLICY, [{"src": AUX, "dst": STORAGE, "sport": 41234, "dport": 8081}]))
    # inventory names beside the addresses
    subject = "flow 10.77.1.50:41234 [aux] → 10.77.2.10:8081 [storage] (unclassified)"
    assert ("fail", subject) in verdicts(results["zones"])


def test_no_flows_is_unknown_not_pass() -> None:
    results = by_control(POLICY, Facts(now=NOW))
    for cid in ("zones", "admin_paths", "storage_flows", "training_traffic", "egress", "telemetry"):
        assert results[cid].verdict is Verdict.UNKNOWN
        assert any("ringfence assess POLICY --captures" in f.message for f in results[cid].findings)


def test_findings_are_capped_with_a_summary() -> None:
    rows = [{"src": AUX, "dst": STORAGE, "dport": 9000 + i % 500, "sport": 30000 + i} for i in range(450)]
    zones = by_control(POLICY, facts_for(POLICY, rows))["zones"]
    assert zones.verdict is Verdict.FAIL
    assert len(zones.findings) <= 200
    summary = [f for f in zones.findings if f.subject.endswith("more unapproved flows")]
    assert summary and summary[0].subject == "300 more unapproved flows"


def _probe(dst: str, port: int, expected: str, outcome: str, by_policy: bool | None = None) -> ProbeResult:
    return ProbeResult("aux", f"{dst}:{port}", "tcp", port, expected, outcome, by_policy, evidence=("ev-probe",))


@pytest.mark.parametrize(
    ("probe", "control", "verdict"),
    [
        (_probe("mgmt", 22, "deny", "timeout", True), "admin_paths", "pass"),
        (_probe("mgmt", 22, "deny", "reset", True), "admin_paths", "pass"),
        (_probe(MGMT, 22, "deny", "timeout", None), "admin_paths", "unknown"),
        (_probe("mgmt", 22, "deny", "refused", True), "admin_paths", "unknown"),
        (_probe("mgmt", 22, "deny", "connected"), "admin_paths", "fail"),
        (_probe("storage", 8080, "deny", "timeout", True), "storage_flows", "pass"),
        (_probe("worker-0", 29500, "deny", "reset", True), "training_traffic", "pass"),
        (_probe("external", 9000, "deny", "timeout", True), "egress", "pass"),
        (_probe("198.51.100.1", 443, "deny", "timeout", True), "egress", "pass"),
        (_probe("mgmt", 8000, "allow", "connected"), "zones", "pass"),
        (_probe("mgmt", 8000, "allow", "timeout"), "zones", "fail"),
        (_probe("mgmt", 8000, "allow", "unreachable"), "zones", "unknown"),  # its source host was down
        (_probe("mgmt", 22, "deny", "unreachable"), "admin_paths", "unknown"),
    ],
)
def test_probes_are_judged_in_their_control(probe: ProbeResult, control: str, verdict: str) -> None:
    meta = REGISTRY[control].meta
    findings = REGISTRY[control].evaluate(POLICY, Facts(now=NOW, probes=(probe,)))
    judged = [f for f in findings if f.subject.startswith("probe ")]
    assert [f.verdict.value for f in judged] == [verdict], findings
    assert judged[0].control == meta.id


def test_deny_probe_passing_with_approved_flows_passes_the_control() -> None:
    facts = facts_for(POLICY, APPROVED, probes=(_probe("mgmt", 22, "deny", "timeout", True),))
    assert by_control(POLICY, facts)["admin_paths"].verdict is Verdict.PASS


@pytest.mark.parametrize(
    ("extra", "control", "verdict"),
    [
        ({"packets": 3, "packets_fwd": 3}, "admin_paths", Verdict.UNKNOWN),  # SYNs only, nothing came back
        ({"packets": 10, "packets_fwd": 6}, "admin_paths", Verdict.FAIL),  # the responder answered: open path
        ({"packets": 10}, "admin_paths", Verdict.FAIL),  # a source that cannot tell directions: assume open
        ({"proto": 17, "dport": 514, "packets": 3, "packets_fwd": 3}, "zones", Verdict.FAIL),  # one-way UDP delivers
    ],
)
def test_unanswered_tcp_attempt_is_not_a_breach(extra: dict, control: str, verdict: Verdict) -> None:  # type: ignore[type-arg]
    row = {"src": AUX, "dst": MGMT, "dport": 22, **extra}
    results = by_control(POLICY, facts_for(POLICY, [row]))
    finding = next(f for f in results[control].findings if f.subject.startswith("flow "))
    assert finding.verdict is verdict
    if verdict is Verdict.UNKNOWN:
        assert "never answered" in finding.message and "ringfence probe" in finding.message
