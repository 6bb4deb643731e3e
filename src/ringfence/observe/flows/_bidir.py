"""Fold one-direction flow records (NetFlow, VPC Flow Logs, Hubble events) into conversations.

The flow schema holds *conversations* oriented from the initiator. Exporters that log each direction
separately would otherwise yield a reply record (``server:22 → client:50000``) that looks like an
unapproved flow from the server. Records are grouped by the unordered 5-tuple plus the vantage
point (the interface, exporter or node that logged them, so two observers of the same packets are not
added together) and oriented, in this order of trust:

1. an explicit hint from the record (a TCP SYN without ACK, Hubble ``is_reply``),
2. a service port on exactly one side (< 1024, or < 32768 facing an ephemeral port ≥ 32768),
3. the direction whose first record is earliest (without times: the direction with more records).
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from ringfence.observe.schema import TS

#: Columns the caller provides, one row per one-direction record.
RECORD_SCHEMA: Final = pa.schema(
    [
        pa.field("src", pa.string(), nullable=False),
        pa.field("dst", pa.string(), nullable=False),
        pa.field("sport", pa.int32()),
        pa.field("dport", pa.int32()),
        pa.field("proto", pa.uint8(), nullable=False),
        pa.field("packets", pa.int64(), nullable=False),
        pa.field("bytes", pa.int64(), nullable=False),
        pa.field("payload_bytes", pa.int64()),
        pa.field("first_seen", TS),
        pa.field("last_seen", TS),
        pa.field("hint", pa.int8(), nullable=False),  # +1: src initiated; -1: src is the responder; 0: unknown
        pa.field("vantage", pa.string()),
        pa.field("src_identity", pa.string()),
        pa.field("dst_identity", pa.string()),
        pa.field("verdict", pa.string()),
        pa.field("attr", pa.string()),  # flow-bound text the caller wants folded by minimum (e.g. a ranked verdict)
    ]
)

_EPHEMERAL: Final = 32768


def _np(col: pa.ChunkedArray | pa.Array, fill: int) -> npt.NDArray[np.int64]:
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    return np.asarray(pc.fill_null(arr.cast(pa.int64()), fill).to_numpy(zero_copy_only=False), dtype=np.int64)


def _service_side(port: npt.NDArray[np.int64], other: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
    """True where ``port`` looks like the service end of the pair."""
    return (port >= 0) & ((port < 1024) | ((port < _EPHEMERAL) & (other >= _EPHEMERAL)))


def to_conversations(records: pa.Table) -> pa.Table:
    """Fold one-direction records (:data:`RECORD_SCHEMA`) into oriented conversations.

    Returns the observed-schema counter, time, identity and verdict columns plus ``attr`` and
    ``vantage``; the caller adds protection, reason and source and conforms the table.
    """
    t = records.select(RECORD_SCHEMA.names).cast(RECORD_SCHEMA)
    sport = pc.fill_null(t["sport"], -1)
    dport = pc.fill_null(t["dport"], -1)
    same_ip = pc.equal(t["src"], t["dst"])
    swapped = pc.or_(pc.greater(t["src"], t["dst"]), pc.and_(same_ip, pc.greater(sport, dport)))
    not_swapped = pc.invert(swapped)
    zero = pa.scalar(0, pa.int64())
    null_ts = pa.scalar(None, pa.int64())
    first = t["first_seen"].cast(pa.int64())
    work = pa.table(
        {
            "vantage": pc.fill_null(t["vantage"], ""),
            "a_ip": pc.if_else(swapped, t["dst"], t["src"]),
            "a_port": pc.if_else(swapped, dport, sport),
            "b_ip": pc.if_else(swapped, t["src"], t["dst"]),
            "b_port": pc.if_else(swapped, sport, dport),
            "proto": t["proto"],
            "rec_ab": not_swapped.cast(pa.int64()),
            "pk_ab": pc.if_else(swapped, zero, t["packets"]),
            "pk_ba": pc.if_else(not_swapped, zero, t["packets"]),
            "by_ab": pc.if_else(swapped, zero, t["bytes"]),
            "by_ba": pc.if_else(not_swapped, zero, t["bytes"]),
            "payload": t["payload_bytes"],
            "payload_missing": pc.is_null(t["payload_bytes"]).cast(pa.int64()),
            "first_ab": pc.if_else(swapped, null_ts, first),
            "first_ba": pc.if_else(not_swapped, null_ts, first),
            "last": t["last_seen"].cast(pa.int64()),
            "hint_ab": pc.if_else(swapped, pc.negate(t["hint"].cast(pa.int64())), t["hint"].cast(pa.int64())),
            "id_a": pc.if_else(swapped, t["dst_identity"], t["src_identity"]),
            "id_b": pc.if_else(swapped, t["src_identity"], t["dst_identity"]),
            "verdict": t["verdict"],
            "attr": t["attr"],
        }
    )
    keys = ["vantage", "a_ip", "a_port", "b_ip", "b_port", "proto"]
    g = work.group_by(keys, use_threads=False).aggregate(
        [
            ("rec_ab", "sum"),
            ("rec_ab", "count"),
            ("pk_ab", "sum"),
            ("pk_ba", "sum"),
            ("by_ab", "sum"),
            ("by_ba", "sum"),
            ("payload", "sum"),
            ("payload_missing", "sum"),
            ("first_ab", "min"),
            ("first_ba", "min"),
            ("last", "max"),
            ("hint_ab", "sum"),
            ("id_a", "min"),
            ("id_b", "min"),
            ("verdict", "distinct"),
            ("attr", "min"),
        ]
    )
    a_port = _np(g["a_port"], -1)
    b_port = _np(g["b_port"], -1)
    hint = _np(g["hint_ab_sum"], 0)
    fa = _np(g["first_ab_min"], np.iinfo(np.int64).max)
    fb = _np(g["first_ba_min"], np.iinfo(np.int64).max)
    a_service = _service_side(a_port, b_port)
    b_service = _service_side(b_port, a_port)
    by_port = b_service != a_service
    n_ab = _np(g["rec_ab_sum"], 0)
    n_ba = _np(g["rec_ab_count"], 0) - n_ab
    by_time = np.where(fa != fb, fa < fb, n_ab >= n_ba)  # no usable times: the side that sent more records
    a_init = np.where(hint != 0, hint > 0, np.where(by_port, b_service, by_time))
    a_mask = pa.array(a_init)

    def pick(a: pa.ChunkedArray | pa.Array, b: pa.ChunkedArray | pa.Array) -> pa.Array:
        return pc.if_else(a_mask, a, b)

    pk_ab, pk_ba = g["pk_ab_sum"], g["pk_ba_sum"]
    by_ab, by_ba = g["by_ab_sum"], g["by_ba_sum"]
    payload = pc.if_else(pc.greater(g["payload_missing_sum"], 0), pa.scalar(None, pa.int64()), g["payload_sum"])
    first = pc.min_element_wise(g["first_ab_min"], g["first_ba_min"])
    verdicts = pc.binary_join(g["verdict_distinct"], ",")
    verdicts = pc.if_else(pc.equal(verdicts, ""), pa.scalar(None, pa.string()), verdicts)
    sport_out = pick(g["a_port"], g["b_port"])
    dport_out = pick(g["b_port"], g["a_port"])
    no_port = pa.scalar(None, pa.int32())
    return pa.table(
        {
            "src": pick(g["a_ip"], g["b_ip"]),
            "dst": pick(g["b_ip"], g["a_ip"]),
            "sport": pc.if_else(pc.less(sport_out, 0), no_port, sport_out.cast(pa.int32())),
            "dport": pc.if_else(pc.less(dport_out, 0), no_port, dport_out.cast(pa.int32())),
            "proto": g["proto"],
            "packets": pc.add(pk_ab, pk_ba),
            "bytes": pc.add(by_ab, by_ba),
            "packets_fwd": pick(pk_ab, pk_ba),
            "bytes_fwd": pick(by_ab, by_ba),
            "payload_bytes": payload,
            "first_seen": first.cast(TS),
            "last_seen": g["last_max"].cast(TS),
            "src_identity": pick(g["id_a_min"], g["id_b_min"]),
            "dst_identity": pick(g["id_b_min"], g["id_a_min"]),
            "verdict": verdicts,
            "attr": g["attr_min"],
            "vantage": pc.if_else(pc.equal(g["vantage"], ""), pa.scalar(None, pa.string()), g["vantage"]),
        }
    )


__all__ = ["RECORD_SCHEMA", "to_conversations"]
