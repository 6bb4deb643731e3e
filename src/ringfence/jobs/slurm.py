"""Slurm's record of jobs: ``squeue --json``, ``sacct --json`` and ``jobcomp/filetxt`` lines → job spans.

The JSON layout changes between releases; the variants read here are the documented ones:

=============  ===================  ===========================================================
release        plugin               shape
=============  ===================  ===========================================================
21.08, 22.05   openapi/v0.0.37/38   flat: ``job_state`` a string, times epoch integers
               dbv0.0.37/38 (sacct) ``state.current`` a string, ``time.start``/``time.end`` integers
23.02 … 24.x   data_parser v0.0.39+ ``job_state``/``state.current`` lists, times ``{set, infinite, number}``
=============  ===================  ===========================================================

Anything else is refused with the field and the release it came from. Only jobs that hold nodes
become spans (a pending job has none). squeue's ``end_time`` of a running job is its time *limit*,
not an end, so a running job's span is open (``end`` None); sacct's ``time.end`` is 0 while it runs.
``jobcomp/filetxt`` writes one ``Key=Value`` line per finished job, times in the controller's local
time zone (``tz``, UTC unless told).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, tzinfo
from typing import Any

from ringfence.bounded import BoundedInputError, loads_json
from ringfence.inventory.interface import InventoryError
from ringfence.inventory.slurm import expand_hostlist
from ringfence.jobs._common import JobsError, epoch, expect, iso, make_span
from ringfence.jobs.interface import JobSpan

#: States in which a job still holds its nodes (its span is open).
_HOLDING = frozenset({"RUNNING", "SUSPENDED", "CONFIGURING", "COMPLETING", "STOPPED", "RESIZING", "SIGNALING"})
#: States of a job that never got nodes.
_NEVER_RAN = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"})
#: The longest jobcomp line read; real lines are a few hundred bytes.
_MAX_LINE = 64 << 10
_KEY = re.compile(r"^([A-Za-z][A-Za-z0-9_]*)=(.*)$")


def _release(doc: dict[str, Any]) -> str:
    """``22.05.8`` (or ``unknown release``) from the document's ``meta``, for messages."""
    meta = doc.get("meta")
    slurm = meta.get("Slurm") or meta.get("slurm") if isinstance(meta, dict) else None
    version = slurm.get("version") if isinstance(slurm, dict) else None
    if isinstance(version, dict):
        return ".".join(str(version.get(k, "?")) for k in ("major", "minor", "micro"))
    return "unknown release"


def _number(value: Any, where: str, what: str) -> int | None:
    """An integer field in either layout: a plain int, or ``{set, infinite, number}`` (None when unset)."""
    if isinstance(value, dict):
        if not value.get("set", False) or value.get("infinite", False):
            return None
        value = value.get("number")
    return int(expect(value, int, where, what))


def _state(value: Any, where: str) -> str:
    """A job state in either layout: ``"RUNNING"`` or ``["RUNNING", …]`` (the first is the base state)."""
    if isinstance(value, list):
        if not value:
            raise JobsError(where, "empty job state list")
        value = value[0]
    return str(expect(value, str, where, "job state")).strip().upper()


def _nodes(value: Any, where: str) -> tuple[str, ...]:
    text = expect(value, str, where, "node list")
    if text.strip() in ("", "None assigned", "(null)"):
        return ()
    try:
        return tuple(expand_hostlist(text, where))
    except InventoryError as exc:
        raise JobsError(exc.where, exc.message.removeprefix(f"{exc.where}: ")) from None


def _jobs(text: str | bytes, source: str, what: str) -> tuple[dict[str, Any], list[Any]]:
    try:
        doc = loads_json(text, source)
    except BoundedInputError as exc:
        raise JobsError(exc.where, exc.message.removeprefix(f"{exc.where}: ")) from None
    doc = expect(doc, dict, source, f"{what} output")
    errors = doc.get("errors")
    if isinstance(errors, list) and errors:
        raise JobsError(f"{source}: errors", f"{what} reported errors: {errors[:3]}")
    if "jobs" not in doc:
        raise JobsError(source, f"no 'jobs' list: not {what} output")
    return doc, expect(doc["jobs"], list, f"{source}: jobs", "jobs")


def parse_squeue_json(text: str | bytes, source: str) -> tuple[JobSpan, ...]:
    """``squeue --json`` (21.08 … 24.x) → spans of the jobs that hold or held nodes."""
    doc, jobs = _jobs(text, source, "squeue --json")
    release = _release(doc)
    spans: list[JobSpan] = []
    for i, job in enumerate(jobs):
        where = f"{source}: jobs[{i}]"
        job = expect(job, dict, where, "a job")
        if "job_state" not in job or "start_time" not in job:
            raise JobsError(where, f"no job_state/start_time: a squeue layout this reader does not know ({release})")
        state = _state(job["job_state"], f"{where}.job_state")
        nodes = _nodes(job.get("nodes", ""), f"{where}.nodes")
        if state in _NEVER_RAN or not nodes:
            continue
        start = _number(job["start_time"], f"{where}.start_time", "start_time")
        if not start:
            continue
        end = None if state in _HOLDING else _number(job.get("end_time"), f"{where}.end_time", "end_time")
        spans.append(make_span(
            where, job=str(expect(job.get("job_id"), int, f"{where}.job_id", "job_id")),
            user=expect(job.get("user_name"), str, f"{where}.user_name", "user_name"), nodes=nodes,
            start=epoch(start, f"{where}.start_time"), end=epoch(end, f"{where}.end_time") if end else None,
            name=job.get("name") if isinstance(job.get("name"), str) else None,
        ))
    return tuple(spans)


def parse_sacct_json(text: str | bytes, source: str) -> tuple[JobSpan, ...]:
    """``sacct --json`` (dbv0.0.37/38 and data_parser v0.0.39+) → spans of jobs that started."""
    doc, jobs = _jobs(text, source, "sacct --json")
    release = _release(doc)
    spans: list[JobSpan] = []
    for i, job in enumerate(jobs):
        where = f"{source}: jobs[{i}]"
        job = expect(job, dict, where, "a job")
        times, state = job.get("time"), job.get("state")
        if not isinstance(times, dict) or not isinstance(state, dict):
            raise JobsError(where, f"no time/state objects: a sacct layout this reader does not know ({release})")
        nodes = _nodes(job.get("nodes", ""), f"{where}.nodes")
        start = _number(times.get("start"), f"{where}.time.start", "time.start")
        if not nodes or not start:
            continue
        current = _state(state.get("current"), f"{where}.state.current")
        end = _number(times.get("end", 0), f"{where}.time.end", "time.end")
        user = job.get("user")
        spans.append(make_span(
            where, job=str(expect(job.get("job_id"), int, f"{where}.job_id", "job_id")),
            user=expect(user, str, f"{where}.user", "user"), nodes=nodes,
            start=epoch(start, f"{where}.time.start"),
            end=epoch(end, f"{where}.time.end") if end and current not in _HOLDING else None,
            name=job.get("name") if isinstance(job.get("name"), str) else None,
        ))
    return tuple(spans)


def _fields(line: str, where: str) -> dict[str, str]:
    """``Key=Value`` tokens of one jobcomp line; a token without ``=`` continues the value before it
    (job names and work directories may hold spaces)."""
    out: dict[str, str] = {}
    last = ""
    for token in line.split():
        m = _KEY.match(token)
        if m is not None:
            last = m.group(1)
            out[last] = m.group(2)
        elif last:
            out[last] = f"{out[last]} {token}"
        else:
            raise JobsError(where, f"expected Key=Value, got {token[:40]!r}")
    return out


def _local(text: str, where: str, tz: tzinfo) -> datetime | None:
    if text in ("", "Unknown", "None", "(null)"):
        return None
    return iso(text, where, tz)


def parse_jobcomp(text: str | bytes, source: str, *, tz: tzinfo = UTC) -> tuple[JobSpan, ...]:
    """``JobCompType=jobcomp/filetxt`` log → spans of finished jobs (one per line; blank lines skipped)."""
    if isinstance(text, bytes):
        raw = text
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            at = raw[: exc.start].count(b"\n") + 1
            raise JobsError(f"{source}:{at}", "not UTF-8 text: not a jobcomp/filetxt log") from None
    spans: list[JobSpan] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        where = f"{source}:{lineno}"
        if not line.strip():
            continue
        if len(line) > _MAX_LINE:
            raise JobsError(where, f"line of {len(line)} characters is longer than {_MAX_LINE}")
        rec = _fields(line, where)
        missing = [k for k in ("JobId", "UserId", "StartTime", "EndTime", "NodeList") if k not in rec]
        if missing:
            raise JobsError(where, f"no {', '.join(missing)}: not a jobcomp/filetxt record")
        nodes = _nodes(rec["NodeList"], f"{where}: NodeList")
        start = _local(rec["StartTime"], f"{where}: StartTime", tz)
        if not nodes or start is None:
            continue  # cancelled before it ran: it held no node
        user = rec["UserId"].partition("(")[0]
        spans.append(make_span(where, job=rec["JobId"], user=user, nodes=nodes, start=start,
                               end=_local(rec["EndTime"], f"{where}: EndTime", tz), name=rec.get("Name") or None))
    return tuple(spans)


__all__ = ["parse_jobcomp", "parse_sacct_json", "parse_squeue_json"]
