"""The job readers by name, and :func:`load_jobs`: files → one :class:`JobTable` (format detected by content).

Registration is this one dict; importing a reader registers nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import StrEnum
from pathlib import Path

from ringfence.bounded import MAX_BYTES as BOUNDED_MAX
from ringfence.bounded import BoundedInputError, read_bounded
from ringfence.jobs._common import JobsError, JobTable
from ringfence.jobs.interface import JobSpan
from ringfence.jobs.k8s import parse_pods_json
from ringfence.jobs.slurm import parse_jobcomp, parse_sacct_json, parse_squeue_json


class JobFormat(StrEnum):
    """The scheduler records ringfence reads."""

    SQUEUE = "squeue"
    SACCT = "sacct"
    JOBCOMP = "jobcomp"
    KUBECTL = "kubectl"


Reader = Callable[[bytes, str], tuple[JobSpan, ...]]

READERS: dict[JobFormat, Reader] = {
    JobFormat.SQUEUE: parse_squeue_json,
    JobFormat.SACCT: parse_sacct_json,
    JobFormat.JOBCOMP: lambda data, source: parse_jobcomp(data, source),
    JobFormat.KUBECTL: parse_pods_json,
}

#: The largest job record read: the bounded JSON reader's limit (a squeue export of 20k jobs is ~60 MB).
MAX_BYTES = BOUNDED_MAX


def detect(data: bytes, source: str) -> JobFormat:
    """Which reader fits ``data``: JSON with ``items`` is kubectl, JSON jobs with ``time`` objects sacct,
    other JSON jobs squeue, ``JobId=`` lines jobcomp."""
    head = data[:4096].lstrip()
    if head.startswith(b"JobId="):
        return JobFormat.JOBCOMP
    if not head.startswith(b"{"):
        raise JobsError(source, "neither JSON nor jobcomp/filetxt lines (JobId=…)",
                        hint="give squeue --json, sacct --json, a jobcomp/filetxt log or kubectl get pods -o json")
    if b'"items"' in data[:1 << 20] and b'"jobs"' not in head:
        return JobFormat.KUBECTL
    if b'"sacct' in head or b'"time": {' in data[:1 << 16] or b'"time":{' in data[:1 << 16]:
        return JobFormat.SACCT
    return JobFormat.SQUEUE


def load_jobs(paths: Sequence[Path], fmt: JobFormat | None = None) -> JobTable:
    """Every span in ``paths`` (each read with ``fmt`` or the format its content shows)."""
    spans: list[JobSpan] = []
    for path in paths:
        try:
            data = read_bounded(path, MAX_BYTES)
        except BoundedInputError as exc:
            raise JobsError(exc.where, exc.message.removeprefix(f"{exc.where}: ")) from None
        spans += READERS[fmt or detect(data, str(path))](data, str(path))
    return JobTable(spans)


__all__ = ["MAX_BYTES", "READERS", "JobFormat", "Reader", "detect", "load_jobs"]
