"""The facts schemas: what the gathering verbs write validates; anything else is ``file: field: problem``.

Hypothesis throws truncated, corrupted and arbitrary JSON at every loader: the only exception that may
come out is :class:`FactsFileError` (exit 2 in the CLI), never a traceback or a RecursionError.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ringfence.controls.interface import ProbeResult, Verdict
from ringfence.facts import LOADERS, FactsFileError, changes, containment, keys, probes, ruleset
from ringfence.observe.schema import CLASSIFIED_SCHEMA
from ringfence.policy import load_policy
from ringfence.secure.verify import judge
from ringfence.secure.verify_types import CredentialCheck, FailClosedResult, RotationResult

REPO = Path(__file__).resolve().parents[2]
POLICY = load_policy(REPO / "examples" / "lab-policy.yaml")
NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)


def _write(path: Path, doc: Any) -> Path:
    path.write_text(json.dumps(doc))
    return path


def test_probes_round_trip(tmp_path: Path) -> None:
    results = (ProbeResult("aux", "mgmt:22", "tcp", 22, "deny", "timeout", True, "counter", ("ev-1",), "drop"),)
    loaded = probes.load(_write(tmp_path / "p.json", probes.probes_document(results, target="lab:x", taken=NOW)))
    assert loaded.value == results and loaded.taken == NOW


def _verify_keys() -> dict[str, Any]:
    flows = pa.Table.from_pydict(
        {f.name: [{"src": "10.77.1.10", "dst": "10.77.2.10", "sport": 1, "dport": 8080, "proto": 6, "packets": 1,
                   "bytes": 100, "payload_bytes": 50, "class": "storage", "protection": "encrypted",
                   "protocol": "tls1.3", "source": "t", "reason": "tls"}.get(f.name)] for f in CLASSIFIED_SCHEMA},
        schema=CLASSIFIED_SCHEMA,
    )
    rot = RotationResult("tls", ("storage",), True, 0.1, 0.2, 0.1, 0, True, True, Verdict.PASS, "ok", ("a",), ("b",),
                         NOW.isoformat())
    fc = FailClosedResult("tls", "storage", "untrusted cert", True, "refused", 0, 1, True, Verdict.PASS, "ok")
    cred = CredentialCheck("expired", "spiffe://lab/node/storage", "ab", "refused", "refused", Verdict.PASS, "ok")
    inventory = [{"kind": "certificate", "node": "storage", "identity": "spiffe://lab/node/storage",
                  "fingerprint": "ab", "not_after": NOW.isoformat()}, {"kind": "ca", "fingerprint": "cd"},
                 {"kind": "wireguard", "node": "worker-0", "public_key": "k="}]
    report = judge(flows, POLICY, {"storage": "tls"}, now=NOW, rotation=[rot], fail_closed=[fc], credentials=[cred],
                   inventory=inventory)
    doc = report.facts_keys()
    doc["evidence"] = ["ev-1"]
    return doc


def test_what_verify_keys_writes_validates(tmp_path: Path) -> None:
    doc = _verify_keys()
    loaded = keys.load(_write(tmp_path / "k.json", doc))
    assert loaded.taken == NOW
    assert loaded.value["rotations"][0]["ok"] is True and loaded.value["inventory"][0]["kind"] == "certificate"


def test_an_untimed_rotation_validates_and_proves_nothing(tmp_path: Path) -> None:
    doc = _verify_keys()
    doc["rotations"][0]["at"] = ""
    assert keys.load(_write(tmp_path / "k.json", doc)).value["rotations"][0]["at"] == ""


def _ruleset() -> dict[str, Any]:
    point = {"present": True, "audit": False, "rules": 3, "flows": ["f"], "expected_flows": ["f"], "missing_flows": [],
             "extra_flows": [], "accepted_packets": {"f": 3}, "drop_packets": 1, "drop_bytes": 60, "contained": [],
             "collectors": []}
    return {"format": ruleset.RULESET_FORMAT, "target": "lab:x", "cluster": "lab", "taken": NOW.isoformat(),
            "points": {"fabric": {**point, "enforced": True, "bridge": point}}, "egress": [],
            "denied": [{"source": "10.77.1.50", "destination": "10.77.2.10", "proto": "tcp", "port": 8080,
                        "packets": 1, "bytes": 60, "where": ["fabric/inet"]}], "version": 2, "raw_evidence": None}


def _changes() -> dict[str, Any]:
    change = {"id": "ev-1", "evidence": "ev-1", "time": "2026-11-30T10:00:00.000001Z",
              "applied_at": "2026-11-30T10:00:00.000001Z", "source": "enforce.apply", "action": "apply",
              "target": "lab:x", "version": 1, "previous": None, "audit": False, "scopes": ["fabric"],
              "subject": None, "diff_lines": 4, "flows": 7, "approved_by": "cab", "ticket": None,
              "verified": True, "verified_by": "ev-2"}
    return changes.changes_document([change], target="lab:x", taken=NOW)


def _containment() -> dict[str, Any]:
    probe = probes.probe_to_json(ProbeResult("mgmt", "aux:22", "tcp", 22, "deny", "timeout", True))
    return {"format": containment.CONTAINMENT_FORMAT, "target": "lab:x", "started": NOW.isoformat(),
            "subject": {"kind": "node", "name": "aux", "nodes": ["aux"], "addresses": ["10.77.1.50"]},
            "contained": True, "isolated": True, "collector_reachable": True, "points": {"node": True, "fabric": True},
            "others_training": True, "training": {}, "released": True, "release_verified": True, "snapshot": {},
            "probes": [probe], "release_probes": [], "evidence": ["ev-3"], "ok": True, "seconds": 1.5}


def _drill() -> dict[str, Any]:
    from ringfence.drill.interface import Attempt, Bystander, DrillReport

    return DrillReport("exfiltration", "lab:x", NOW.isoformat(), NOW.isoformat(),
                       (Attempt("direct", "worker-0", "external (10.77.9.10:9000)", "a checkpoint out", False,
                                "default drop@fabric/inet", True, "NFLOG deny", 0.2, 0),),
                       Bystander("train-b", ("worker-2", "worker-3"), 3, 9, 0.5, 10.0), True).to_json()


DOCS = {"keys": _verify_keys, "ruleset": _ruleset, "changes": _changes, "containment": _containment,
        "probes": lambda: probes.probes_document((), target="lab:x", taken=NOW), "drills": _drill}


@pytest.mark.parametrize("kind", sorted(DOCS))
def test_every_kind_validates_what_its_verb_writes_and_says_when(kind: str, tmp_path: Path) -> None:
    loaded = LOADERS[kind](_write(tmp_path / f"{kind}.json", DOCS[kind]()))
    assert loaded.taken is not None and loaded.taken.tzinfo is not None


def test_containment_drills_need_both_points(tmp_path: Path) -> None:
    value = containment.load(_write(tmp_path / "c.json", _containment())).value
    assert value["drills"][0] | {"evidence": []} == value["drills"][0] | {"evidence": []}
    assert value["drills"][0]["points"] == {"node": True, "fabric": True} and value["drills"][0]["restored"] is True


@pytest.mark.parametrize(
    ("kind", "path", "value", "field"),
    [
        ("probes", ("probes",), [{"source": "a"}], "probes[0].destination"),
        ("probes", ("taken",), "2026-11-30T10:00:00", "taken"),
        ("ruleset", ("denied", 0, "packets"), "3", "denied[0].packets"),
        ("changes", ("changes", 0, "verified"), "yes", "changes[0].verified"),
        ("changes", ("changes", 0, "applied_at"), "2026-11-30 10:00", "changes[0].applied_at"),
        ("containment", ("isolated",), "yes", "isolated"),
        ("containment", ("points", "fabric"), None, "points.fabric"),
        ("keys", ("inventory", 0, "not_after"), "2026-12-01T00:00:00", "inventory[0].not_after"),
        ("keys", ("mismatch",), [{"layer": "tls", "failed_closed": "true"}], "mismatch[0].failed_closed"),
    ],
)
def test_a_bad_field_is_named(tmp_path: Path, kind: str, path: tuple[Any, ...], value: Any, field: str) -> None:
    doc = DOCS[kind]()
    target = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    file = _write(tmp_path / f"{kind}.json", doc)
    with pytest.raises(FactsFileError) as exc:
        LOADERS[kind](file)
    assert exc.value.where == f"{file}: {field}", exc.value.message


def test_wrong_format_and_bad_json_are_named(tmp_path: Path) -> None:
    with pytest.raises(FactsFileError, match="format.*expected 'ringfence-probes/1'"):
        probes.load(_write(tmp_path / "p.json", {"format": "ringfence-ruleset/1"}))
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": \n  "x",')
    with pytest.raises(FactsFileError) as exc:
        probes.load(bad)
    assert exc.value.where.startswith(f"{bad}:2@")  # line and byte offset, as every bounded JSON error
    with pytest.raises(FactsFileError, match="cannot read"):
        probes.load(tmp_path / "missing.json")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=30,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(sorted(DOCS)), cut=st.integers(min_value=0, max_value=4000),
       noise=st.binary(max_size=8), value=json_values)
def test_loaders_survive_truncated_corrupted_and_arbitrary_input(
    tmp_path: Path, kind: str, cut: int, noise: bytes, value: Any
) -> None:
    text = json.dumps(DOCS[kind]()).encode()
    candidates = [text[:cut], text[:cut] + noise + text[cut + len(noise):], json.dumps(value).encode()]
    for i, data in enumerate(candidates):
        file = tmp_path / f"{kind}-{i}.json"
        file.write_bytes(data)
        try:
            LOADERS[kind](file)
        except FactsFileError as exc:
            assert str(file) in exc.where


def test_a_probe_whose_source_host_was_unreachable_loads(tmp_path: Path) -> None:
    # `ringfence probe --target ssh` keeps a down host's probes as "unreachable": the file must load.
    doc = {"format": "ringfence-probes/1", "target": "ssh", "taken": NOW.isoformat(), "probes": [{
        "source": "worker-1", "destination": "storage:8080", "proto": "tcp", "port": 8080, "expected": "allow",
        "outcome": "unreachable", "by_policy": None, "detail": "worker-1 unreachable", "evidence": []}]}  # fmt: skip
    (result,) = probes.load(_write(tmp_path / "p.json", doc)).value
    assert result.outcome == "unreachable"
