"""``training_traffic``: a declared partition per job passes only on fresh facts proving both sides; every fact
taken away, or turned against it, leaves the verdict short of pass."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from ringfence.controls import training_traffic
from ringfence.controls.interface import Facts, Finding, Verdict
from ringfence.controls.requirements import enforce_requirements
from ringfence.facts import FactsFileError
from ringfence.facts.partitions import load
from ringfence.lab.policy_text import render_policy
from ringfence.lab.topology import build_topology
from ringfence.policy import Partition, Policy, parse_policy

TOPO = build_topology("rfpt", 4, 2)
BASE = parse_policy(render_policy(TOPO), "lab")
POLICY = BASE.model_copy(update={"jobs": tuple(j.model_copy(update={"partition": Partition(vlan=100 + i)})
                                               for i, j in enumerate(BASE.jobs))})
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
REQS = ("job-partition-permitted", "job-partition-denied")


def _probe(layer: str, src: str, src_job: str, dst: str, dst_job: str, expected: str, outcome: str,
           by_policy: bool | None) -> dict[str, Any]:
    return {"layer": layer, "source": src, "source_job": src_job, "destination": dst, "destination_job": dst_job,
            "address": TOPO.address(dst), "port": 0 if layer == "l2" else 29500, "expected": expected,
            "outcome": outcome, "by_policy": by_policy, "detail": ""}


def _doc() -> dict[str, Any]:
    probes = []
    for job, other, (r0, r1), o0 in (("train-a", "train-b", ("worker-0", "worker-1"), "worker-2"),
                                     ("train-b", "train-a", ("worker-2", "worker-3"), "worker-0")):
        probes += [_probe("l2", r1, job, r0, job, "allow", "answered", None),
                   _probe("l3", r1, job, r0, job, "allow", "connected", None),
                   _probe("l2", o0, other, r0, job, "deny", "silent", True),
                   _probe("l3", o0, other, r0, job, "deny", "timeout", True),
                   _probe("l3-routed", o0, other, r0, job, "deny", "timeout", True)]
    jobs = [{"job": j.name, "partitioned": True, "members": list(j.members),
             "ports": [TOPO.port(m) for m in j.members], "steps_before": dict.fromkeys(j.members, 10),
             "steps_after": dict.fromkeys(j.members, 14)} for j in TOPO.jobs]
    return {"format": "ringfence-partitions/1", "target": "lab:rfpt", "taken": NOW.isoformat(), "evidence": "ev-1",
            "jobs": jobs, "probes": probes}


def _judge(doc: dict[str, Any] | None, *, taken: datetime | None = NOW, policy: Policy = POLICY,
           now: datetime = NOW + timedelta(minutes=5)) -> list[Finding]:
    facts = Facts(now=now, partitions=doc, taken={"partitions": taken} if taken else {})
    found = enforce_requirements(training_traffic.meta, policy, facts, training_traffic.evaluate(policy, facts))
    return [f for f in found if f.requirement in REQS]


def _verdicts(found: list[Finding]) -> dict[str, set[Verdict]]:
    out: dict[str, set[Verdict]] = {r: set() for r in REQS}
    for f in found:
        out[f.requirement].add(f.verdict)
    return out


def _passes(found: list[Finding]) -> bool:
    return all(v == {Verdict.PASS} for v in _verdicts(found).values())


def test_both_sides_recorded_and_fresh_pass(tmp_path: Path) -> None:
    found = _judge(_doc())
    assert _passes(found), found
    assert all(f.evidence == ("ev-1",) for f in found)
    assert any("worker-0 10→14" in f.message for f in found)
    # the same document through the facts file loader
    path = tmp_path / "partitions.json"
    path.write_text(json.dumps(_doc()))
    loaded = load(path)
    assert loaded.taken == NOW and _passes(_judge(loaded.value))


def test_missing_or_stale_facts_are_unknown_with_what_to_run() -> None:
    for found in (_judge(None), _judge(_doc(), taken=None), _judge(_doc(), now=NOW + timedelta(days=30))):
        assert _verdicts(found) == {r: {Verdict.UNKNOWN} for r in REQS}, found
        assert all("ringfence partition prove" in f.message or "stale" in f.message or "not recorded" in f.message
                   for f in found)
    assert all("ringfence partition prove POLICY --target lab" in f.message for f in _judge(None))


def test_a_policy_without_partitions_asks_nothing() -> None:
    assert _judge(None, policy=BASE) == [] and _judge(_doc(), policy=BASE) == []


@pytest.mark.parametrize("index", range(10))
def test_each_probe_taken_away_leaves_no_pass(index: int) -> None:
    doc = _doc()
    del doc["probes"][index]
    assert not _passes(_judge(doc))


@pytest.mark.parametrize("index", [i for i, p in enumerate(_doc()["probes"]) if p["expected"] == "deny"])
def test_a_deny_not_shown_to_be_the_partitions_drop_is_unknown(index: int) -> None:
    for by_policy in (None, False):
        doc = _doc()
        doc["probes"][index]["by_policy"] = by_policy
        found = _judge(doc)
        assert Verdict.UNKNOWN in _verdicts(found)["job-partition-denied"] and not _passes(found)


@pytest.mark.parametrize("outcome", ["answered", "connected", "refused", "reset"])
def test_another_jobs_rank_reaching_a_member_fails(outcome: str) -> None:
    doc = _doc()
    (deny,) = [p for p in doc["probes"] if p["expected"] == "deny" and p["destination_job"] == "train-a"
               and p["layer"] == ("l2" if outcome == "answered" else "l3-routed")]
    deny["outcome"] = outcome
    found = _judge(doc)
    assert Verdict.FAIL in _verdicts(found)["job-partition-denied"]
    assert any("the partition does not hold" in f.message for f in found if f.verdict is Verdict.FAIL)


@pytest.mark.parametrize("layer", ["l2", "l3"])
def test_a_job_cut_off_inside_its_own_partition_fails(layer: str) -> None:
    doc = _doc()
    (allow,) = [p for p in doc["probes"] if p["expected"] == "allow" and p["destination_job"] == "train-b"
                and p["layer"] == layer]
    allow["outcome"] = "silent" if layer == "l2" else "timeout"
    assert Verdict.FAIL in _verdicts(_judge(doc))["job-partition-permitted"]


@pytest.mark.parametrize("member", ["worker-0", "worker-1", "worker-2", "worker-3"])
def test_training_not_shown_for_a_rank_leaves_no_pass(member: str) -> None:
    for where in ("stalled", "before", "after"):
        doc = _doc()
        job = next(j for j in doc["jobs"] if member in j["members"])
        if where == "stalled":
            job["steps_after"][member] = job["steps_before"][member]
        else:
            del job[f"steps_{where}"][member]
        found = _judge(doc)
        assert Verdict.UNKNOWN in _verdicts(found)["job-partition-permitted"] and not _passes(found), where


def test_a_job_probed_with_other_members_or_not_partitioned_is_unknown() -> None:
    for change in ({"members": ["worker-0"]}, {"partitioned": False}):
        doc = _doc()
        doc["jobs"][0].update(change)
        assert not _passes(_judge(doc))
    doc = _doc()
    del doc["jobs"][1]
    assert not _passes(_judge(doc))


def test_the_facts_file_is_strict(tmp_path: Path) -> None:
    for change in ({"format": "ringfence-partitions/2"}, {"taken": "2026-12-01T12:00:00"}, {"extra": 1}):
        doc = {**copy.deepcopy(_doc()), **change}
        path = tmp_path / "p.json"
        path.write_text(json.dumps(doc))
        with pytest.raises(FactsFileError):
            load(path)
    doc = _doc()
    doc["probes"][0]["layer"] = "l7"
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(FactsFileError):
        load(path)
