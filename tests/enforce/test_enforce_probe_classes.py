"""The probe matrix by equivalence classes: a 10,000-node / 500-job fleet has every (source zone or job,
destination class) covered by a sampled class whose probes carry its verdict; ``auto`` keeps all pairs for
the lab; a class run records each class's sample size. No lab: fake hosts, as in the all-pairs tests."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from test_enforce_probe_matrix import FakeHost

from ringfence.cli import main
from ringfence.enforce.probe_classes import CLASSES_FROM, PlanMode, class_probe_plan, resolve_mode
from ringfence.enforce.probe_matrix import _approved, probe_policy
from ringfence.evidence import EvidenceStore
from ringfence.lab.policy_text import render_policy
from ringfence.lab.topology import build_topology
from ringfence.policy import Policy, parse_policy
from ringfence.policy.matrix import resolve

JOBS, RANKS, STORAGE, MGMT, USERS, EXTERNAL = 500, 18, 800, 100, 90, 10  # 10,000 nodes


def _fleet_doc() -> dict[str, Any]:
    def addr(block: int, i: int) -> str:
        return f"10.{block}.{i // 256}.{i % 256}"

    nodes: list[dict[str, Any]] = []
    jobs, services, approved = [], [], []
    for j in range(JOBS):
        members = [f"w{j * RANKS + k}" for k in range(RANKS)]
        nodes += [{"name": m, "zone": "workload", "addresses": [addr(1, j * RANKS + k)]} for k, m in enumerate(members)]
        jobs.append({"name": f"job{j}", "identity": f"spiffe://fleet/job/{j}", "members": members})
        approved += [
            {"id": f"job{j}-coll", "from": {"job": f"job{j}"}, "to": {"job": f"job{j}"}, "ports": "1024-65535",
             "class": "collective"},
            {"id": f"job{j}-data", "from": {"job": f"job{j}"}, "to": {"zone": "storage"}, "ports": 8080,
             "class": "storage"},
            {"id": f"job{j}-api", "from": {"job": f"job{j}"}, "to": {"zone": "management"}, "ports": 8000,
             "class": "management"},
        ]  # fmt: skip
    for kind, zone, block, count in (("st", "storage", 2, STORAGE), ("mg", "management", 3, MGMT),
                                     ("us", "user", 4, USERS), ("ex", "external", 9, EXTERNAL)):  # fmt: skip
        for i in range(count):
            nodes.append({"name": f"{kind}{i}", "zone": zone, "addresses": [addr(block, i)]})
            if kind == "st":
                services.append({"name": f"st{i}-svc", "node": f"st{i}", "port": 8080, "class": "storage"})
            if kind == "mg":
                services.append({"name": f"mg{i}-api", "node": f"mg{i}", "port": 8000, "class": "management"})
                services.append({"name": f"mg{i}-ssh", "node": f"mg{i}", "port": 22, "class": "management",
                                 "admin": True})  # fmt: skip
    approved.append({"id": "users-api", "from": {"zone": "user"}, "to": {"zone": "management"}, "ports": 8000,
                     "class": "management"})  # fmt: skip
    req = {"protection": "required"}
    return {"cluster": "fleet", "classes": dict.fromkeys(("storage", "collective", "management", "replication"), req),
            "nodes": nodes, "jobs": jobs, "services": services, "approved": approved,
            "zones": [{"name": z} for z in ("workload", "storage", "management", "user")]
            + [{"name": "external", "trust": "external"}]}  # fmt: skip


@pytest.fixture(scope="module")
def fleet() -> Policy:
    return parse_policy(json.dumps(_fleet_doc()), "fleet")


def test_fleet_plan_covers_every_class_with_its_verdict(fleet: Policy) -> None:
    assert len(fleet.nodes) == 10_000 and len(fleet.jobs) == 500
    assert resolve_mode(PlanMode.AUTO, fleet) is PlanMode.CLASSES
    plan, classes = class_probe_plan(fleet, {}, sample=2, seed=3)
    groups = {f"zone:{z.name}" for z in fleet.zones} | {f"job:{j.name}" for j in fleet.jobs}
    # every destination service and job collective belongs to a destination class some class names
    dests = {c.destination for c in classes.classes}
    assert {"collective of job job0", "collective of job job499"} <= dests
    pairs = {(c.group, c.destination) for c in classes.classes}
    uncovered = {(g, d) for g in groups for d in dests} - pairs
    assert not uncovered, sorted(uncovered)[:5]  # every (group, destination class) has a class, and so a probe
    assert all(1 <= len(c.probes) <= 2 for c in classes.classes)  # the stated sample, at least one each
    # the verdict classes of a (group, destination) split the group's nodes between them: none left out
    size = {f"zone:{z.name}": sum(n.zone == z.name for n in fleet.nodes) for z in fleet.zones}
    size |= {f"job:{j.name}": len(j.members) for j in fleet.jobs}
    per_pair: dict[tuple[str, str], int] = {}
    for c in classes.classes:
        per_pair[(c.group, c.destination)] = per_pair.get((c.group, c.destination), 0) + c.sources
    assert all(per_pair[(g, d)] == size[g] for g, d in pairs)
    # and each probe's verdict is the policy's, judged independently by the all-pairs matrix's rule lookup
    assert len(plan.probes) == sum(len(c.probes) for c in classes.classes)
    m = resolve(fleet)
    addrs = {n.name: n.addresses[0] for n in fleet.nodes}
    for p in random.Random(5).sample(plan.probes, 100):
        assert (_approved(m, addrs, p.source, p.destination, p.port) is not None) == (p.expected == "allow"), p
    allow = [p for p in plan.probes if p.expected == "allow"]
    assert {p.rule for p in allow} >= {"job0-coll", "job0-data", "job0-api", "users-api"}
    cross = "class job:job0 → collective of job job1"
    assert any(p.expected == "deny" and p.why.startswith(cross) for p in plan.probes)


def test_auto_keeps_all_pairs_for_the_lab() -> None:
    lab = parse_policy(render_policy(build_topology("rfunit", 4, 2)), "two-jobs")
    assert len(lab.nodes) < CLASSES_FROM
    assert resolve_mode(PlanMode.AUTO, lab) is PlanMode.PAIRS
    assert resolve_mode(PlanMode.CLASSES, lab) is PlanMode.CLASSES


def test_a_class_run_prints_and_records_the_sample_per_class(tmp_path: Path) -> None:
    lab = parse_policy(render_policy(build_topology("rfunit", 4, 2)), "two-jobs")
    listening = {"worker-0": frozenset({29500}), "worker-2": frozenset({29501}), "storage": frozenset({8080}),
                 "mgmt": frozenset({8000, 22}), "external": frozenset({9000})}  # fmt: skip
    points = {n.name: FakeHost(n.name, listening=listening.get(n.name, frozenset())) for n in lab.nodes}
    points["fabric"] = FakeHost("fabric")
    said: list[str] = []
    store = EvidenceStore.open(tmp_path / "ev")
    run = probe_policy(lab, points, store, target="fake", mode="classes", sample=1,  # type: ignore[arg-type]
                       progress=said.append)
    rec = store.get(run.evidence).data["plan"]
    assert rec["mode"] == "classes" and rec["sample"] == 1 and rec["classes"] == len(rec["per_class"])
    assert all(c["sampled"] == 1 for c in rec["per_class"])
    assert sum(c["sampled"] for c in rec["per_class"] if c["proto"] == "tcp") == len(run.results)
    assert any(line.startswith(f"plan: {rec['classes']} probe classes") and "sample 1 per class" in line
               for line in said)  # fmt: skip
    pairs = probe_policy(lab, points, store, target="fake", progress=said.append)  # type: ignore[arg-type]
    assert store.get(pairs.evidence).data["plan"] == {"mode": "pairs"}  # the default for a small policy


@pytest.mark.parametrize(
    ("flags", "message"), [(["--sample", "0"], "--sample: must be at least 1"),
                           (["--plan", "pairs", "--sample", "3"], "does not go with --plan pairs")],
)  # fmt: skip
def test_bad_sample_flags_exit_2(flags: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe", "examples/lab-policy.yaml", *flags]) == 2
    assert message in capsys.readouterr().err
