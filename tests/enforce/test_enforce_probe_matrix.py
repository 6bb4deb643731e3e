"""The probe matrix without a lab: what is planned, and when a denial counts — with a fake executor that
answers the probe program, the listening check and nft as a real host would."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from ringfence.controls._common import judge_probe
from ringfence.controls.admin_paths import meta as admin_meta
from ringfence.controls.interface import ProbeResult, Verdict
from ringfence.enforce.facts import FactsFileError, load_probe_facts, probes_document, write_json
from ringfence.enforce.probe_matrix import ProbePlan, ProbeSpec, behaviour_failed, plan_probes, run_probes
from ringfence.evidence import EvidenceStore
from ringfence.lab.policy_text import render_policy
from ringfence.lab.topology import build_topology
from ringfence.policy import Policy, parse_policy
from ringfence.targets.interface import RunResult, TargetError


@pytest.fixture(scope="module")
def two_jobs() -> Policy:
    return parse_policy(render_policy(build_topology("rfunit", 4, 2)), "two-jobs")


LISTENING = {"worker-0": frozenset({29500, 41000}), "worker-2": frozenset({29501}), "storage": frozenset({8080}),
             "mgmt": frozenset({8000, 22}), "external": frozenset({9000})}


def test_plan_covers_every_flow_zone_pairs_and_cross_job_collectives(two_jobs: Policy) -> None:
    plan = plan_probes(two_jobs, LISTENING)
    allow = {(p.source, p.destination, p.port, p.rule) for p in plan.probes if p.expected == "allow"}
    deny = {(p.source, p.destination, p.port) for p in plan.probes if p.expected == "deny"}
    assert {p.rule for p in plan.probes if p.expected == "allow"} == {f.id for f in two_jobs.approved}
    assert ("worker-1", "worker-0", 29500, "train-a-collective") in allow  # the rendezvous, not a pair listener
    assert ("jump", "mgmt", 22, "admin-ssh") in allow
    assert {("worker-0", "worker-2", 29501), ("worker-2", "worker-0", 29500)} <= deny  # each job vs the other
    assert {("user", "mgmt", 22), ("aux", "storage", 8080), ("worker-0", "external", 9000)} <= deny
    for src, dst, port in deny:  # nothing approved is ever expected to be denied
        assert not any(p.source == src and p.destination == dst and p.port == port
                       for p in plan.probes if p.expected == "allow")
    assert ("jump", "mgmt", 22) not in deny and ("user", "mgmt", 8000) not in deny
    assert any("zone user: no sensitive port" in s for s in plan.skipped)
    assert {p.app for p in plan.probes if p.rule == "admin-ssh"} == {"ssh"}


class FakeHost:
    """Answers the probe batch from a table, the listening check from a set, nft from counters it is told."""

    def __init__(self, name: str, outcomes: Mapping[tuple[str, int], str] | None = None,
                 listening: frozenset[int] = frozenset(), drops: Sequence[tuple[str, str, int]] = ()) -> None:
        self.name = name
        self.outcomes = dict(outcomes or {})
        self.listening = listening
        self.drops = list(drops)  # (saddr, daddr, dport) whose elements move when probed
        self.probed: list[tuple[str, int, int]] = []  # (host, port, sport)
        self.reads: dict[str, int] = {}

    def run(self, argv: Sequence[str], *, timeout: float = 30.0, stdin: bytes | None = None,
            env: Mapping[str, str] | None = None) -> RunResult:
        if argv[:2] == ["python3", "-c"] and len(argv) == 3:  # the listening check
            return RunResult(tuple(argv), 0, json.dumps(sorted(self.listening)).encode(), b"", 0.0)
        if argv[:2] == ["python3", "-c"]:
            rows = []
            for t in json.loads(argv[3]):
                sport = 40000 + len(self.probed)
                self.probed.append((t["host"], t["port"], sport))
                out = self.outcomes.get((t["host"], t["port"]), "timeout")
                app = (True if out == "connected" else None) if t["app"] else None
                rows.append({"outcome": out, "sport": sport, "app": app, "detail": ""})
            return RunResult(tuple(argv), 0, json.dumps(rows).encode(), b"", 0.0)
        if argv[:1] == ["nft"]:
            family = argv[4]
            self.reads[family] = self.reads.get(family, 0) + 1
            elems = [{"elem": {"val": {"concat": [s, d, "tcp", sport, dp]}, "counter": {"packets": 2, "bytes": 120}}}
                     for s, d, dp in self.drops for host, port, sport in SOURCES_PROBED if (host, port) == (d, dp)]
            doc = {"nftables": [{"set": {"name": "denied", "elem": elems if family == "inet" and self.reads[family] > 1
                                                         else []}}]}
            return RunResult(tuple(argv), 0, json.dumps(doc).encode(), b"", 0.0)
        raise AssertionError(argv)

    def spawn(self, *a: Any, **k: Any) -> Any:
        raise AssertionError("not used")

    def copy_to(self, local: Path, remote: str) -> None:
        raise AssertionError("not used")

    def copy_from(self, remote: str, local: Path) -> None:
        raise AssertionError("not used")


SOURCES_PROBED: list[tuple[str, int, int]] = []


def test_a_denial_counts_only_when_listening_dropped_and_counted(two_jobs: Policy, tmp_path: Path) -> None:
    user = FakeHost("user", {("10.77.3.10", 8000): "connected", ("10.77.1.10", 1025): "refused"})
    SOURCES_PROBED.clear()
    user.probed = SOURCES_PROBED
    fabric = FakeHost("fabric", drops=[("10.77.4.10", "10.77.3.10", 22)])
    mgmt = FakeHost("mgmt", listening=frozenset({22, 8000}))
    w0 = FakeHost("worker-0", listening=frozenset({29500}))
    plan = ProbePlan((
        ProbeSpec("user", "mgmt", "10.77.3.10", 8000, "allow", "http", "user-submit"),
        ProbeSpec("user", "mgmt", "10.77.3.10", 22, "deny"),  # listening, timed out, counted: proven
        ProbeSpec("user", "worker-0", "10.77.1.10", 1025, "deny"),  # refused: a closed port proves nothing
        ProbeSpec("user", "worker-0", "10.77.1.10", 29500, "deny"),  # timed out, but no counter moved
        ProbeSpec("user", "mgmt", "10.77.3.10", 2222, "deny"),  # timed out, but nothing listens there
    ))
    store = EvidenceStore.open(tmp_path / "ev")
    run = run_probes(two_jobs, plan, {"user": user, "fabric": fabric, "mgmt": mgmt, "worker-0": w0}, store,
                     target="fake")
    ok, proven, refused, uncounted, silent = run.results
    assert ok.outcome == "connected" and not behaviour_failed(ok)
    assert proven.by_policy is True and proven.rule == "denied@fabric/inet +2" and not behaviour_failed(proven)
    assert refused.outcome == "refused" and refused.by_policy is False and "proves nothing" in refused.detail
    assert uncounted.outcome == "timeout" and uncounted.by_policy is False and "no drop counter" in uncounted.detail
    assert silent.by_policy is False and "nothing listens" in silent.detail
    assert [behaviour_failed(r) for r in run.results] == [False, False, True, True, True]
    # the controls see the same: a refused probe is unknown, never a pass
    assert judge_probe(admin_meta, refused).verdict is Verdict.UNKNOWN
    assert judge_probe(admin_meta, proven).verdict is Verdict.PASS
    assert all(r.evidence == (run.evidence,) for r in run.results)
    rec = store.get(run.evidence).data
    assert rec["failures"] == 3 and len(rec["probes"]) == 5


def test_probe_facts_round_trip_and_bad_files(tmp_path: Path) -> None:
    results = (ProbeResult("user", "mgmt:22", "tcp", 22, "deny", "timeout", True, "d", ("ev-1",), "denied@x"),
               ProbeResult("jump", "mgmt:22", "tcp", 22, "allow", "connected", None))
    path = write_json(tmp_path / "probes.json", probes_document(results, target="lab:x", evidence="ev-1"))
    assert load_probe_facts(path) == results
    (tmp_path / "bad.json").write_text('{"format": "ringfence-probes/1",\n  "probes": [}')
    with pytest.raises(FactsFileError, match=r"bad.json:2@\d+: not JSON"):
        load_probe_facts(tmp_path / "bad.json")
    doc = probes_document(results, target="lab:x")
    doc["probes"][1]["outcome"] = "maybe"
    write_json(tmp_path / "field.json", doc)
    with pytest.raises(FactsFileError, match=r"field.json: probes\[1\].outcome"):
        load_probe_facts(tmp_path / "field.json")
    write_json(tmp_path / "other.json", {"format": "ringfence-ruleset/1"})
    with pytest.raises(FactsFileError, match="expected 'ringfence-probes/1'"):
        load_probe_facts(tmp_path / "other.json")


class BusyHost(FakeHost):
    """A busy source: each (host, port) answers from its own list of outcomes, one per try, keeping the timeouts."""

    def __init__(self, name: str, tries: Mapping[tuple[str, int], Sequence[str]]) -> None:
        super().__init__(name)
        self.tries = {k: list(v) for k, v in tries.items()}
        self.timeouts: list[tuple[str, int, float]] = []

    def run(self, argv: Sequence[str], *, timeout: float = 30.0, stdin: bytes | None = None,
            env: Mapping[str, str] | None = None) -> RunResult:
        if argv[:2] != ["python3", "-c"] or len(argv) == 3:
            return super().run(argv, timeout=timeout, stdin=stdin, env=env)
        rows = []
        for t in json.loads(argv[3]):
            self.timeouts.append((t["host"], t["port"], t["timeout"]))
            out = self.tries[(t["host"], t["port"])].pop(0)
            answer = out == "connected" or out == "no answer"
            rows.append({"outcome": "connected" if answer else out, "sport": 41000 + len(self.timeouts),
                         "app": (out == "connected") if t["app"] and answer else None,
                         "detail": "TimeoutError: timed out" if out in ("no answer", "timeout") else ""})
        return RunResult(tuple(argv), 0, json.dumps(rows).encode(), b"", 0.0)


def test_a_permitted_path_that_ran_out_of_time_is_tried_once_more_and_only_then_judged(
        two_jobs: Policy, tmp_path: Path) -> None:
    user = BusyHost("user", {("10.77.3.10", 8000): ["no answer", "connected"],  # slow answer through a sidecar
                             ("10.77.3.10", 8001): ["timeout", "timeout"],  # still nothing: a failure
                             ("10.77.3.10", 8002): ["refused"],  # refused is a fact: never tried again
                             ("10.77.3.10", 22): ["timeout"]})  # a deny is never tried again
    mgmt = FakeHost("mgmt", listening=frozenset({22, 8000, 8001, 8002}))
    plan = ProbePlan((
        ProbeSpec("user", "mgmt", "10.77.3.10", 8000, "allow", "http", "user-submit"),
        ProbeSpec("user", "mgmt", "10.77.3.10", 8001, "allow", "http", "user-submit"),
        ProbeSpec("user", "mgmt", "10.77.3.10", 8002, "allow", "", "user-submit"),
        ProbeSpec("user", "mgmt", "10.77.3.10", 22, "deny"),
    ))
    store = EvidenceStore.open(tmp_path / "ev")
    run = run_probes(two_jobs, plan, {"user": user, "mgmt": mgmt, "fabric": FakeHost("fabric")}, store,
                     target="fake", timeout=1.5)
    slow, dead, refused, deny = run.results
    assert slow.outcome == "connected" and not behaviour_failed(slow) and "second try" in slow.detail
    assert dead.outcome == "timeout" and behaviour_failed(dead)
    assert refused.outcome == "refused" and behaviour_failed(refused)
    assert deny.outcome == "timeout"
    assert sorted(user.timeouts) == sorted([("10.77.3.10", 8000, 1.5), ("10.77.3.10", 8001, 1.5),
                                            ("10.77.3.10", 8002, 1.5), ("10.77.3.10", 22, 1.5),
                                            ("10.77.3.10", 8000, 6.0), ("10.77.3.10", 8001, 6.0)])
    assert [p["tries"] for p in store.get(run.evidence).data["probes"]] == [2, 2, 1, 1]


class DownHost(FakeHost):
    """A host whose executor cannot reach it at all (an SSH host that stopped answering)."""

    def run(self, argv: Sequence[str], *, timeout: float = 30.0, stdin: bytes | None = None,
            env: Mapping[str, str] | None = None) -> RunResult:
        raise TargetError(f"{self.name}: ssh to root@{self.name} failed (probe): Connection refused")


def test_an_unreachable_source_keeps_its_probes_named_and_unproven(two_jobs: Policy, tmp_path: Path) -> None:
    user = FakeHost("user", {("10.77.3.10", 8000): "connected"})
    down = DownHost("worker-1")
    mgmt = FakeHost("mgmt", listening=frozenset({22, 8000}))
    plan = ProbePlan((
        ProbeSpec("user", "mgmt", "10.77.3.10", 8000, "allow", "http", "user-submit"),
        ProbeSpec("worker-1", "mgmt", "10.77.3.10", 8000, "allow", "http", "report"),
        ProbeSpec("worker-1", "mgmt", "10.77.3.10", 22, "deny"),
    ))
    store = EvidenceStore.open(tmp_path / "ev")
    run = run_probes(two_jobs, plan, {"user": user, "worker-1": down, "mgmt": mgmt, "fabric": FakeHost("fabric")},
                     store, target="fake")
    ok, allow_down, deny_down = run.results
    assert ok.outcome == "connected"
    assert allow_down.outcome == deny_down.outcome == "unreachable"
    assert "worker-1 unreachable" in allow_down.detail and deny_down.by_policy is not True
    assert judge_probe(admin_meta, deny_down).verdict is Verdict.UNKNOWN  # never a pass
    assert len(store.get(run.evidence).data["probes"]) == 3  # nothing silently skipped


class _Slow:
    """A host whose every command runs past its bound (a busy SSH host)."""

    name = "slow"

    def run(self, argv: Sequence[str], *, timeout: float = 30.0, stdin: bytes | None = None,
            env: Mapping[str, str] | None = None) -> RunResult:
        return RunResult(tuple(argv), -9, b"", b"", timeout, timed_out=True)


def test_a_denied_set_read_that_times_out_is_unknown_not_an_error_or_empty() -> None:
    from ringfence.enforce.probe_matrix import denied_counters

    # left out (what a probe judged against it cannot use), never read as an empty set, never a crash
    assert denied_counters({"worker-0": _Slow()}) == {}


def test_a_range_service_is_probed_where_it_listens() -> None:
    # srun binds a random port of its SrunPortRange: the plan probes that one, not the range's first
    policy = parse_policy(render_policy(build_topology("rfunit"), slurm=True), "slurm")
    listening = {**LISTENING, "worker-0": frozenset({29500, 41000, 818, 61007}), "worker-1": frozenset({818}),
                 "mgmt": frozenset({8000, 22, 6817})}
    plan = plan_probes(policy, listening)
    srun = {(p.expected, p.source, p.port) for p in plan.probes if p.destination == "worker-0" and p.port > 60999}
    assert ("allow", "worker-1", 61007) in srun and ("allow", "mgmt", 61007) in srun
    assert ("deny", "aux", 61007) in srun and all(port == 61007 for *_, port in srun)
    quiet = plan_probes(policy, {**listening, "worker-0": frozenset({29500, 818})})  # no srun: the range's first
    assert {p.port for p in quiet.probes if p.destination == "worker-0" and p.port > 60999} == {61000}
