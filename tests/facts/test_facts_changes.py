"""The change history from a real store: probes verify changes, a drill's report verifies its own actions,
and what ``probe --changes`` writes validates and is judged by change_control."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ringfence.controls import change_control
from ringfence.controls.interface import Facts, Verdict
from ringfence.enforce.apply import SOURCE as APPLY
from ringfence.enforce.facts import CONTAIN_SOURCE, PROBE_SOURCE, change_facts
from ringfence.evidence import EvidenceStore, RecordKind
from ringfence.facts.changes import changes_document, load
from ringfence.policy import load_policy

POLICY = load_policy(Path(__file__).resolve().parents[2] / "examples" / "lab-policy.yaml")
T = "lab:x"


def _history(tmp_path: Path, ok: bool) -> list[dict[str, object]]:
    store = EvidenceStore.open(tmp_path / "ev")
    store.append(RecordKind.ACTION, APPLY, "target", {"action": "apply", "target": T, "version": 1,
                                                      "approved_by": "cab@lab", "ticket": "CHG-1"})
    store.append(RecordKind.OBSERVATION, PROBE_SOURCE, "probes", {"target": T, "failures": 0})
    store.append(RecordKind.ACTION, CONTAIN_SOURCE, "target", {"action": "contain", "target": T,
                                                               "approved_by": "secops@lab", "ticket": "IR-1"})
    store.append(RecordKind.ACTION, CONTAIN_SOURCE, "target", {"action": "fabric-check", "target": T})
    store.append(RecordKind.ACTION, CONTAIN_SOURCE, "target", {"action": "release", "target": T})
    store.append(RecordKind.OBSERVATION, CONTAIN_SOURCE, "node aux", {"target": T, "ok": ok})
    return change_facts(store, T)


def test_a_drill_verifies_its_own_actions_under_its_approver(tmp_path: Path) -> None:
    history = _history(tmp_path, ok=True)
    assert [(c["action"], c["verified"], c["approved_by"]) for c in history] == [
        ("apply", True, "cab@lab"), ("contain", True, "secops@lab"), ("fabric-check", True, "secops@lab"),
        ("release", True, "secops@lab")]
    file = tmp_path / "changes.json"
    file.write_text(json.dumps(changes_document(history, target=T, taken=datetime.now(UTC))))
    loaded = load(file)
    findings = change_control.evaluate(POLICY, Facts(changes=loaded.value))
    assert {f.verdict for f in findings if f.subject.startswith("change ")} == {Verdict.PASS}


@pytest.mark.parametrize("ok", [False])
def test_a_failed_drill_leaves_its_actions_unverified_as_failures(tmp_path: Path, ok: bool) -> None:
    history = _history(tmp_path, ok=ok)
    assert [c["verified"] for c in history[1:]] == [False, False, False]
    findings = change_control.evaluate(POLICY, Facts(changes=history))
    assert any(f.verdict is Verdict.FAIL and "not observed" in f.message for f in findings)


def test_change_control_fields_survive_the_facts_file(tmp_path: Path) -> None:
    from ringfence.facts.changes import LIVE_SOURCE, REVIEW_SOURCE

    store = EvidenceStore.open(tmp_path / "ev")
    ev = store.append(RecordKind.ACTION, APPLY, "target", {
        "action": "apply", "target": T, "version": "v", "emergency": True, "deployed_by": "oncall",
        "request": "r" * 64, "requested_by": "alice", "policy_sha256": "p" * 64})
    live = store.append(RecordKind.OBSERVATION, LIVE_SOURCE, "target", {"target": T, "applied": str(ev)})
    store.append(RecordKind.ACTION, REVIEW_SOURCE, "change", {"target": T, "change": str(ev), "by": "cab"})
    history = change_facts(store, T)
    file = tmp_path / "changes.json"
    file.write_text(json.dumps(changes_document(history, target=T, taken=datetime.now(UTC))))
    (change,) = load(file).value
    assert (change["emergency"], change["deployed_by"], change["reviewed_by"], change["live"]) == (
        True, "oncall", "cab", str(live))
    assert change["requested_by"] == "alice" and change["reviewed_at"]
