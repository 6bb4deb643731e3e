"""A rotation recorded as key facts: encryption_keys finds it in the store and judges it; the layer registry."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from flow_kit import lab_policy
from ringfence.controls.encryption_keys import ROTATION, evaluate
from ringfence.controls.interface import Facts, Verdict
from ringfence.evidence import EvidenceStore
from ringfence.facts.interface import FactsFileError
from ringfence.secure import rotation
from ringfence.secure.layers.interface import LayerError
from ringfence.secure.rotation_facts import keys_document, latest_keys_facts, record_keys_facts
from ringfence.secure.verify_types import RotationResult

NOW = datetime.now(UTC)
POLICY = lab_policy()


def _result(verdict: Verdict = Verdict.PASS, *, survived: bool = True, at: datetime = NOW) -> RotationResult:
    return RotationResult("wireguard", ("worker-0", "worker-1"), survived, 1.2, 0.5, 0.8, 0, True, True, verdict,
                          "2 static keys replaced; job survived", ("old",), ("new",), at.isoformat(), 0)


def _judged(store: EvidenceStore) -> list[Verdict]:
    loaded = latest_keys_facts(store)
    assert loaded is not None
    found = evaluate(POLICY, Facts(now=NOW, keys=loaded.value, taken={"keys": loaded.taken or NOW}))
    return [f.verdict for f in found if f.requirement == ROTATION or f.subject.startswith("key rotation")]


def test_a_recorded_rotation_is_found_and_judged_pass(tmp_path: Path) -> None:
    store = EvidenceStore.open(tmp_path / "ev")
    assert latest_keys_facts(store) is None
    _, record = record_keys_facts(store, keys_document([_result()], target="lab t"))
    assert _judged(store) == [Verdict.PASS]
    loaded = latest_keys_facts(store)
    assert loaded is not None and loaded.value["rotation"][0]["stall_s"] == 1.2
    assert loaded.value["rotation"][0]["failed_steps"] == 0 and loaded.value["rotation"][0]["old_refused"]
    assert store.get(record).source == "facts:keys" and store.verify().ok


def test_a_rotation_that_dropped_the_job_fails_and_an_old_one_is_overdue(tmp_path: Path) -> None:
    store = EvidenceStore.open(tmp_path / "ev")
    record_keys_facts(store, keys_document([_result(Verdict.FAIL, survived=False)], target="lab t"))
    assert _judged(store) == [Verdict.FAIL]
    record_keys_facts(store, keys_document([_result(at=NOW - timedelta(days=400))], target="lab t"))
    assert _judged(store) == [Verdict.FAIL]  # the latest record is the one judged: overdue


def test_an_unwatched_rotation_proves_nothing(tmp_path: Path) -> None:
    """On a target whose job reports no progress the rotation is recorded, but the control says unknown."""
    store = EvidenceStore.open(tmp_path / "ev")
    doc = keys_document([_result(Verdict.UNKNOWN, survived=False)], target="ssh site")
    assert doc["verdict"] == "unknown" and doc["rotations"] == [] and len(doc["rotation"]) == 1
    record_keys_facts(store, doc)
    assert _judged(store) == [Verdict.UNKNOWN]


def test_a_malformed_document_is_refused_before_it_is_recorded(tmp_path: Path) -> None:
    store = EvidenceStore.open(tmp_path / "ev")
    doc = keys_document([_result()], target="lab t")
    doc["surprise"] = 1
    with pytest.raises(FactsFileError):
        record_keys_facts(store, doc)
    assert latest_keys_facts(store) is None


def test_the_rotation_registry_is_explicit_and_names_what_it_has() -> None:
    assert set(rotation.ROTATORS) == {"tls", "wireguard", "ipsec"}
    assert all(r.layer == name for name, r in rotation.ROTATORS.items())
    with pytest.raises(LayerError, match="no live rotation") as exc:
        rotation.rotator("macsec")  # rendered only: this kernel has no MACsec to rotate on
    assert exc.value.hint is not None and "tls, wireguard, ipsec" in exc.value.hint
