"""The ONE columnar flow schema every flow source produces (Arrow).

A flow is a bidirectional conversation keyed by its 5-tuple (plus the outer tunnel, if any),
oriented from the *initiator* (``src``) to the *responder* (``dst``): the initiator is the side that
sent a TCP SYN without ACK, else the side talking *to* a well-known port (< 1024 or a registered
service port), else the sender of the first packet seen. Counters cover both directions; ``*_fwd``
columns count initiator → responder only.

Classification columns (``src_node`` … ``approved``) are null until :mod:`ringfence.analyze` fills
them in from the policy. Every flow source fills the columns it knows and leaves the rest null;
it must never invent a value (an unknown protection is ``"unknown"`` with a reason).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final

import pyarrow as pa


class Protection(StrEnum):
    """What the payload of a flow shows about its confidentiality."""

    ENCRYPTED = "encrypted"
    PLAINTEXT = "plaintext"
    INTEGRITY_ONLY = "integrity-only"
    HANDSHAKE_ONLY = "handshake-only"
    UNKNOWN = "unknown"


TS: Final = pa.timestamp("ns", tz="UTC")

#: Columns every flow source produces (in this order).
OBSERVED_FIELDS: Final[list[pa.Field]] = [
    pa.field("src", pa.string(), nullable=False),  # initiator IP, canonical text form
    pa.field("dst", pa.string(), nullable=False),  # responder IP
    pa.field("sport", pa.int32()),  # null for protocols without ports
    pa.field("dport", pa.int32()),
    pa.field("proto", pa.uint8(), nullable=False),  # IP protocol number (6 tcp, 17 udp, 50 esp, …)
    pa.field("packets", pa.int64(), nullable=False),  # both directions
    pa.field("bytes", pa.int64(), nullable=False),  # IP-layer bytes, both directions
    pa.field("packets_fwd", pa.int64()),  # initiator → responder
    pa.field("bytes_fwd", pa.int64()),
    pa.field("payload_bytes", pa.int64()),  # L4 payload bytes, both directions (null if unknown)
    pa.field("first_seen", TS),
    pa.field("last_seen", TS),
    pa.field("protection", pa.string(), nullable=False),  # a Protection value
    pa.field("protocol", pa.string()),  # what was recognised: "tls1.3", "ssh", "http", "gloo", …
    pa.field("reason", pa.string()),  # the verdict in words
    pa.field("outer", pa.string()),  # outer encapsulation, e.g. "vxlan 10.0.0.1→10.0.0.2 vni 42"
    pa.field("vlan", pa.int32()),  # innermost 802.1Q id, if any
    pa.field("pkey", pa.int32()),  # InfiniBand partition key (RoCEv2 BTH P_Key), the highest seen; null if none
    pa.field("src_identity", pa.string()),  # workload identity where the source knows it (Hubble…)
    pa.field("dst_identity", pa.string()),
    pa.field("verdict", pa.string()),  # the data plane's own verdict (Hubble FORWARDED/DROPPED…)
    pa.field("source", pa.string(), nullable=False),  # where the record came from: "pcap:lab.pcap"
]

#: Columns added by classification against a policy.
CLASSIFIED_FIELDS: Final[list[pa.Field]] = [
    pa.field("src_node", pa.string()),
    pa.field("dst_node", pa.string()),
    pa.field("src_zone", pa.string()),
    pa.field("dst_zone", pa.string()),
    pa.field("src_job", pa.string()),
    pa.field("dst_job", pa.string()),
    pa.field("class", pa.string()),  # storage|collective|management|replication|unclassified
    pa.field("rule", pa.string()),  # id of the approved-matrix entry that allows it, null if none
    pa.field("approved", pa.bool_()),
]

FLOW_SCHEMA: Final = pa.schema(OBSERVED_FIELDS)
CLASSIFIED_SCHEMA: Final = pa.schema(OBSERVED_FIELDS + CLASSIFIED_FIELDS)


#: RDMA connections seen in a capture: one row per (sender, receiver, destination QP), from every BTH.
RDMA_CONN_SCHEMA: Final = pa.schema(
    [
        pa.field("src", pa.string(), nullable=False),  # sender: IP (RoCEv2), GID (GRH) or "LID n"
        pa.field("dst", pa.string(), nullable=False),  # receiver, owner of dest_qp
        pa.field("sport", pa.int32()),  # UDP ports of RoCEv2 (null on native InfiniBand)
        pa.field("dport", pa.int32()),
        pa.field("transport", pa.string(), nullable=False),  # "rocev2" | "infiniband"
        pa.field("dest_qp", pa.int64(), nullable=False),
        pa.field("pkey", pa.int32(), nullable=False),  # the highest P_Key seen
        pa.field("packets", pa.int64(), nullable=False),
        pa.field("requests", pa.int64(), nullable=False),  # packets that carry the sender's own PSN
        pa.field("first_psn", pa.int64()),  # PSN of the first request seen (null: none seen)
        pa.field("first_opcode", pa.int32(), nullable=False),
        pa.field("first_seen", TS, nullable=False),
        pa.field("first_packet", pa.int64(), nullable=False),  # index in the capture (file order)
        pa.field("source", pa.string(), nullable=False),
    ]
)

#: Remote keys seen in RETH (and AtomicETH) headers: one row per (sender, receiver, destination QP, rkey).
RDMA_KEY_SCHEMA: Final = pa.schema(
    [
        pa.field("src", pa.string(), nullable=False),
        pa.field("dst", pa.string(), nullable=False),  # the host whose memory the key opens
        pa.field("dest_qp", pa.int64(), nullable=False),
        pa.field("rkey", pa.int64(), nullable=False),
        pa.field("va_first", pa.uint64(), nullable=False),  # virtual address of the first access
        pa.field("va_min", pa.uint64(), nullable=False),
        pa.field("va_end", pa.uint64(), nullable=False),  # highest va + DMA length
        pa.field("dma_len", pa.int64(), nullable=False),  # of the first access
        pa.field("packets", pa.int64(), nullable=False),
        pa.field("first_seen", TS, nullable=False),
        pa.field("first_packet", pa.int64(), nullable=False),
        pa.field("source", pa.string(), nullable=False),
    ]
)

#: What sampled RDMA payload heads look like, per (sender, receiver).
RDMA_PAYLOAD_SCHEMA: Final = pa.schema(
    [
        pa.field("src", pa.string(), nullable=False),
        pa.field("dst", pa.string(), nullable=False),
        pa.field("samples", pa.int64(), nullable=False),  # heads of at least 16 captured payload bytes
        pa.field("low_entropy", pa.int64(), nullable=False),  # of which below the plaintext entropy bound
        pa.field("mean_entropy", pa.float64(), nullable=False),  # bits per byte over the samples
        pa.field("source", pa.string(), nullable=False),
    ]
)


@dataclass(frozen=True)
class RdmaFacts:
    """The RDMA transport facts of one capture, gathered in the flow reader's pass."""

    conns: pa.Table  # RDMA_CONN_SCHEMA
    keys: pa.Table  # RDMA_KEY_SCHEMA
    payload: pa.Table  # RDMA_PAYLOAD_SCHEMA
    packets: int  # RDMA packets seen (whole BTH or not)
    truncated: int  # packets whose BTH, or the RETH their opcode announces, the capture cut short
    truncated_at: int  # file offset of the first of them (-1: none)

    @property
    def seen(self) -> bool:
        """Whether any RDMA packet with a whole BTH was seen."""
        return bool(self.conns.num_rows > 0)


def empty_flows() -> pa.Table:
    """An empty table with the observed flow schema."""
    return FLOW_SCHEMA.empty_table()


def conform(table: pa.Table) -> pa.Table:
    """Return ``table`` with exactly the observed schema: missing columns null, order fixed.

    Raises ``ValueError`` if a column that must not be null is missing.
    """
    cols = []
    for field in FLOW_SCHEMA:
        if field.name in table.column_names:
            cols.append(table.column(field.name).cast(field.type))
        elif field.nullable:
            cols.append(pa.nulls(table.num_rows, type=field.type))
        else:
            raise ValueError(f"flow table lacks required column {field.name!r}")
    return pa.Table.from_arrays(cols, schema=FLOW_SCHEMA)


__all__ = [
    "RDMA_CONN_SCHEMA",
    "RDMA_KEY_SCHEMA",
    "RDMA_PAYLOAD_SCHEMA",
    "CLASSIFIED_FIELDS",
    "CLASSIFIED_SCHEMA",
    "FLOW_SCHEMA",
    "OBSERVED_FIELDS",
    "Protection",
    "RdmaFacts",
    "conform",
    "empty_flows",
]
