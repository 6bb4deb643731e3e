"""What every job reader shares: the family's error, an in-memory :class:`JobSource`, time parsing."""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from datetime import UTC, datetime, tzinfo
from typing import Any

from pydantic import ValidationError

from ringfence.errors import InputError
from ringfence.jobs.interface import JobSpan

#: Epoch seconds accepted as a time: 1970 … 2200. A value outside is corruption, not a date.
_MAX_EPOCH = 7_258_118_400


class JobsError(InputError):
    """A scheduler record that cannot be read; ``where`` names the file and line or JSON path."""


def expect(value: Any, kind: type | tuple[type, ...], where: str, what: str) -> Any:
    """``value`` if it is a ``kind`` (a bool is never an int), else a :class:`JobsError` at ``where``."""
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        name = getattr(kind, "__name__", None) or " or ".join(k.__name__ for k in kind)  # type: ignore[union-attr]
        raise JobsError(where, f"{what}: expected {name}, got {type(value).__name__}")
    return value


def epoch(value: int, where: str) -> datetime:
    """Epoch seconds → an aware UTC datetime, refusing negative or absurdly large values."""
    if not 0 <= value <= _MAX_EPOCH:
        raise JobsError(where, f"time {value} is not a plausible epoch second")
    return datetime.fromtimestamp(value, UTC)


def iso(text: str, where: str, tz: tzinfo = UTC) -> datetime:
    """ISO-8601 text (``2026-12-01T12:00:00``, ``…Z``) → an aware datetime; naive text is taken in ``tz``."""
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00") if text.endswith("Z") else text)
    except ValueError:
        raise JobsError(where, f"{text!r} is not an ISO-8601 time") from None
    return when if when.tzinfo else when.replace(tzinfo=tz)


def make_span(where: str, **fields: Any) -> JobSpan:
    """A validated :class:`JobSpan`; a field that does not fit is a :class:`JobsError` at ``where``."""
    try:
        span = JobSpan(**fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise JobsError(where, f"{loc}: {first['msg']}") from None
    if span.end is not None and span.end < span.start:
        raise JobsError(where, f"job {span.job} ends ({span.end.isoformat()}) before it starts "
                               f"({span.start.isoformat()})")
    return span


class JobTable:
    """A :class:`~ringfence.jobs.interface.JobSource` over spans read from a file (or several).

    ``job_at`` is a binary search per node over spans sorted by start: the node's holder at a moment is
    the job that most recently started on it, if that job has not ended — where allocations on one node
    overlap (jobs sharing a node) the newest wins, the rule :func:`ringfence.analyze.attribute.attribute_flows`
    applies in SQL.
    """

    def __init__(self, spans: Iterable[JobSpan]) -> None:
        self._spans = tuple(sorted(spans, key=lambda s: (s.start, s.job)))
        self._by_node: dict[str, list[JobSpan]] = {}
        for s in self._spans:
            for n in s.nodes:
                self._by_node.setdefault(n, []).append(s)
        self._starts = {n: [s.start for s in ss] for n, ss in self._by_node.items()}

    def spans(self) -> tuple[JobSpan, ...]:
        """Every span, oldest first."""
        return self._spans

    def job_at(self, node: str, when: datetime) -> JobSpan | None:
        """The job holding ``node`` at ``when`` (start inclusive, end exclusive), or None."""
        spans = self._by_node.get(node)
        if not spans:
            return None
        i = bisect.bisect_right(self._starts[node], when)
        if i == 0:
            return None
        latest = spans[i - 1]
        return latest if latest.end is None or when < latest.end else None


__all__ = ["JobTable", "JobsError", "epoch", "expect", "iso", "make_span"]
