"""The object server's access log (``ringfence.lab.agents.storage --object-log``) → object requests.

One JSON object a line, written before the server answers (so a refusal is on the record whoever is refused)::

    {"time": 1796125964.67, "peer": "10.77.1.10", "peer_port": 41000, "local": "10.77.2.10", "local_port": 8080,
     "identity": "-", "method": "GET", "path": "/datasets/train-a/shard-3", "job": "train-a",
     "result": "served", "bytes": 131072}

``peer_port``/``local``/``local_port`` complete the connection's 5-tuple, so a request joins the flow it rode
on by Community ID; logs written before the server recorded them still read, joined by address and time
only. ``identity`` is the TLS peer's (URI SAN, else CN); ``-`` (plaintext, or a TLS gate in front of the
server: then the gate's own log has it) becomes null. Records without a usable time, peer, method, path or
result (``served``/``refused``) are skipped with a warning naming their lines; so are oversized fields. Lines
are read in bounded blocks (:func:`~ringfence.observe.flows._common.iter_line_blocks`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ringfence.observe.flows._common import WarningLog, canonical_ips, epoch_seconds_to_ts
from ringfence.observe.flows.events._logfile import read_json_events, start_log, warn_skipped
from ringfence.observe.flows.events.interface import OBJECT_SCHEMA, EventResult

SCHEMA: Final = pa.schema([
    pa.field("time", pa.float64()),
    pa.field("peer", pa.string()),
    pa.field("peer_port", pa.int64()),
    pa.field("local", pa.string()),
    pa.field("local_port", pa.int64()),
    pa.field("identity", pa.string()),
    pa.field("method", pa.string()),
    pa.field("path", pa.string()),
    pa.field("job", pa.string()),
    pa.field("result", pa.string()),
    pa.field("bytes", pa.int64()),
])
RESULTS: Final = ("served", "refused")
#: Longest path, identity and job name kept (a longer one is no request this server answered).
MAX_PATH: Final = 4096
MAX_IDENTITY: Final = 2048
MAX_JOB: Final = 256
_METHOD: Final = r"^[A-Z]{1,16}$"


def _mask(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    return np.asarray(pc.fill_null(arr, False).to_numpy(zero_copy_only=False), bool)


def _port(col: pa.ChunkedArray) -> tuple[pa.Array, np.ndarray]:
    ok = pc.and_(pc.greater_equal(col, 0), pc.less_equal(col, 65535))
    bad = _mask(pc.and_(pc.is_valid(col), pc.invert(pc.fill_null(ok, False))))
    return pc.if_else(pc.fill_null(ok, False), col, pa.scalar(None, pa.int64())).cast(pa.int32()), bad


def _text_ok(col: pa.ChunkedArray, limit: int) -> np.ndarray:
    """Present and no longer than ``limit`` characters."""
    return _mask(pc.less_equal(pc.utf8_length(col), limit))


class ObjectLogReader:
    """Reads an object server's access log into :data:`OBJECT_SCHEMA` requests."""

    name = "objects"
    schema = OBJECT_SCHEMA

    def read(self, path: Path, *, node: str | None = None) -> EventResult:
        """Every request record; records that are not one are skipped with a warning naming their lines."""
        start_log(path)  # our error, naming the file, on an unreadable one
        return read_json_events(path, SCHEMA, OBJECT_SCHEMA, lambda t, lines, w: _requests(t, lines, path, node, w))


def _requests(table: pa.Table, lines: np.ndarray, path: Path, node: str | None, warnings: WarningLog) -> pa.Table:
    n = table.num_rows
    time, bad_time = epoch_seconds_to_ts(table.column("time").combine_chunks())
    bad_time |= ~_mask(pc.is_valid(time))
    peer, peer_ok = canonical_ips(table.column("peer"))
    local_text = table.column("local")
    local, local_ok = canonical_ips(local_text)
    local_bad = _mask(pc.is_valid(local_text)) & ~local_ok
    peer_port, bad_pport = _port(table.column("peer_port"))
    local_port, bad_lport = _port(table.column("local_port"))
    method_ok = _mask(pc.match_substring_regex(table.column("method"), _METHOD))
    target = table.column("path")
    path_ok = _text_ok(target, MAX_PATH) & _mask(pc.starts_with(target, "/"))
    result_ok = _mask(pc.is_in(table.column("result"), pa.array(RESULTS)))
    size = table.column("bytes")
    bytes_ok = _mask(pc.fill_null(pc.greater_equal(size, 0), True))
    ident_text = table.column("identity")
    ident_ok = _mask(pc.fill_null(pc.less_equal(pc.utf8_length(ident_text), MAX_IDENTITY), True))
    job_ok = _mask(pc.fill_null(pc.less_equal(pc.utf8_length(table.column("job")), MAX_JOB), True))
    checks = (("time", bad_time), ("peer address", ~peer_ok), ("local address", local_bad),
              ("ports", bad_pport | bad_lport), ("method", ~method_ok), ("path", ~path_ok),
              ("result (served or refused)", ~result_ok), ("byte count", ~bytes_ok),
              ("identity or job (too long)", ~(ident_ok & job_ok)))
    bad = np.zeros(n, bool)
    for what, mask in checks:
        mask = mask & ~bad
        warn_skipped(warnings, path, lines[mask], f"no usable {what}", unit="record(s)")
        bad |= mask
    # "-" is the server's word for "no certificate": no identity, not an identity called "-"
    anonymous = pc.fill_null(pc.is_in(ident_text, pa.array(["-", ""])), True)
    out = pa.table({
        "time": time, "peer": peer, "peer_port": peer_port, "local": local, "local_port": local_port,
        "identity": pc.if_else(anonymous, pa.scalar(None, pa.string()), ident_text),
        "method": table.column("method"), "path": target, "job": table.column("job"),
        "result": table.column("result"), "bytes": size,
        "node": pa.array([node] * n, pa.string()), "line": pa.array(lines, pa.int64()),
        "source": pa.array([str(path)] * n, pa.string()),
    })
    return (out.filter(pa.array(~bad)) if bad.any() else out).cast(OBJECT_SCHEMA)


__all__ = ["MAX_IDENTITY", "MAX_JOB", "MAX_PATH", "RESULTS", "SCHEMA", "ObjectLogReader"]
