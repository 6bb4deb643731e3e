"""The object server's requests and the TLS sidecars' records that belong to one traced flow.

* An object request whose log carries its 5-tuple joins by Community ID, within the connection's life (its
  conntrack DESTROY, else :data:`OPEN_FOR` after its first packet): exact, and every request a kept-alive
  connection carried.
* Behind a TLS gate the server sees the gate (a loopback peer): the gate's own record — client address, the
  service's node, method, path, time — ties the flow to the request the gate forwarded (``tls-gate``).
* A log without ports joins by the client's address and the server's, nearest in time within :data:`NEAR`
  (``address-time``).

The sidecars' records give the identities: the gate in front of the responder names the initiator's SPIFFE
ID (its certificate, checked there), the initiator's outbound sidecar names the responder's. The gate logs the
client's port: its record is this flow's only when that is the flow's source port (a log from before it did
joins by addresses alone); the outbound record names the service's address and port. Either is the nearest
such record within :data:`NEAR`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ringfence.observe.community_id import community_ids
from ringfence.trace.model import ObjectAccess, ObjectJoin, TlsRecord

LOOPBACK = ("127.0.0.1", "::1")
#: How long after its first packet a connection with no recorded end may still carry a request.
OPEN_FOR = timedelta(seconds=60)
#: A record joined by addresses and time belongs to the flow it is nearest to, within this much of it.
NEAR = timedelta(seconds=5)
#: Clocks of one host's logs: a record may precede the packet the kernel logged by this much.
SLACK = timedelta(seconds=1)


@dataclass(frozen=True)
class Window:
    """The traced flow as the joins need it: its 5-tuple, Community ID, life, and the ends' node names."""

    src: str
    dst: str
    sport: int | None
    dport: int | None
    cid: str | None
    start: datetime
    end: datetime | None  # conntrack's DESTROY; None: not recorded
    src_node: str | None
    dst_node: str | None


@dataclass(frozen=True)
class Joined:
    """What the object and sidecar logs say of the flow."""

    objects: tuple[ObjectAccess, ...]
    tls: tuple[TlsRecord, ...]
    src_identity: str | None  # proved at the responder's gate
    dst_identity: str | None  # proved to the initiator's sidecar


def _iso(value: Any) -> str:
    return value.isoformat() if isinstance(value, datetime) else str(value)


def _within(table: pa.Table, start: datetime, end: datetime) -> pa.Table:
    ts = table.schema.field("time").type
    col = table.column("time")
    return table.filter(pc.and_(pc.greater_equal(col, pa.scalar(start, ts)), pc.less_equal(col, pa.scalar(end, ts))))


def _eq(table: pa.Table, column: str, value: Any) -> pa.Array:
    return pc.fill_null(pc.equal(table.column(column), pa.scalar(value, table.schema.field(column).type)), False)


def _nearest(rows: list[dict[str, Any]], when: datetime) -> dict[str, Any] | None:
    return min(rows, key=lambda r: abs((r["time"] - when).total_seconds()), default=None)


def _access(row: dict[str, Any], joined: ObjectJoin, identity: str | None) -> ObjectAccess:
    return ObjectAccess(time=_iso(row["time"]), node=row["node"], method=row["method"], path=row["path"],
                        job=row["job"], result=row["result"], bytes=row["bytes"], identity=identity,
                        joined=joined, source=row["source"], line=row["line"])


def _record(row: dict[str, Any]) -> TlsRecord:
    return TlsRecord(time=_iso(row["time"]), direction=row["direction"], node=row["node"], peer=row["peer"],
                     identity=row["identity"], method=row["method"], path=row["path"], result=row["result"],
                     reason=row["reason"], source=row["source"], line=row["line"], peer_port=row["peer_port"])


def _sidecars(tls: pa.Table, w: Window) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(the responder's gate record of this client, the initiator's outbound record of this service)."""
    if tls.num_rows == 0:
        return None, None
    near = _within(tls, w.start - SLACK, (w.end or w.start) + NEAR)
    gate = client = None
    if w.dst_node is not None:
        mask = pc.and_(pc.and_(_eq(near, "direction", "in"), _eq(near, "node", w.dst_node)), _eq(near, "peer", w.src))
        if w.sport is not None:  # a gate that logged the client's port is this flow's only when it is the sport
            port = near.column("peer_port")
            mask = pc.and_(mask, pc.fill_null(pc.equal(port, pa.scalar(w.sport, port.type)), True))
        gate = _nearest(near.filter(mask).to_pylist(), w.start)
    if w.src_node is not None and w.dport is not None:
        mask = pc.and_(pc.and_(_eq(near, "direction", "out"), _eq(near, "node", w.src_node)),
                       pc.and_(_eq(near, "peer", w.dst), _eq(near, "peer_port", w.dport)))
        client = _nearest(near.filter(mask).to_pylist(), w.start)
    return gate, client


def _by_tuple(objects: pa.Table, w: Window) -> list[ObjectAccess]:
    ported = objects.filter(pc.and_(pc.is_valid(objects.column("peer_port")), pc.is_valid(objects.column("local"))))
    if w.cid is None or ported.num_rows == 0:
        return []
    ported = _within(ported, w.start - SLACK, (w.end or w.start + OPEN_FOR) + SLACK)
    tuples = pa.table({"src": ported.column("peer"), "dst": ported.column("local"),
                       "sport": ported.column("peer_port"), "dport": ported.column("local_port"),
                       "proto": pa.array([6] * ported.num_rows, pa.uint8())})
    mine = ported.filter(pc.fill_null(pc.equal(community_ids(tuples), w.cid), False))
    return [_access(r, "5-tuple", r["identity"]) for r in sorted(mine.to_pylist(), key=lambda r: r["time"])]


def _through_gate(objects: pa.Table, gate: dict[str, Any] | None, w: Window) -> list[ObjectAccess]:
    if gate is None or gate["path"] is None or w.dst_node is None:
        return []
    near = _within(objects, gate["time"] - NEAR, gate["time"] + SLACK)
    mask = pc.and_(pc.and_(_eq(near, "node", w.dst_node), pc.is_in(near.column("peer"), pa.array(LOOPBACK))),
                   pc.and_(_eq(near, "method", gate["method"]), _eq(near, "path", gate["path"])))
    hit = _nearest(near.filter(mask).to_pylist(), gate["time"])
    return [_access(hit, "tls-gate", gate["identity"])] if hit is not None else []


def _by_address(objects: pa.Table, w: Window) -> list[ObjectAccess]:
    bare = objects.filter(pc.is_null(objects.column("peer_port")))
    if bare.num_rows == 0:
        return []
    near = _within(bare, w.start - SLACK, w.start + NEAR)
    local_ok = pc.fill_null(pc.equal(near.column("local"), w.dst), True)
    # a record names its server's host when the collector knew it: then it must be the responder's
    node_ok = (pc.fill_null(pc.equal(near.column("node"), w.dst_node), True) if w.dst_node is not None
               else pa.array([True] * near.num_rows))
    hit = _nearest(near.filter(pc.and_(pc.and_(_eq(near, "peer", w.src), local_ok), node_ok)).to_pylist(), w.start)
    return [_access(hit, "address-time", hit["identity"])] if hit is not None else []


def join(objects: pa.Table, tls: pa.Table, w: Window) -> Joined:
    """The requests and sidecar records of the flow ``w`` describes (see the module docstring)."""
    gate, client = _sidecars(tls, w)
    found: list[ObjectAccess] = []
    if objects.num_rows:
        found = _by_tuple(objects, w) or _through_gate(objects, gate, w) or _by_address(objects, w)
    records = tuple(_record(r) for r in sorted((r for r in (client, gate) if r is not None), key=lambda r: r["time"]))
    return Joined(tuple(found), records, gate["identity"] if gate else None, client["identity"] if client else None)


__all__ = ["LOOPBACK", "NEAR", "OPEN_FOR", "SLACK", "Joined", "Window", "join"]
