"""The telemetry family: event schemas, the result every reader returns, and the family's error.

Events are not flows: a firewall decision or a conntrack event is one moment of one connection,
keyed by its 5-tuple (``src``/``dst``/``sport``/``dport``/``proto``, oriented as the packet or the
connection's original direction reads) and ``time``. Sources join on the 5-tuple's Community ID
(:func:`ringfence.observe.community_id.community_ids`) and on time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Protocol

import pyarrow as pa

from ringfence.errors import InputError
from ringfence.observe.schema import TS


class TelemetryError(InputError):
    """A telemetry log that cannot be read at all: names the file (and line or offset)."""


_TUPLE: Final = [
    pa.field("src", pa.string(), nullable=False),
    pa.field("dst", pa.string(), nullable=False),
    pa.field("sport", pa.int32()),
    pa.field("dport", pa.int32()),
    pa.field("proto", pa.uint8(), nullable=False),
]

#: One firewall decision (an NFLOG record): ``rule`` is the policy's rule id, null for the default drop.
DECISION_SCHEMA: Final = pa.schema([
    pa.field("time", TS, nullable=False), *_TUPLE,
    pa.field("rule", pa.string()),
    pa.field("verdict", pa.string(), nullable=False),  # accept | drop | audit
    pa.field("prefix", pa.string(), nullable=False),  # the log prefix as the kernel gave it
    pa.field("node", pa.string()),  # the enforcement point that logged it
    pa.field("line", pa.int64(), nullable=False),
    pa.field("source", pa.string(), nullable=False),
])

#: One conntrack event (NEW/DESTROY/UPDATE) in the connection's original direction.
CONN_SCHEMA: Final = pa.schema([
    pa.field("time", TS, nullable=False), *_TUPLE,
    pa.field("event", pa.string(), nullable=False),
    pa.field("ct_id", pa.int64()),
    pa.field("node", pa.string()),
    pa.field("line", pa.int64(), nullable=False),
    pa.field("source", pa.string(), nullable=False),
])

#: One DNS answer: ``client`` asked for ``name`` and was told ``answer`` (an address, NXDOMAIN, NODATA…).
DNS_SCHEMA: Final = pa.schema([
    pa.field("time", TS, nullable=False),
    pa.field("client", pa.string()),
    pa.field("name", pa.string(), nullable=False),
    pa.field("answer", pa.string(), nullable=False),
    pa.field("address", pa.string()),  # the answer when it is an address, canonical form
    pa.field("line", pa.int64(), nullable=False),
    pa.field("source", pa.string(), nullable=False),
])


#: One egress gateway decision (a forward proxy's log): ``client`` asked for ``host:port``; ``decision`` allow | deny
#: with its ``reason``; ``bytes`` the volume when the gateway logs one (tinyproxy does not: null).
GATEWAY_SCHEMA: Final = pa.schema([
    pa.field("time", TS, nullable=False),
    pa.field("client", pa.string()),  # canonical address; null when the log tied the decision to no client
    pa.field("host", pa.string()),
    pa.field("port", pa.int32()),
    pa.field("method", pa.string()),
    pa.field("decision", pa.string(), nullable=False),
    pa.field("reason", pa.string(), nullable=False),
    pa.field("bytes", pa.int64()),
    pa.field("node", pa.string()),  # the gateway that logged it
    pa.field("line", pa.int64(), nullable=False),
    pa.field("source", pa.string(), nullable=False),
])


#: One request to an object server (datasets, checkpoints): ``peer`` (``peer_port``) asked ``local``
#: (``local_port``) to ``method`` ``path`` of ``job``'s objects; ``result`` served | refused; ``bytes`` read or
#: written; ``identity`` the TLS peer's (null for plaintext, or when the server is behind a TLS gate).
OBJECT_SCHEMA: Final = pa.schema([
    pa.field("time", TS, nullable=False),
    pa.field("peer", pa.string(), nullable=False),  # canonical address; a loopback peer is the node's TLS gate
    pa.field("peer_port", pa.int32()),
    pa.field("local", pa.string()),
    pa.field("local_port", pa.int32()),
    pa.field("identity", pa.string()),
    pa.field("method", pa.string(), nullable=False),
    pa.field("path", pa.string(), nullable=False),
    pa.field("job", pa.string()),
    pa.field("result", pa.string(), nullable=False),  # served | refused
    pa.field("bytes", pa.int64()),
    pa.field("node", pa.string()),  # the object server's host
    pa.field("line", pa.int64(), nullable=False),
    pa.field("source", pa.string(), nullable=False),
])

#: One connection through a TLS sidecar: ``direction`` in (its gate, in front of a service on ``node``) or out
#: (a client on ``node`` calling ``peer``:``peer_port``); ``identity`` the SPIFFE ID the peer's certificate
#: proved; ``result`` allowed | denied | refused | error with its ``reason``; ``bytes`` the response's size.
TLS_SCHEMA: Final = pa.schema([
    pa.field("time", TS, nullable=False),
    pa.field("direction", pa.string(), nullable=False),  # in | out
    pa.field("node", pa.string(), nullable=False),
    pa.field("service", pa.string()),
    pa.field("peer", pa.string(), nullable=False),  # canonical address
    pa.field("peer_port", pa.int32()),  # out: the service's port; in: the client's (null in older logs)
    pa.field("identity", pa.string()),
    pa.field("expected_identity", pa.string()),
    pa.field("method", pa.string()),
    pa.field("path", pa.string()),
    pa.field("result", pa.string(), nullable=False),
    pa.field("reason", pa.string()),
    pa.field("bytes", pa.int64()),
    pa.field("line", pa.int64(), nullable=False),
    pa.field("source", pa.string(), nullable=False),
])


@dataclass(frozen=True)
class EventResult:
    """Events read from one log, plus warnings naming the lines that were skipped."""

    events: pa.Table
    warnings: tuple[str, ...] = field(default=())
    records: int = 0  # non-blank lines consumed


class EventReader(Protocol):
    """Reads one telemetry log into events of its schema."""

    name: str
    schema: pa.Schema

    def read(self, path: Path, *, node: str | None = None) -> EventResult:
        """Read the whole file; ``node`` names the host it came from when the log does not say."""
        ...


__all__ = ["CONN_SCHEMA", "DECISION_SCHEMA", "DNS_SCHEMA", "GATEWAY_SCHEMA", "OBJECT_SCHEMA", "TLS_SCHEMA",
           "EventReader", "EventResult", "TelemetryError"]
