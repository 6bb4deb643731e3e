"""A rotation as key facts: the document ``encryption_keys`` judges, recorded in the evidence store.

``ringfence encrypt rotate`` writes the same key-facts shape ``verify keys -o`` does
(:mod:`ringfence.facts.keys`), holding only what a rotation proves: ``rotation`` rows with the
measurements (longest step gap, failed requests and steps, old credential refused) and the
``rotations`` summary the control reads. Coverage, scope and the fail-closed drills are left empty —
a rotation does not prove them, so the control says ``unknown`` for them rather than ``pass``.

The document is validated by the facts loader before it is recorded, then kept the way
``assess`` keeps a facts file: its bytes as an artifact and one ``facts:keys`` observation naming it,
so :func:`latest_keys_facts` (and anyone reading the store) finds it again.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

from ringfence.controls.interface import Verdict
from ringfence.evidence import EvidenceStore, RecordKind
from ringfence.evidence.query import artifact_bytes, latest
from ringfence.facts import keys as key_facts
from ringfence.facts.interface import Loaded
from ringfence.secure.verify_types import RotationResult

__all__ = ["SOURCE", "keys_document", "latest_keys_facts", "record_keys_facts"]

SOURCE = "facts:keys"


def _verdict(results: Sequence[RotationResult]) -> Verdict:
    verdicts = [r.verdict for r in results]
    if not verdicts or Verdict.UNKNOWN in verdicts and Verdict.FAIL not in verdicts:
        return Verdict.UNKNOWN
    return Verdict.FAIL if Verdict.FAIL in verdicts else Verdict.PASS


def keys_document(results: Sequence[RotationResult], *, target: str, generated: datetime | None = None,
                  evidence: Sequence[str] = ()) -> dict[str, Any]:
    """The key-facts document of ``results`` (``target`` names where they ran, for the reader)."""
    rows = [{**asdict(r), "verdict": r.verdict.value, "nodes": list(r.nodes), "old_ids": list(r.old_ids),
             "new_ids": list(r.new_ids)} for r in results]
    return {
        "source": f"ringfence encrypt rotate ({target})",
        "generated": (generated or datetime.now(UTC)).isoformat(),
        "verdict": _verdict(results).value,
        "classes": {},
        "coverage": {},
        "scope": [],
        "rotation": rows,
        # only rotations whose job side was observed: an unwatched one proves nothing about the job
        "rotations": [{"layer": r.layer, "at": r.at, "ok": r.verdict is Verdict.PASS, "dropped_job": not r.job_survived,
                       "detail": r.detail} for r in results if r.verdict is not Verdict.UNKNOWN],
        "evidence": list(evidence),
    }


def record_keys_facts(store: EvidenceStore, doc: dict[str, Any], name: str = "keys.json") -> tuple[bytes, str]:
    """Validate ``doc`` as key facts and record it (artifact + ``facts:keys`` observation); (bytes, observation id)."""
    content = (json.dumps(doc, indent=2) + "\n").encode()
    loaded = key_facts.load(name, data=content)  # our own output must pass the same gate as anyone's
    artifact = str(store.add_artifact(content, name, source=SOURCE, data={"kind": "keys", "path": name}))
    record = store.append(RecordKind.OBSERVATION, source=SOURCE, subject=f"key rotation: {doc['source']}",
                          data={"kind": "keys", "files": [name], "artifacts": [artifact],
                                "taken": loaded.taken.isoformat() if loaded.taken else None})
    return content, str(record)


def latest_keys_facts(store: EvidenceStore) -> Loaded | None:
    """The last key facts recorded in ``store`` (validated again from their recorded bytes), or None."""
    rec = latest(store, RecordKind.OBSERVATION, SOURCE,
                 lambda r: isinstance(r.data, dict) and bool(r.data.get("artifacts")))
    if rec is None:
        return None
    assert isinstance(rec.data, dict)
    content = artifact_bytes(store, rec.data["artifacts"][0])
    return key_facts.load(f"{store.path}:{rec.id}", data=content)
