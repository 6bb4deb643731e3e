"""The TLS sidecars' connection log (``ringfence.secure.layers``' mesh, ``<node>.events.jsonl``) → TLS events.

Each sidecar appends one JSON object per connection, after deciding it::

    {"t": 1796125964.70, "dir": "in", "node": "storage", "service": "storage-http", "peer": "10.77.1.10",
     "peer_identity": "spiffe://lab/job/train-a", "method": "GET", "path": "/datasets/train-a/shard-3",
     "result": "allowed", "reason": "job:train-a", "response_bytes": 131100}
    {"t": 1796125964.69, "dir": "out", "node": "worker-0", "peer": "10.77.2.10:8080",
     "expected_identity": "spiffe://lab/node/storage", "peer_identity": "spiffe://lab/node/storage", ...}

``in`` is the gate in front of a service on ``node`` (``peer``: the client's address, ``peer_port`` its port —
absent from logs written before the gates recorded it); ``out`` a client on ``node`` calling ``peer``
(``address:port``). ``peer_identity`` is the SPIFFE ID
the peer's certificate proved (absent when the handshake or the certificate was refused). Records without
a usable time, direction, node, peer or result are skipped with a warning naming their lines; lines are read
in bounded blocks like every reader's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ringfence.observe.flows._common import WarningLog, canonical_ips, epoch_seconds_to_ts
from ringfence.observe.flows.events._logfile import read_json_events, start_log, warn_skipped
from ringfence.observe.flows.events.interface import TLS_SCHEMA, EventResult

SCHEMA: Final = pa.schema([
    pa.field("t", pa.float64()),
    pa.field("dir", pa.string()),
    pa.field("node", pa.string()),
    pa.field("service", pa.string()),
    pa.field("peer", pa.string()),
    pa.field("peer_port", pa.int64()),
    pa.field("peer_identity", pa.string()),
    pa.field("expected_identity", pa.string()),
    pa.field("method", pa.string()),
    pa.field("path", pa.string()),
    pa.field("result", pa.string()),
    pa.field("reason", pa.string()),
    pa.field("response_bytes", pa.int64()),
])
RESULTS: Final = ("allowed", "denied", "refused", "error")
#: Longest field kept (identity, path, reason…): a longer one is no event a sidecar wrote.
MAX_FIELD: Final = 4096
_NODE: Final = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"
_HOSTPORT: Final = r"^\[?(?P<host>[0-9A-Fa-f.:]{2,45}?)\]?:(?P<port>[0-9]{1,5})$"


def _mask(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    return np.asarray(pc.fill_null(arr, False).to_numpy(zero_copy_only=False), bool)


class TlsSidecarReader:
    """Reads a TLS sidecar's connection log into :data:`TLS_SCHEMA` events."""

    name = "tls"
    schema = TLS_SCHEMA

    def read(self, path: Path, *, node: str | None = None) -> EventResult:
        """Every connection event; records that are not one are skipped with a warning naming their lines."""
        start_log(path)
        return read_json_events(path, SCHEMA, TLS_SCHEMA, lambda t, lines, w: _events(t, lines, path, node, w))


def _events(table: pa.Table, lines: np.ndarray, path: Path, node: str | None, warnings: WarningLog) -> pa.Table:
    n = table.num_rows
    time, bad_time = epoch_seconds_to_ts(table.column("t").combine_chunks())
    bad_time |= ~_mask(pc.is_valid(time))
    direction = table.column("dir")
    dir_ok = _mask(pc.is_in(direction, pa.array(["in", "out"])))
    where = pc.coalesce(table.column("node"), pa.scalar(node, pa.string()))
    node_ok = _mask(pc.match_substring_regex(where, _NODE))
    raw_peer = table.column("peer")
    split = pc.extract_regex(pc.fill_null(raw_peer, ""), _HOSTPORT)
    outbound = _mask(pc.equal(direction, "out"))
    host = pc.if_else(pa.array(outbound), pc.struct_field(split, "host"), raw_peer)
    peer, peer_ok = canonical_ips(host)
    port_text = pc.if_else(pa.array(outbound), pc.struct_field(split, "port"), pa.scalar(None, pa.string()))
    port = pc.if_else(pa.array(outbound), pc.cast(port_text, pa.int64()), table.column("peer_port"))
    port_ok = _mask(pc.fill_null(pc.and_(pc.greater_equal(port, 0), pc.less_equal(port, 65535)), True))
    result_ok = _mask(pc.is_in(table.column("result"), pa.array(RESULTS)))
    size = table.column("response_bytes")
    bytes_ok = _mask(pc.fill_null(pc.greater_equal(size, 0), True))
    long = np.zeros(n, bool)
    for name in ("service", "peer_identity", "expected_identity", "method", "path", "reason"):
        long |= ~_mask(pc.fill_null(pc.less_equal(pc.utf8_length(table.column(name)), MAX_FIELD), True))
    checks = (("time", bad_time), ("direction (in or out)", ~dir_ok), ("node", ~node_ok),
              ("peer address", ~(peer_ok & port_ok)), ("result", ~result_ok), ("byte count", ~bytes_ok),
              ("field (too long)", long))
    bad = np.zeros(n, bool)
    for what, mask in checks:
        mask = mask & ~bad
        warn_skipped(warnings, path, lines[mask], f"no usable {what}", unit="record(s)")
        bad |= mask
    out = pa.table({
        "time": time, "direction": direction, "node": where, "service": table.column("service"), "peer": peer,
        "peer_port": port.cast(pa.int32(), safe=False), "identity": table.column("peer_identity"),
        "expected_identity": table.column("expected_identity"), "method": table.column("method"),
        "path": table.column("path"), "result": table.column("result"), "reason": table.column("reason"),
        "bytes": size, "line": pa.array(lines, pa.int64()), "source": pa.array([str(path)] * n, pa.string()),
    })
    return (out.filter(pa.array(~bad)) if bad.any() else out).cast(TLS_SCHEMA)


__all__ = ["MAX_FIELD", "RESULTS", "SCHEMA", "TlsSidecarReader"]
