"""A job source read from a JSON file of job spans (``[{"job", "user", "nodes", "start", "end"}, …]``).

The scheduler readers (Slurm, Kubernetes) implement :class:`~ringfence.jobs.interface.JobSource`
themselves; this one serves a recorded export, and any test, with the same interface.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from pydantic import TypeAdapter, ValidationError

from ringfence.bounded import loads_json, read_bounded
from ringfence.errors import InputError
from ringfence.jobs.interface import JobSpan

_SPANS = TypeAdapter(tuple[JobSpan, ...])


class SpanFile:
    """Job spans from a JSON file; :class:`InputError` naming the file and the first bad entry."""

    def __init__(self, path: Path) -> None:
        data = loads_json(read_bounded(path), str(path))
        try:
            spans = _SPANS.validate_python(data)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"])
            raise InputError(f"{path}", f"job span {where}: {err['msg']}") from exc
        for s in spans:
            if s.start.tzinfo is None or (s.end is not None and s.end.tzinfo is None):
                raise InputError(f"{path}", f"job {s.job}: times need a UTC offset")
        self._spans = tuple(sorted(spans, key=lambda s: s.start))

    def spans(self) -> tuple[JobSpan, ...]:
        """Every span, oldest first."""
        return self._spans

    def job_at(self, node: str, when: datetime) -> JobSpan | None:
        """The latest-started job holding ``node`` at ``when``."""
        hits = [s for s in self._spans if node in s.nodes and s.start <= when and (s.end is None or when < s.end)]
        return hits[-1] if hits else None


__all__ = ["SpanFile"]
