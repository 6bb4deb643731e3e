"""Reading an evidence store back: the ids it holds, the latest record of a kind, an artifact's bytes.

Only the store's public API (:meth:`EvidenceStore.records`, :meth:`EvidenceStore.blob_path`) is used;
an artifact is returned only when its bytes still hash to the sha256 the chain recorded, so a judgement
recomputed from the store rests on exactly what was recorded.
"""

from __future__ import annotations

from collections.abc import Callable

from ringfence.evidence.interface import EvidenceError, Record, RecordKind, UnknownEvidence, sha256_bytes
from ringfence.evidence.store import EvidenceStore


def record_ids(store: EvidenceStore) -> frozenset[str]:
    """Every evidence id the store holds."""
    return frozenset(str(r.id) for r in store.records())


def latest(store: EvidenceStore, kind: RecordKind, source: str,
           where: Callable[[Record], bool] = lambda _: True) -> Record | None:
    """The last record of ``kind`` from ``source`` satisfying ``where`` (None if there is none)."""
    found = None
    for r in store.records():
        if r.kind is kind and r.source == source and where(r):
            found = r
    return found


def artifact_bytes(store: EvidenceStore, evidence_id: str) -> bytes:
    """The content of the artifact recorded as ``evidence_id``, checked against its recorded sha256."""
    record = store.get(evidence_id)
    data = record.data if isinstance(record.data, dict) else {}
    digest = data.get("blob")
    if record.kind is not RecordKind.ARTIFACT or not isinstance(digest, str):
        raise UnknownEvidence(f"{store.path}: {evidence_id} is not an artifact record")
    try:
        content = store.blob_path(digest).read_bytes()
    except (OSError, ValueError) as exc:
        raise EvidenceError(f"{store.path}: the artifact of {evidence_id} cannot be read: {exc}") from exc
    if sha256_bytes(content) != digest:
        raise EvidenceError(f"{store.path}: the artifact of {evidence_id} no longer matches its recorded sha256")
    return content


__all__ = ["artifact_bytes", "latest", "record_ids"]
