"""Attestation facts at the edge (strict schema) and as workload_identity judges them, both sides."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from flow_kit import lab_policy
from ringfence.controls import workload_identity as wi
from ringfence.controls.interface import Facts, Verdict
from ringfence.facts import LOADERS, FactsFileError


def _doc(*probes: dict[str, Any]) -> dict[str, Any]:
    return {"format": "ringfence-attestation-1", "site": "lab-x", "generated": datetime.now(UTC).isoformat(),
            "interval": "60s",
            "nodes": [{"node": "worker-1", "admitted": False, "reasons": ["nonce"], "addresses": ["10.77.1.11"],
                       "drill": True}],
            "probes": list(probes)}


def _probe(expected: str, outcome: str, verdict: str) -> dict[str, Any]:
    return {"source": "worker-1", "target": "worker-0", "address": "10.77.1.10", "port": 29500,
            "expected": expected, "outcome": outcome, "verdict": verdict}


def _verdicts(doc: dict[str, Any] | None) -> dict[str | None, set[Verdict]]:
    out: dict[str | None, set[Verdict]] = {}
    for f in wi.evaluate(lab_policy(), Facts(attestation=doc)):
        if f.requirement in (wi.ATTESTED, wi.ATTEST_DENIED) or "attestation" in f.subject:
            out.setdefault(f.requirement, set()).add(f.verdict)
    return out


def test_both_sides_pass_only_on_a_connected_and_a_dropped_probe() -> None:
    both = _doc(_probe("blocked", "timeout", "pass"), _probe("reached", "connected", "pass"))
    assert _verdicts(both) == {wi.ATTESTED: {Verdict.PASS}, wi.ATTEST_DENIED: {Verdict.PASS}}


def test_a_refused_node_that_still_connects_fails_the_denied_side() -> None:
    leak = _doc(_probe("blocked", "connected", "fail"))
    assert _verdicts(leak)[wi.ATTEST_DENIED] == {Verdict.FAIL}


def test_no_attestation_facts_is_unknown() -> None:
    found = wi.evaluate(lab_policy(), Facts())
    assert any(f.verdict is Verdict.UNKNOWN and "attestation" in f.subject for f in found)
    assert wi.ATTESTED in {r.id for r in wi.meta.requirements}


def test_the_schema_is_strict(tmp_path: Path) -> None:
    good = tmp_path / "a.json"
    good.write_text(json.dumps(_doc(_probe("reached", "connected", "pass"))))
    assert LOADERS["attestation"](good).value["nodes"][0]["node"] == "worker-1"
    bad = _doc()
    bad["nodes"][0]["trusted"] = True  # an unknown field
    path = tmp_path / "b.json"
    path.write_text(json.dumps(bad))
    with pytest.raises(FactsFileError, match="trusted"):
        LOADERS["attestation"](path)
