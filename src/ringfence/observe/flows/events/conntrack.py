"""``conntrack -E -o timestamp,id`` event streams (NEW/UPDATE/DESTROY) → connection events.

One line per event, e.g.::

    [1796125964.671445]	    [NEW] tcp      6 120 SYN_SENT src=10.99.0.1 dst=10.99.0.2 sport=36672 \
dport=8080 [UNREPLIED] src=10.99.0.2 dst=10.99.0.1 sport=8080 dport=36672 id=4290469242

The first tuple is the connection's original direction (the initiator's view), which is what the
event keeps; the trailing ``id=`` is conntrack's own id (an ICMP tuple has an ``id=`` of its own
before it, hence the anchor at the end of the line). conntrack's exit summary is known chatter.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ringfence.observe.flows._common import (
    WarningLog,
    canonical_ips,
    describe_lines,
    epoch_seconds_to_ts,
    parse_uint,
    read_head,
)
from ringfence.observe.flows.events._lines import iter_matches
from ringfence.observe.flows.events.interface import CONN_SCHEMA, EventResult

_ADDR = r"[0-9A-Fa-f.:]{2,45}"
PATTERN: Final = (
    r"^\[(?P<ts>[0-9]{1,12}\.[0-9]{1,9})\]\s+\[(?P<event>NEW|UPDATE|DESTROY)\]\s+(?P<pname>[a-z0-9-]{1,16})\s+"
    r"(?P<pnum>[0-9]{1,3})\s+(?:[0-9]{1,10}\s+)?(?:[A-Z_]{1,16}\s+)?"
    rf"src=(?P<src>{_ADDR})\s+dst=(?P<dst>{_ADDR})(?:\s+sport=(?P<sport>[0-9]{{1,5}})\s+dport=(?P<dport>[0-9]{{1,5}}))?"
    r".*\sid=(?P<id>[0-9]{1,19})\s*$"
)
CHATTER: Final = r"^(conntrack v[0-9.]+ \(conntrack-tools\):|WARNING:|NOTICE:)"


def _blank_null(col: pa.Array) -> pa.Array:
    """extract_regex gives "" for an optional group that did not take part: that is "absent"."""
    return pc.if_else(pc.equal(col, ""), pa.scalar(None, pa.string()), col)


class ConntrackReader:
    """Reads ``conntrack -E -o timestamp,id`` output into :data:`CONN_SCHEMA` events."""

    name = "conntrack"
    schema = CONN_SCHEMA

    def read(self, path: Path, *, node: str | None = None) -> EventResult:
        """Every event line; lines that are not one are skipped with a warning naming them."""
        read_head(path, 1)  # our error, naming the file, on an unreadable one
        warnings = WarningLog()
        parts: list[pa.Table] = []
        records = 0
        for groups, lines, consumed in iter_matches(path, PATTERN, warnings, what="a conntrack event",
                                                    chatter=CHATTER):
            records += consumed
            if groups.num_rows:
                parts.append(_events(groups, lines, path, node, warnings))
        events = pa.concat_tables(parts) if parts else CONN_SCHEMA.empty_table()
        return EventResult(events, warnings.freeze(), records)


def _events(groups: pa.Table, lines: np.ndarray, path: Path, node: str | None, warnings: WarningLog) -> pa.Table:
    ts, bad_ts = epoch_seconds_to_ts(groups.column("ts"))
    src, src_ok = canonical_ips(groups.column("src"))
    dst, dst_ok = canonical_ips(groups.column("dst"))
    proto, bad_proto = parse_uint(groups.column("pnum"), 255)
    sport, bad_sport = parse_uint(_blank_null(groups.column("sport").combine_chunks()), 65535)
    dport, bad_dport = parse_uint(_blank_null(groups.column("dport").combine_chunks()), 65535)
    ct_id, bad_id = parse_uint(groups.column("id"), 2**63 - 1)
    bad = bad_ts | ~src_ok | ~dst_ok | bad_proto | bad_sport | bad_dport | bad_id
    if bad.any():
        warnings.add(f"{path}: {int(bad.sum())} event(s) skipped, {describe_lines(0, lines[bad])}: "
                     "an address, port, protocol, id or time out of range")
    n = groups.num_rows
    table = pa.table({
        "time": ts, "src": src, "dst": dst, "sport": sport.cast(pa.int32()), "dport": dport.cast(pa.int32()),
        "proto": proto.cast(pa.uint8()), "event": groups.column("event"), "ct_id": ct_id,
        "node": pa.array([node] * n, pa.string()), "line": pa.array(lines), "source": pa.array([str(path)] * n),
    })
    table = table.filter(pa.array(~bad)) if bad.any() else table
    return table.cast(CONN_SCHEMA)


__all__ = ["CHATTER", "PATTERN", "ConntrackReader"]
