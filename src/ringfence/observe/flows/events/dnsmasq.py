"""dnsmasq query logs (``--log-queries[=extra]``, ``--log-facility=FILE``) → DNS answers over time.

Lines look like (``extra`` adds the query's serial and the client's address/port)::

    Dec  1 11:52:54 dnsmasq[24401]: 1 10.99.0.1/55756 query[A] storage.rftx.lab from 10.99.0.1
    Dec  1 11:52:54 dnsmasq[24401]: 1 10.99.0.1/55756 /etc/hosts.lab storage.rftx.lab is 10.99.0.2

Every ``NAME is ANSWER`` line is an answer (from a hosts file, the cache, ``config`` or an upstream
``reply``); ``query``/``forwarded`` lines are the questions, dnsmasq's start-up lines are chatter.
The syslog time has no year: it is the year of the file's last change unless given, a month after
that one meaning the year before (a log that spans New Year). The time is the host's local time,
taken as UTC (the lab's hosts and most clusters' run in UTC).
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ringfence.observe.flows._common import WarningLog, canonical_ips, iso_to_ts
from ringfence.observe.flows.events._lines import iter_matches
from ringfence.observe.flows.events._logfile import LogStart, start_log, warn_skipped
from ringfence.observe.flows.events.interface import DNS_SCHEMA, EventResult

MONTHS: Final = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_HEAD = (r"^(?P<mon>[A-Z][a-z]{2}) {1,2}(?P<day>[0-9]{1,2}) (?P<hms>[0-9]{2}:[0-9]{2}:[0-9]{2}) "
         r"dnsmasq(?:\[[0-9]{1,10}\])?: ")
PATTERN: Final = (
    _HEAD + r"(?:(?P<serial>[0-9]{1,10}) (?P<client>[0-9A-Fa-f.:]{2,45})/[0-9]{1,5} )?"
    r"(?P<what>\S{1,256}) (?P<name>[^ ]{1,255}) (?P<word>is|from|to) (?P<answer>[^ ]{1,255})$"
)
CHATTER: Final = _HEAD


class DnsmasqReader:
    """Reads a dnsmasq query log into :data:`DNS_SCHEMA` answers."""

    name = "dnsmasq"
    schema = DNS_SCHEMA

    def __init__(self, year: int | None = None) -> None:
        self.year = year

    def read(self, path: Path, *, node: str | None = None) -> EventResult:
        """Every answer line; lines of no dnsmasq log are skipped with a warning naming them."""
        start = start_log(path, self.year)
        warnings = WarningLog()
        parts: list[pa.Table] = []
        records = 0
        for groups, lines, consumed in iter_matches(path, PATTERN, warnings, what="a dnsmasq log line",
                                                    chatter=CHATTER):
            records += consumed
            if groups.num_rows:
                parts.append(_answers(groups, lines, path, start, warnings))
        events = pa.concat_tables(parts) if parts else DNS_SCHEMA.empty_table()
        return EventResult(events, warnings.freeze(), records)


def _answers(groups: pa.Table, lines: np.ndarray, path: Path, start: LogStart, warnings: WarningLog) -> pa.Table:
    answer_rows = pc.equal(groups.column("word"), "is")
    groups = groups.filter(answer_rows)
    lines = lines[np.asarray(answer_rows.to_numpy(zero_copy_only=False), bool)]
    mon = pc.add(pc.index_in(groups.column("mon"), pa.array(MONTHS)), 1)
    yr = pc.if_else(pc.greater(mon, start.month), start.year - 1, start.year)
    text = pc.binary_join_element_wise(
        yr.cast(pa.string()), pc.utf8_lpad(mon.cast(pa.string()), 2, "0"),
        pc.utf8_lpad(groups.column("day"), 2, "0"), "-")
    text = pc.binary_join_element_wise(text, groups.column("hms"), "T")
    ts, bad_ts = iso_to_ts(text)
    bad_ts |= np.asarray(pc.is_null(ts).to_numpy(zero_copy_only=False), bool)
    client_text = groups.column("client")
    client, _ = canonical_ips(pc.if_else(pc.equal(client_text, ""), pa.scalar(None, pa.string()), client_text))
    address, _ = canonical_ips(groups.column("answer"))
    warn_skipped(warnings, path, lines[bad_ts], "no valid date", unit="answer(s)")
    n = groups.num_rows
    out = pa.table({
        "time": ts, "client": client, "name": pc.utf8_rtrim(groups.column("name"), "."),
        "answer": groups.column("answer"), "address": address, "line": pa.array(lines, pa.int64()),
        "source": pa.array([str(path)] * n, pa.string()),
    })
    return (out.filter(pa.array(~bad_ts)) if bad_ts.any() else out).cast(DNS_SCHEMA)


__all__ = ["CHATTER", "MONTHS", "PATTERN", "DnsmasqReader"]
