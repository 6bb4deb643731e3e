"""Which policy version was in force at a moment, and which applied change introduced a rule.

Both come from the evidence store's apply records (``enforce.apply``, subject ``target T``): each
holds the version hash, its time, the rendered bundle (an artifact) and who approved it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ringfence.errors import RingfenceError
from ringfence.evidence import EvidenceStore, RecordKind

SOURCE = "enforce.apply"
#: Largest ruleset bundle read back to look for a rule (a big cluster's bundle is a few MB).
MAX_BUNDLE = 64 << 20


@dataclass(frozen=True)
class Applied:
    """One apply (or rollback) record."""

    evidence: str
    time: datetime
    action: str
    version: str
    bundle: str | None
    approved_by: str | None
    ticket: str | None


def _when(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def history(store: EvidenceStore, target: str) -> list[Applied]:
    """Every version applied to ``target``, oldest first."""
    out = []
    for r in store.records():
        if r.source != SOURCE or r.subject != f"target {target}" or r.kind is not RecordKind.ACTION:
            continue
        d: Any = r.data
        if not isinstance(d, dict) or not isinstance(d.get("version"), str):
            continue
        out.append(Applied(str(r.id), _when(r.time), str(d.get("action", "apply")), d["version"],
                           d.get("bundle") if isinstance(d.get("bundle"), str) else None,
                           d.get("approved_by") if isinstance(d.get("approved_by"), str) else None,
                           d.get("ticket") if isinstance(d.get("ticket"), str) else None))
    return out


def in_force(records: list[Applied], when: datetime) -> Applied | None:
    """The version applied last at or before ``when`` (None: nothing applied yet)."""
    before = [a for a in records if a.time <= when]
    return before[-1] if before else None


def _carries(store: EvidenceStore, applied: Applied, rule: str) -> bool:
    if applied.bundle is None:
        return False
    try:
        path = store.blob_path(applied.bundle)
        if path.stat().st_size > MAX_BUNDLE:
            return False
        text = path.read_text(errors="replace")
    except (OSError, ValueError, RingfenceError):
        return False
    return f'"flow {rule} (' in text


def introduced(store: EvidenceStore, records: list[Applied], current: Applied, rule: str) -> Applied | None:
    """The earliest version in the unbroken run up to ``current`` whose ruleset carries ``rule``."""
    upto = records[: records.index(current) + 1]
    first: Applied | None = None
    for a in reversed(upto):
        if not _carries(store, a, rule):
            break
        first = a
    return first


__all__ = ["Applied", "history", "in_force", "introduced"]
