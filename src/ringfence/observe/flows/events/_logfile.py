"""The set-up every telemetry log reader shares: the file checked readable (our error, naming it), the year
its undated lines belong to, and the one warning that names the lines a reader skipped.

Syslog-style times (dnsmasq, tinyproxy) carry no year: it is the year of the file's last change unless the
caller gives one, and a month after that change's month means the year before (a log that spans New Year).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa

from ringfence.observe.flows._common import WarningLog, describe_lines, os_error, read_head
from ringfence.observe.flows._jsonl import iter_json_records
from ringfence.observe.flows.events.interface import EventResult


@dataclass(frozen=True)
class LogStart:
    """What a reader knows of its file before the first line: the year and month of its last change."""

    year: int
    month: int  # 12 when the caller gave the year: no month is "after" it

    def year_of(self, month: int) -> int:
        """The year a line dated in ``month`` (1-12) belongs to."""
        return self.year - 1 if month > self.month else self.year


def start_log(path: Path, year: int | None = None) -> LogStart:
    """Check ``path`` is readable and date it; :class:`~ringfence.observe.flows.interface.FlowSourceError`
    naming the file otherwise (never an OSError's traceback)."""
    read_head(path, 1)
    if year is not None:
        return LogStart(year, 12)
    try:
        changed = datetime.fromtimestamp(path.stat().st_mtime, UTC)
    except OSError as exc:
        raise os_error(path, exc) from exc
    return LogStart(changed.year, changed.month)


def warn_skipped(warnings: WarningLog, path: Path, lines: Sequence[int] | np.ndarray, why: str,
                 unit: str = "line(s)") -> None:
    """One warning naming the skipped ``lines`` (their numbers in the file, the first five) and why; none
    when nothing was skipped."""
    rows = np.asarray(lines, dtype=np.int64)
    if rows.size:
        warnings.add(f"{path}: {rows.size} {unit} skipped, {describe_lines(0, rows)}: {why}")


def read_json_events(path: Path, raw: pa.Schema, schema: pa.Schema,
                     convert: Callable[[pa.Table, np.ndarray, WarningLog], pa.Table]) -> EventResult:
    """A JSON-lines log read in bounded blocks of ``raw`` records, each block turned into ``schema`` events by
    ``convert(table, lines, warnings)``; the readers of JSON event logs share this loop."""
    warnings = WarningLog()
    parts: list[pa.Table] = []
    records = 0
    for table, lines, consumed in iter_json_records(path, raw, warnings):
        records += consumed
        if table.num_rows:
            parts.append(convert(table, lines, warnings))
    events = pa.concat_tables(parts) if parts else schema.empty_table()
    return EventResult(events, warnings.freeze(), records)


__all__ = ["LogStart", "read_json_events", "start_log", "warn_skipped"]
