"""Change facts (``ringfence probe --changes changes.json``): every applied enforcement version, in order."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import AwareDatetime

from ringfence.facts.interface import Loaded, Strict, parse

CHANGES_FORMAT = "ringfence-changes/1"
#: Evidence sources of change control (ringfence.change): approvals, the live ruleset recorded after a
#: deploy, and after-the-fact reviews. Named here, with the facts they become, so readers and writers agree.
APPROVE_SOURCE = "change.approve"
LIVE_SOURCE = "change.live"
REVIEW_SOURCE = "change.review"
HINT = "write it with: ringfence probe POLICY --target lab -o probes.json --changes changes.json"


class ChangeModel(Strict):
    """One recorded change of the enforcement state (apply, rollback, containment)."""

    id: str
    evidence: str
    time: AwareDatetime
    applied_at: AwareDatetime
    source: str
    action: str | None
    target: str | None
    version: int | str | None = None
    previous: int | str | None = None
    audit: bool = False
    scopes: list[str] = []
    subject: str | None = None
    diff_lines: int = 0
    flows: Any = None  # apply records a count or the ids; change control does not read it
    approved_by: str | None = None
    ticket: str | None = None
    verified: bool | None = None
    verified_by: str | None = None
    # change control (ringfence change): the request deployed, its requester, an emergency and its review,
    # the live ruleset recorded after the deploy, and for a rollback the version it restored
    request: str | None = None
    requested_by: str | None = None
    emergency: bool = False
    deployed_by: str | None = None
    reviewed_by: str | None = None
    reviewed_at: AwareDatetime | None = None
    live: str | None = None
    policy_sha256: str | None = None
    restored_version: int | str | None = None
    rolled_back_by: str | None = None


class ChangesDoc(Strict):
    """The changes facts file."""

    format: Literal["ringfence-changes/1"]
    target: str
    taken: AwareDatetime | None = None  # when the history was read (older files: the latest record's time)
    changes: list[ChangeModel]



def _latest(times: Sequence[datetime | None]) -> datetime | None:
    """The latest aware time of ``times`` (None if there is none)."""
    aware = [t for t in times if t is not None and t.tzinfo is not None]
    return max(aware) if aware else None

def changes_document(changes: Sequence[Mapping[str, Any]], *, target: str,
                     taken: datetime | None = None) -> dict[str, Any]:
    """The changes facts file: ``{"format", "target", "taken", "changes": [...]}``."""
    return {"format": CHANGES_FORMAT, "target": target, "taken": (taken or datetime.now(UTC)).isoformat(),
            "changes": [dict(c) for c in changes]}


def load(path: str | Path, data: bytes | None = None) -> Loaded:
    """``Facts.changes`` (a list of plain change records) and when the history was read;
    ``data``: the file's bytes, if already read."""
    doc = parse(path, ChangesDoc, "changes", HINT, fmt=CHANGES_FORMAT, data=data)
    changes = [c.model_dump(mode="json") for c in doc.changes]
    taken = doc.taken or _latest([c.time for c in doc.changes])
    return Loaded("changes", str(path), changes, taken)


def load_change_facts(path: str | Path) -> list[dict[str, Any]]:
    """``Facts.changes`` from a file written by ``ringfence probe --changes``."""
    value: list[dict[str, Any]] = load(path).value
    return value


__all__ = ["APPROVE_SOURCE", "CHANGES_FORMAT", "LIVE_SOURCE", "REVIEW_SOURCE", "ChangeModel", "ChangesDoc",
           "changes_document", "load", "load_change_facts"]
