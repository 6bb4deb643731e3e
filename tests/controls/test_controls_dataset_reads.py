"""storage_flows' acceptance from traces: a traced dataset read, and an unrelated workload that cannot repeat it.

Each piece of the proof is taken away (or falsified) in turn: the control never passes without it.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from test_controls_requirements import POLICY, TRACES, complete, verdict_of

from ringfence.controls.interface import Facts, Verdict
from ringfence.facts import traces as trace_facts
from ringfence.trace.reconstruct import load, reconstruct

AUX, W0, W1, STORAGE = "10.77.1.50", "10.77.1.10", "10.77.1.11", "10.77.2.10"
READ_REQ, REFUSED_REQ = "dataset-read-traced", "unrelated-read-refused"


def _with(traces: Any) -> Facts:
    return dataclasses.replace(complete(), traces=tuple(traces))


def _edit(fn: Callable[[list[dict[str, Any]]], None]) -> Facts:
    traces = copy.deepcopy(list(TRACES))
    fn(traces)
    return _with(traces)


def _req(facts: Facts, req: str) -> list[Verdict]:
    _, findings = verdict_of("storage_flows", facts)
    return [f.verdict for f in findings if f.requirement == req]


def test_the_complete_proof_passes_both_sides() -> None:
    verdict, findings = verdict_of("storage_flows", complete())
    assert verdict is Verdict.PASS
    passed = {f.requirement: f.message for f in findings if f.verdict is Verdict.PASS}
    assert "spiffe://lab/job/train-a" in passed[READ_REQ] and "tls-gate" in passed[READ_REQ]
    assert "fabric dropped aux" in passed[REFUSED_REQ]


def _no_objects(t: list[dict[str, Any]]) -> None:
    t[0]["objects"] = []


def _refused_not_served(t: list[dict[str, Any]]) -> None:
    t[0]["objects"][0]["result"] = "refused"


def _checkpoint_not_dataset(t: list[dict[str, Any]]) -> None:
    t[0]["objects"][0]["path"] = "/checkpoints/train-a/step-1"


def _a_write(t: list[dict[str, Any]]) -> None:
    t[0]["objects"][0]["method"] = "PUT"


def _no_identity(t: list[dict[str, Any]]) -> None:
    t[0]["objects"][0]["identity"] = None
    t[0]["src"]["identity"] = None


def _no_denied_trace(t: list[dict[str, Any]]) -> None:
    del t[1]


def _denied_elsewhere(t: list[dict[str, Any]]) -> None:
    t[1]["flow"]["dport"] = 9999


def _denied_member(t: list[dict[str, Any]]) -> None:
    t[1]["src"] = {"node": "worker-1"}
    t[1]["flow"]["src"] = W1


def _denied_unattributed(t: list[dict[str, Any]]) -> None:
    t[1]["attributed"] = False


def _denied_but_accepted(t: list[dict[str, Any]]) -> None:
    t[1]["decision"]["verdict"] = "accept"


def _job_mismatch(t: list[dict[str, Any]]) -> None:
    t[0]["objects"][0]["job"] = "train-b"  # the log's job and the path disagree: not a read of a known dataset


@pytest.mark.parametrize(("how", "req"), [
    (_no_objects, READ_REQ), (_refused_not_served, READ_REQ), (_checkpoint_not_dataset, READ_REQ),
    (_a_write, READ_REQ), (_no_identity, READ_REQ), (_job_mismatch, READ_REQ),
    (_no_denied_trace, REFUSED_REQ), (_denied_elsewhere, REFUSED_REQ), (_denied_member, REFUSED_REQ),
    (_denied_unattributed, REFUSED_REQ), (_denied_but_accepted, REFUSED_REQ),
])
def test_each_piece_taken_away_never_passes(how: Callable[[list[dict[str, Any]]], None], req: str) -> None:
    facts = _edit(how)
    verdict, findings = verdict_of("storage_flows", facts)
    assert verdict is not Verdict.PASS, how.__name__
    mine = [f for f in findings if f.requirement == req]
    assert mine and all(f.verdict is not Verdict.PASS for f in mine), how.__name__


def test_a_served_read_to_a_non_member_fails() -> None:
    def aux_reads(t: list[dict[str, Any]]) -> None:
        # the object record even carries train-a's identity: from aux's address that is no member's read
        t.append({**copy.deepcopy(t[0]), "src": {"node": "aux", "identity": "spiffe://lab/node/aux"},
                  "flow": {**t[0]["flow"], "src": AUX}})

    verdict, findings = verdict_of("storage_flows", _edit(aux_reads))
    assert verdict is Verdict.FAIL
    [bad] = [f for f in findings if f.verdict is Verdict.FAIL]
    assert bad.requirement == REFUSED_REQ and "no member of job train-a" in bad.message


def _refusal(path: str, *, tls: bool = False, node: str = "aux") -> dict[str, Any]:
    base: dict[str, Any] = {"sample": "allowed", "attributed": True,
                            "flow": {"src": AUX, "sport": 43000, "dst": STORAGE, "dport": 8080},
                            "decision": {"rule": "aux-any", "verdict": "accept"}, "src": {"node": node},
                            "dst": {"node": "storage"}, "objects": [], "tls": []}
    if tls:
        base["tls"] = [{"direction": "in", "node": "storage", "peer": AUX, "identity": "spiffe://lab/node/aux",
                        "method": "GET", "path": path, "result": "denied", "reason": "no rule for node:aux"}]
    else:
        base["objects"] = [{"method": "GET", "path": path, "job": path.split("/")[2], "result": "refused",
                            "bytes": 0, "identity": None, "joined": "5-tuple"}]
    return base


@pytest.mark.parametrize(("extra", "passes"), [
    (_refusal("/datasets/train-a/shard-1"), True),  # the object server refused the same dataset
    (_refusal("/datasets/train-a/shard-4", tls=True), True),  # its TLS gate denied it
    (_refusal("/datasets/train-b/shard-1"), False),  # another dataset: not a repetition of the traced read
    (_refusal("/datasets/train-a/shard-1", node="worker-1"), False),  # a member refused proves nothing
])
def test_the_object_server_refusing_an_unrelated_workload_is_the_denied_side(extra: dict[str, Any],
                                                                            passes: bool) -> None:
    facts = _with([TRACES[0], extra])
    assert (Verdict.PASS in _req(facts, REFUSED_REQ)) is passes


def test_a_reconstructed_trace_loaded_as_facts_proves_the_read(tmp_path: Path) -> None:
    """The whole path: recorded logs → reconstruct → trace JSON → the facts loader → the control."""
    t = time.time()
    (tmp_path / "storage.ulogd").write_text(json.dumps({
        "dvc": "storage", "oob.prefix": "train-a-storage", "oob.time.sec": int(t), "oob.time.usec": 0, "raw.label": 1,
        "ip.protocol": 6, "src_port": 41000, "dest_port": 8080, "src_ip": W0, "dest_ip": STORAGE}) + "\n")
    (tmp_path / "storage.objects").write_text(json.dumps({
        "time": t + 0.01, "peer": W0, "peer_port": 41000, "local": STORAGE, "local_port": 8080,
        "identity": "spiffe://lab/job/train-a", "method": "GET", "path": "/datasets/train-a/shard-2",
        "job": "train-a", "result": "served", "bytes": 131072}) + "\n")
    tel = load([("storage", "ulogd", tmp_path / "storage.ulogd"), ("storage", "objects", tmp_path / "storage.objects")])
    doc = tmp_path / "trace-read.json"
    doc.write_text(reconstruct(tel, POLICY, "allowed", objects="served").model_dump_json())
    loaded = trace_facts.load(doc)
    assert loaded.taken is not None
    # judged now: the trace was reconstructed now, not at the fixed time of the hand-made facts
    facts = dataclasses.replace(complete(), traces=(loaded.value, TRACES[1]), now=datetime.now(UTC),
                                taken={**complete().taken, "traces": loaded.taken})
    assert _req(facts, READ_REQ) == [Verdict.PASS] and Verdict.PASS in _req(facts, REFUSED_REQ)
