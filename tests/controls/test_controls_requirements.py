"""Requirements as code, walked from the registry: every control passes on a complete set of facts, and
removing, emptying, aging or corrupting any one fact a requirement needs never leaves it ``pass``.

The complete facts are hand-made (flows, probes, ruleset, keys, changes, containment) so that each
control's own code decides; the test then breaks one fact at a time, for every control and every
requirement the registry lists — a new control or requirement is covered without editing this file.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

import pyarrow as pa
import pytest
from ctl_kit import NOW, TAKEN, by_control, facts_for

from flow_kit import EXT, JUMP, MGMT, STORAGE, USER, W0, W1, policy_variant, with_gateway
from ringfence.controls.interface import Facts, Finding, ProbeResult, Verdict, aggregate
from ringfence.controls.registry import REGISTRY
from ringfence.controls.requirements import enforce_requirements
from ringfence.drill.interface import Attempt, Bystander, DrillReport
from ringfence.policy.model import DRILL_SCENARIOS


def _variant(d: dict[str, Any]) -> None:
    # every incident scenario must be drilled, egress goes through a gateway on mgmt, and the job declares its
    # partition (so the requirements the policy asks for only then — drills, the gateway's records, the
    # partition's probes — are walked too)
    d["incident_drills"] = {"scenarios": list(DRILL_SCENARIOS)}
    with_gateway(d)
    d["jobs"][0]["partition"] = {"vlan": 100}  # a partition per job, proven on the fabric (facts.partitions)


POLICY = policy_variant(_variant)
AUX = "10.77.1.50"

FLOWS = [
    {"src": W0, "dst": W1, "dport": 29500, "protection": "encrypted", "protocol": "wireguard",
     "src_identity": "spiffe://lab/job/train-a"},
    {"src": W0, "dst": STORAGE, "dport": 8080, "protection": "encrypted", "protocol": "tls1.3"},
    {"src": USER, "dst": MGMT, "dport": 8000, "protection": "encrypted", "protocol": "tls1.3"},
    {"src": JUMP, "dst": MGMT, "dport": 22, "protection": "encrypted", "protocol": "ssh"},
    {"src": STORAGE, "dst": EXT, "dport": 9000, "protection": "encrypted", "protocol": "tls1.3"},
    {"src": STORAGE, "dst": MGMT, "dport": 8888, "protection": "encrypted", "protocol": "tls1.3"},
    {"src": MGMT, "dst": EXT, "dport": 9000, "protection": "encrypted", "protocol": "tls1.3"},
]

# the egress gateway's own record of storage's replication (tinyproxy's decisions, as facts.gateway gives them)
GATEWAY_LOG = ({"time": TAKEN.isoformat(), "client": STORAGE, "host": EXT, "port": 9000, "method": "CONNECT",
                "decision": "allow", "reason": "established", "bytes": None, "node": None, "line": 3,
                "source": "tinyproxy.log"},)


def _deny(dst: str, port: int) -> ProbeResult:
    return ProbeResult("aux", f"{dst}:{port}", "tcp", port, "deny", "timeout", True, "drop counter moved",
                       ("ev-probe",), "default drop@fabric/inet")


PROBES = (
    _deny("mgmt", 22),  # admin_paths
    _deny("storage", 8080),  # storage_flows
    _deny("worker-0", 29500),  # training_traffic
    _deny("external", 9000),  # egress
    _deny("storage", 9999),  # zones
    ProbeResult("user", "mgmt:8000", "tcp", 8000, "allow", "connected", None, "HTTP 200", ("ev-probe",), "user-submit"),
)

APPROVED_IDS = sorted(f.id for f in POLICY.approved)
RULESET: dict[str, Any] = {
    "points": {"fabric": {"present": True, "audit": False, "rules": 20, "flows": APPROVED_IDS,
                          "expected_flows": APPROVED_IDS, "missing_flows": [], "extra_flows": [], "enforced": True,
                          "accepted_packets": {"train-a-storage": 12, "user-submit": 4}}},
    "denied": [{"source": AUX, "destination": STORAGE, "proto": "tcp", "port": 8080, "packets": 3, "bytes": 180,
                "where": ["fabric/inet"]}],
    "egress": [],
}

KEYS: dict[str, Any] = {
    "rotations": [{"layer": "wireguard", "at": (NOW - timedelta(hours=2)).isoformat(), "ok": True,
                   "dropped_job": False, "detail": ""}],
    "mismatch": [{"layer": "wireguard", "failed_closed": True, "detail": "handshake refused"}],
    "coverage": {c: {"traffic_class": c, "status": "covered", "layer": "tls", "verdict": "pass", "reason": "covered"}
                 for c in ("storage", "collective", "management", "replication")},
    "scope": [{"path": "train-a-storage", "traffic_class": "storage", "verdict": "pass", "reason": "in scope"}],
    "credentials": [{"kind": "foreign-ca", "identity": "spiffe://lab/node/aux", "fingerprint": "ab", "expected":
                     "refused", "outcome": "handshake refused", "verdict": "pass", "detail": ""}],
    "inventory": [{"kind": "certificate", "node": n.name, "identity": n.identity, "fingerprint": "cd",
                   "not_after": (NOW + timedelta(days=1)).isoformat()}
                  for n in POLICY.nodes if n.identity and n.zone != "external"],
}

#: A change traced through request → approval by another identity → deploy observed by a probe → rollback.
CHANGES = [{"id": "v1", "action": "apply", "version": "a1", "applied_at": (NOW - timedelta(hours=3)).isoformat(),
            "approved_by": "cab@lab", "requested_by": "dev@lab", "request": "r" * 64, "ticket": "CHG-1",
            "verified": True, "verified_by": "ev-probe", "evidence": "ev-apply", "live": "ev-live"},
           {"id": "v2", "action": "rollback", "version": "none", "previous": "a1",
            "applied_at": (NOW - timedelta(hours=2)).isoformat(), "approved_by": "cab@lab", "ticket": "CHG-1",
            "verified": True, "verified_by": "ev-probe-2", "evidence": "ev-rollback", "live": "ev-live-2"}]

CONTAINMENT = {"drills": [{"node": "aux", "isolated": True, "by_policy": True, "points": {"node": True, "fabric": True},
                           "others_unaffected": True, "restored": True, "seconds": 1.2, "evidence": ["ev-contain"]}]}

# node attestation (issue 16): a replay drill refused and cut off, then the same rank attested and connected
ATTESTATION = {"format": "ringfence-attestation-1", "site": "lab", "generated": TAKEN.isoformat(), "interval": "60s",
               "nodes": [{"node": "worker-1", "admitted": True, "reasons": [], "addresses": ["10.77.1.11"]}],
               "probes": [{"source": "worker-1", "target": "worker-0", "address": "10.77.1.10", "port": 29500,
                           "expected": e, "outcome": o, "verdict": "pass"}
                          for e, o in (("blocked", "timeout"), ("reached", "connected"))]}

#: The allowed trace is a dataset read: the object server's record of it joined to the flow, the reader's
#: certificate identity proved at storage's TLS gate (storage_flows' permitted side); the denied one is aux —
#: no member of train-a — dropped on its way to the same service (its denied side).
READ = {"time": TAKEN.isoformat(), "node": "storage", "method": "GET", "path": "/datasets/train-a/shard-1",
        "job": "train-a", "result": "served", "bytes": 131072, "identity": "spiffe://lab/job/train-a",
        "joined": "tls-gate", "source": "storage.objects.json", "line": 7}
TRACES = tuple(
    {"sample": sample, "attributed": True, "flow": {"src": src, "sport": 41000, "dst": "10.77.2.10", "dport": 8080},
     "decision": {"rule": rule, "verdict": verdict, "policy_version": "ab" * 32},
     "src": {"node": node, "identity": identity}, "dst": {"node": "storage", "dns": "storage.lab"},
     "objects": objects}
    for sample, src, node, rule, verdict, identity, objects in (
        ("allowed", "10.77.1.10", "worker-0", "train-a-storage", "accept", "spiffe://lab/job/train-a", [READ]),
        ("denied", "10.77.1.50", "aux", None, "drop", None, [])))

# one passing drill per scenario (issue 14): the attack made, stopped by policy, detected; contained; the
# bystander job stepping inside its budget throughout
DRILLS = tuple(DrillReport(
    name, "lab:rftest", (TAKEN - timedelta(minutes=5)).isoformat(), TAKEN.isoformat(),
    (Attempt("attack", "aux", "storage (10.77.2.10:8080)", "the attack", False, "default drop@fabric/inet", True,
             "NFLOG deny by aux", 0.4, 0, ("ev-drill",)),),
    Bystander("train-a", ("worker-0", "worker-1"), 20, 40, 1.5, 10.0), True, "aux at node and fabric", 0.4, 1.1,
    evidence=("ev-drill",)).to_json() for name in DRILL_SCENARIOS)

# the job's partition on the fabric (issue 16): its ranks reach each other at L2 and L3 and keep stepping; aux
# gets no ARP answer and no SYN answered, direct or routed, each drop found in the fabric's partition record
PARTITIONS = {
    "format": "ringfence-partitions/1", "target": "lab:rftest", "taken": TAKEN.isoformat(), "evidence": "ev-part",
    "jobs": [{"job": "train-a", "partitioned": True, "members": ["worker-0", "worker-1"], "ports": ["p0", "p1"],
              "steps_before": {"worker-0": 5, "worker-1": 5}, "steps_after": {"worker-0": 9, "worker-1": 9}}],
    "probes": [{"layer": layer, "source": src, "source_job": job, "destination": "worker-0",
                "destination_job": "train-a", "address": W0, "port": 0 if layer == "l2" else 29500,
                "expected": expected, "outcome": outcome, "by_policy": by, "detail": ""}
               for layer, src, job, expected, outcome, by in (
                   ("l2", "worker-1", "train-a", "allow", "answered", None),
                   ("l3", "worker-1", "train-a", "allow", "connected", None),
                   ("l2", "aux", None, "deny", "silent", True),
                   ("l3", "aux", None, "deny", "timeout", True),
                   ("l3-routed", "aux", None, "deny", "timeout", True))],
}

_COMPLETE: list[Facts] = []


def complete() -> Facts:
    """Facts that prove every requirement of every control (built once: Facts is frozen)."""
    if not _COMPLETE:
        _COMPLETE.append(facts_for(POLICY, FLOWS, probes=PROBES, ruleset=RULESET, keys=KEYS, changes=CHANGES,
                                   containment=CONTAINMENT, attestation=ATTESTATION, traces=TRACES, drills=DRILLS,
                                   gateway=GATEWAY_LOG, partitions=PARTITIONS))
    return _COMPLETE[0]


def verdict_of(control: str, facts: Facts) -> tuple[Verdict, list[Finding]]:
    """One control judged as ``evaluate_all`` judges it (the requirement gate included)."""
    reg = REGISTRY[control]
    findings = enforce_requirements(reg.meta, POLICY, facts, reg.evaluate(POLICY, facts))
    return aggregate(findings), findings


def test_complete_facts_pass_every_control() -> None:
    results = by_control(POLICY, complete())
    not_passing = {cid: [(f.verdict.value, f.subject, f.message) for f in r.findings if f.verdict is not Verdict.PASS]
                   for cid, r in results.items() if r.verdict is not Verdict.PASS}
    assert not_passing == {}


def _corrupt(value: Any) -> Any:
    """Wrong types everywhere: booleans and numbers become text, aware times lose their zone."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str) and value[:4].isdigit() and "T" in value and "+" in value:
        return value.split("+", 1)[0]  # naive
    if isinstance(value, ProbeResult):
        return dataclasses.replace(value, by_policy="yes", outcome=value.outcome.upper())  # type: ignore[arg-type]
    if isinstance(value, Mapping):
        return {k: _corrupt(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_corrupt(v) for v in value)
    return value


def _empty(value: Any) -> Any:
    if hasattr(value, "num_rows"):
        return value.slice(0, 0)
    return type(value)()


def _undated(f: Facts, name: str) -> Facts:
    taken = {k: v for k, v in f.taken.items() if k != name}
    if name == "flows" and f.flows is not None:  # a flow table carries its own times: remove those too
        i = f.flows.column_names.index("last_seen")
        nulls = pa.nulls(f.flows.num_rows, f.flows.schema.field("last_seen").type)
        return dataclasses.replace(f, taken=taken, flows=f.flows.set_column(i, "last_seen", nulls))
    return dataclasses.replace(f, taken=taken)


BREAKS: dict[str, Callable[[Facts, str], Facts]] = {
    "removed": lambda f, name: dataclasses.replace(f, **{name: None}),
    "emptied": lambda f, name: dataclasses.replace(f, **{name: _empty(getattr(f, name))}),
    "stale": lambda f, name: dataclasses.replace(f, taken={**f.taken, name: NOW - timedelta(days=365)}),
    "undated": _undated,
    "from the future": lambda f, name: dataclasses.replace(f, taken={**f.taken, name: NOW + timedelta(days=2)}),
}
CORRUPTIBLE = ("probes", "ruleset", "keys", "changes", "containment", "drills", "gateway", "partitions")

CASES = [
    (cid, req.id, fact, how)
    for cid, control in REGISTRY.items()
    for req in control.meta.requirements
    for fact in req.facts
    for how in (*BREAKS, *(("corrupted",) if fact in CORRUPTIBLE else ()))
]


def test_every_control_declares_both_sides_and_the_walk_covers_them() -> None:
    for cid, control in REGISTRY.items():
        sides = {r.side.value for r in control.meta.requirements}
        assert sides == {"permitted", "denied"}, cid
    assert {c[0] for c in CASES} == set(REGISTRY)


@pytest.mark.parametrize(("control", "requirement", "fact", "how"), CASES)
def test_breaking_one_fact_never_passes(control: str, requirement: str, fact: str, how: str) -> None:
    facts = complete()
    broken = (dataclasses.replace(facts, **{fact: _corrupt(getattr(facts, fact))}) if how == "corrupted"
              else BREAKS[how](facts, fact))
    verdict, findings = verdict_of(control, broken)
    assert verdict is not Verdict.PASS, (control, requirement, fact, how)
    # What is missing is named: the requirement, or a finding about the broken fact.
    if verdict is Verdict.UNKNOWN:
        assert any(f.verdict is Verdict.UNKNOWN for f in findings)


@pytest.mark.parametrize("control", list(REGISTRY))
def test_an_unmet_requirement_names_itself_and_its_verb(control: str) -> None:
    meta = REGISTRY[control].meta
    found = enforce_requirements(meta, POLICY, Facts(now=NOW, taken={}), [])
    named = {f.requirement: f for f in found}
    assert set(named) == {r.id for r in meta.requirements}
    for req in meta.requirements:
        text = named[req.id].message
        assert named[req.id].verdict is Verdict.UNKNOWN and req.gather in text and req.text in text


def test_a_pass_resting_on_stale_facts_becomes_unknown() -> None:
    meta = REGISTRY["zones"].meta
    facts = dataclasses.replace(complete(), taken={"flows": NOW - timedelta(days=30), "probes": TAKEN})
    findings = REGISTRY["zones"].evaluate(POLICY, facts)
    gated = enforce_requirements(meta, POLICY, facts, findings)
    observed = [f for f in gated if f.requirement == "approved-path-observed"]
    assert observed and all(f.verdict is Verdict.UNKNOWN and "stale" in f.message for f in observed)


def test_max_age_is_set_by_the_policy() -> None:
    from flow_kit import policy_variant

    def strict(doc: dict[str, Any]) -> None:
        doc["facts"] = {"max_age": "7d", "per_fact": {"probes": "30m"}}

    policy = policy_variant(strict)
    result = by_control(policy, complete())["admin_paths"]  # probes taken an hour ago: too old for 30m
    assert result.verdict is Verdict.UNKNOWN
    assert any("stale" in f.message and f.requirement == "deny-probe-blocked" for f in result.findings)




def test_a_flow_table_dates_itself() -> None:
    """Facts built in memory without ``taken``: the flows' own last_seen gives their age."""
    facts = Facts(now=NOW, flows=complete().flows, flow_evidence=("ev-flows",))
    verdict, findings = verdict_of("training_traffic", facts)
    observed = [f for f in findings if f.requirement == "approved-path-observed"]
    assert observed and all(f.verdict is Verdict.PASS for f in observed)
    later = dataclasses.replace(facts, now=NOW + timedelta(days=30))
    assert all(f.verdict is not Verdict.PASS for f in verdict_of("training_traffic", later)[1]
               if f.requirement == "approved-path-observed")
