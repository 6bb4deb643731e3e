"""Fleet-scale probe planning: every (source group, destination class, verdict) once, sampled, verdicts
that agree with the classifier, and classes that are true equivalence classes."""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from flow_kit import flows, lab_policy
from ringfence.analyze import classify
from ringfence.analyze.probe_plan import DEFAULT_RENDEZVOUS, plan_fleet_probes
from ringfence.policy import Policy

POLICY = lab_policy()


def _verdicts(policy: Policy, probes: list[tuple[str, str, int, str]]) -> list[str | None]:
    """The rule the classifier approves each (source node, destination node, port, proto) with."""
    addr = {n.name: n.addresses[0] for n in policy.nodes}
    rows = [
        {"src": addr[s], "dst": addr[d], "dport": p, "proto": 6 if pr == "tcp" else 17} for s, d, p, pr in probes
    ]
    return classify(flows(rows), policy).column("rule").to_pylist()


def test_every_group_meets_every_destination_class_with_the_classifiers_verdict() -> None:
    plan = plan_fleet_probes(POLICY, sample=2, seed=3)
    groups = {f"zone:{z.name}" for z in POLICY.zones} | {f"job:{j.name}" for j in POLICY.jobs}
    by_pair = defaultdict(list)
    for c in plan.classes:
        by_pair[(c.group, c.destination)].append(c)
        assert 1 <= len(c.probes) <= min(2, c.sources)
        assert len({p.source for p in c.probes}) == len(c.probes)  # distinct sources
        assert all(p.source != p.destination for p in c.probes)
        assert (c.verdict == "allow") == (c.rule is not None)
    covered_groups = {g for g, _ in by_pair}
    skipped_groups = {s.split(" ")[0].rstrip(":") for s in plan.skipped}
    assert covered_groups | skipped_groups == groups
    # the classifier agrees with every sampled probe's verdict
    probes = [(p.source, p.destination, p.port, p.proto) for c in plan.classes for p in c.probes]
    rules = [c.rule for c in plan.classes for _ in c.probes]
    assert _verdicts(POLICY, probes) == rules
    # both sides are shown: some allowed, some denied (the lab approves storage and ssh from jump only)
    assert {c.verdict for c in plan.classes} == {"allow", "deny"}
    ssh = [c for c in plan.classes if "mgmt-ssh" in c.destination]
    assert {(c.group, c.verdict) for c in ssh} >= {("zone:admin", "allow"), ("zone:workload", "deny")}


def test_classes_are_equivalence_classes() -> None:
    # Every source node of a class — not only the sampled ones — gets the class's verdict.
    plan = plan_fleet_probes(POLICY, sample=50)  # larger than any group: the sample is the whole class
    probes, rules = [], []
    for c in plan.classes:
        assert len(c.probes) == c.sources or c.services == 1 and len(c.probes) >= c.sources - 1
        probes += [(p.source, p.destination, p.port, p.proto) for p in c.probes]
        rules += [c.rule] * len(c.probes)
    assert _verdicts(POLICY, probes) == rules


def test_rendezvous_port_from_listening_or_assumed() -> None:
    job = POLICY.jobs[0]
    assumed = [c for c in plan_fleet_probes(POLICY).classes if c.destination == f"collective of job {job.name}"]
    lo, hi = job.collective_range
    assert assumed and all(c.port_assumed for c in assumed)
    assert {c.port for c in assumed} == {DEFAULT_RENDEZVOUS if lo <= DEFAULT_RENDEZVOUS <= hi else lo}
    seen = plan_fleet_probes(POLICY, listening={job.members[0]: frozenset({22, 29511})}).classes
    mine = [c for c in seen if c.destination == f"collective of job {job.name}"]
    assert {c.port for c in mine} == {29511} and not any(c.port_assumed for c in mine)


def test_same_seed_same_plan_and_bad_sample() -> None:
    assert plan_fleet_probes(POLICY, sample=2, seed=5) == plan_fleet_probes(POLICY, sample=2, seed=5)
    with pytest.raises(ValueError):
        plan_fleet_probes(POLICY, sample=0)


def test_fleet_scale_plan_stays_proportional_to_classes() -> None:
    # 2,000 nodes in 100 jobs: classes grow with groups x destination classes, never with node pairs.
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from bench_classify import build_policy_dict

    policy = Policy.model_validate_json(json.dumps(build_policy_dict(2000, jobs=100)))
    plan = plan_fleet_probes(policy, sample=1)
    groups = len(policy.zones) + len(policy.jobs)
    dests = {c.destination for c in plan.classes}
    assert len({(c.group, c.destination) for c in plan.classes}) == groups * len(dests)
    assert len(plan.probes) == len(plan.classes) < groups * len(dests) * 2
    cross = [c for c in plan.classes if c.group == "job:job1" and c.destination == "collective of job job2"]
    assert [c.verdict for c in cross] == ["deny"]


def test_probes_come_only_from_reachable_nodes_and_an_unreachable_class_is_said() -> None:
    everyone = plan_fleet_probes(POLICY, sample=2, seed=1)
    reachable = {"worker-0", "mgmt", "jump", "storage"}  # worker-1, aux, user, external have no executor
    some = plan_fleet_probes(POLICY, sample=2, seed=1, reachable=reachable)
    assert all(p.source in reachable for c in some.classes for p in c.probes)
    assert {c.sources for c in some.classes} <= {c.sources for c in everyone.classes}  # counts stay whole
    # the user zone has only the user node: none of its classes can be probed, and the plan says so
    assert not [c for c in some.classes if c.group == "zone:user"]
    assert any(s.startswith("zone:user") and "can be reached" in s for s in some.skipped)
