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
    "CLASSIFIED_FIELDS",
    "CLASSIFIED_SCHEMA",
    "FLOW_SCHEMA",
    "OBSERVED_FIELDS",
    "Protection",
    "conform",
    "empty_flows",
]
