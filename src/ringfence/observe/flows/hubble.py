"""Cilium Hubble flow events (``hubble observe -o json``) → flows.

Each Hubble record is one packet-level event in one direction (bare flow objects or
``{"flow": {...}}`` wrappers from ``GetFlowsResponse``). Records are folded into conversations per
node (see :mod:`ringfence.observe.flows._bidir`), oriented by ``is_reply`` (or the older ``reply``),
else by ``traffic_direction`` seen from the local endpoint, else by TCP SYN/SYN-ACK flags.

Hubble exports no packet or byte counters: ``packets`` counts the *events* Hubble emitted for the
conversation (a lower bound, monitor aggregation drops many) and ``bytes`` is 0. Workload identity
comes from the endpoint's namespace, pod and labels; reserved identities (host, world, remote-node…)
are no workload identity and stay null.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ringfence.observe.flows._bidir import RECORD_SCHEMA, to_conversations
from ringfence.observe.flows._common import (
    WarningLog,
    canonical_ips,
    describe_lines,
    iso_to_ts,
    read_head,
    warn_if_empty,
)
from ringfence.observe.flows._jsonl import field, iter_json_records
from ringfence.observe.flows.interface import ProgressFn, ReadResult
from ringfence.observe.schema import Protection, conform

ENCRYPTED_REASON: Final = "hubble: IP.encrypted (WireGuard/IPsec node encryption)"
UNKNOWN_REASON: Final = "hubble: L3/L4 event only; payload not visible to Hubble"

_PORTS = pa.struct([pa.field("source_port", pa.int64()), pa.field("destination_port", pa.int64())])
_TCP = pa.struct(
    [
        pa.field("source_port", pa.int64()),
        pa.field("destination_port", pa.int64()),
        pa.field("flags", pa.struct([pa.field("SYN", pa.bool_()), pa.field("ACK", pa.bool_())])),
    ]
)
_ICMP = pa.struct([pa.field("type", pa.int64()), pa.field("code", pa.int64())])
_ENDPOINT = pa.struct(
    [
        pa.field("ID", pa.int64()),
        pa.field("identity", pa.int64()),
        pa.field("namespace", pa.string()),
        pa.field("labels", pa.list_(pa.string())),
        pa.field("pod_name", pa.string()),
    ]
)
_FLOW = pa.struct(
    [
        pa.field("time", pa.string()),
        pa.field("verdict", pa.string()),
        pa.field("drop_reason_desc", pa.string()),
        pa.field(
            "IP",
            pa.struct(
                [
                    pa.field("source", pa.string()),
                    pa.field("destination", pa.string()),
                    pa.field("encrypted", pa.bool_()),
                ]
            ),
        ),
        pa.field(
            "l4",
            pa.struct(
                [
                    pa.field("TCP", _TCP),
                    pa.field("UDP", _PORTS),
                    pa.field("SCTP", _PORTS),
                    pa.field("ICMPv4", _ICMP),
                    pa.field("ICMPv6", _ICMP),
                ]
            ),
        ),
        pa.field("source", _ENDPOINT),
        pa.field("destination", _ENDPOINT),
        pa.field(
            "l7",
            pa.struct(
                [
                    pa.field("dns", pa.struct([pa.field("query", pa.string())])),
                    pa.field("http", pa.struct([pa.field("url", pa.string()), pa.field("method", pa.string())])),
                    pa.field("kafka", pa.struct([pa.field("topic", pa.string())])),
                ]
            ),
        ),
        pa.field("is_reply", pa.bool_()),
        pa.field("reply", pa.bool_()),
        pa.field("traffic_direction", pa.string()),
        pa.field("node_name", pa.string()),
    ]
)
#: Top level: the GetFlowsResponse wrapper, or the flow object itself (same fields at the top).
SCHEMA: Final = pa.schema([pa.field("flow", _FLOW), *_FLOW])


class HubbleReader:
    """Reads Hubble JSON flow events into conversations with workload identity."""

    name = "hubble"

    def sniff(self, head: bytes) -> bool:
        """A JSON object with Hubble's flow keys (``verdict`` plus ``IP``/``l4``/``Type``)."""
        first = head.lstrip()[:4096]
        if not first.startswith(b"{"):
            return False
        return b'"verdict"' in first and (b'"IP"' in first or b'"l4"' in first or b'"Type"' in first)

    def read(self, path: Path, *, progress: ProgressFn | None = None) -> ReadResult:
        """Read every event, skip unusable ones with warnings, fold the rest into conversations."""
        read_head(path, 1)  # fail early, with our error, on an unreadable file
        warnings = WarningLog()
        parts: list[pa.Table] = []
        records = 0
        for table, lines, consumed in iter_json_records(path, SCHEMA, warnings, progress):
            records += consumed
            if table.num_rows:
                parts.append(_records(table, lines, path, warnings))
        rec = pa.concat_tables(parts) if parts else RECORD_SCHEMA.empty_table()
        conv = to_conversations(rec)
        attr = pc.fill_null(conv["attr"], f"2|{Protection.UNKNOWN.value}||{UNKNOWN_REASON}")
        split = pc.split_pattern(attr, "|", max_splits=3)
        protocol = pc.list_element(split, 2)
        n = conv.num_rows
        flows = conv.drop_columns(["attr", "vantage"]).append_column("protection", pc.list_element(split, 1))
        flows = flows.append_column("protocol", pc.if_else(pc.equal(protocol, ""), None, protocol))
        flows = flows.append_column("reason", pc.list_element(split, 3))
        flows = flows.append_column("source", pa.array([f"hubble:{path.name}"] * n, pa.string()))
        warn_if_empty(path, records, warnings)
        return ReadResult(flows=conform(flows), warnings=warnings.freeze(), records=records)


def _coalesce(table: pa.Table, dotted: str) -> pa.Array:
    """``flow.<dotted>`` from the wrapper, else ``<dotted>`` at the top level."""
    return pc.coalesce(field(table, f"flow.{dotted}"), field(table, dotted))


def _records(table: pa.Table, lines: np.ndarray, path: Path, warnings: WarningLog) -> pa.Table:
    """One block of Hubble events → one-direction records (:data:`RECORD_SCHEMA`)."""
    n = table.num_rows
    src, src_ok = canonical_ips(_coalesce(table, "IP.source"))
    dst, dst_ok = canonical_ips(_coalesce(table, "IP.destination"))
    tcp_s, tcp_d = _coalesce(table, "l4.TCP.source_port"), _coalesce(table, "l4.TCP.destination_port")
    udp_s, udp_d = _coalesce(table, "l4.UDP.source_port"), _coalesce(table, "l4.UDP.destination_port")
    sctp_s, sctp_d = _coalesce(table, "l4.SCTP.source_port"), _coalesce(table, "l4.SCTP.destination_port")
    icmp4 = pc.is_valid(_coalesce(table, "l4.ICMPv4"))
    icmp6 = pc.is_valid(_coalesce(table, "l4.ICMPv6"))
    proto = pc.case_when(
        pc.make_struct(pc.is_valid(tcp_s), pc.is_valid(udp_s), pc.is_valid(sctp_s), icmp4, icmp6),
        pa.scalar(6, pa.uint8()),
        pa.scalar(17, pa.uint8()),
        pa.scalar(132, pa.uint8()),
        pa.scalar(1, pa.uint8()),
        pa.scalar(58, pa.uint8()),
    )
    sport = pc.coalesce(tcp_s, udp_s, sctp_s)
    dport = pc.coalesce(tcp_d, udp_d, sctp_d)
    port_ok = pc.and_(
        pc.fill_null(pc.and_(pc.greater_equal(sport, 0), pc.less_equal(sport, 65535)), True),
        pc.fill_null(pc.and_(pc.greater_equal(dport, 0), pc.less_equal(dport, 65535)), True),
    )
    ts, bad_ts = iso_to_ts(_coalesce(table, "time"))
    if bad_ts.any():
        warnings.add(f"{path}: time not ISO 8601 on {describe_lines(0, lines[bad_ts])}: left empty")
    ok = src_ok & dst_ok & np.asarray(pc.is_valid(proto).to_numpy(zero_copy_only=False), dtype=bool)
    ok &= np.asarray(port_ok.to_numpy(zero_copy_only=False), dtype=bool)
    if (~ok).any():
        warnings.add(
            f"{path}: {int((~ok).sum())} event(s) skipped, {describe_lines(0, lines[~ok])}: "
            "no usable IP addresses, L4 protocol or ports"
        )
    verdict = _coalesce(table, "verdict")
    drop = _coalesce(table, "drop_reason_desc")
    verdict = pc.if_else(
        pc.and_(pc.is_valid(drop), pc.is_valid(verdict)), pc.binary_join_element_wise(verdict, drop, ":"), verdict
    )
    hint = _hint(table, n)
    records = pa.table(
        {
            "src": src,
            "dst": dst,
            "sport": sport.cast(pa.int32(), safe=False),
            "dport": dport.cast(pa.int32(), safe=False),
            "proto": proto,
            "packets": pa.array(np.ones(n, dtype=np.int64)),
            "bytes": pa.array(np.zeros(n, dtype=np.int64)),
            "payload_bytes": pa.nulls(n, pa.int64()),
            "first_seen": ts,
            "last_seen": ts,
            "hint": hint,
            "vantage": _coalesce(table, "node_name"),
            "src_identity": _identity(table, "source"),
            "dst_identity": _identity(table, "destination"),
            "verdict": verdict,
            "attr": _attr(table),
        }
    )
    return records.filter(pa.array(ok)) if not ok.all() else records


def _hint(table: pa.Table, n: int) -> pa.Array:
    """+1 where the event's source initiated the connection, -1 where it is the responder, else 0."""
    reply = pc.coalesce(_coalesce(table, "is_reply"), _coalesce(table, "reply"))
    by_reply = pc.if_else(reply, -1, 1)
    # traffic_direction is the connection's direction relative to the local endpoint (the side with an ID).
    direction = _coalesce(table, "traffic_direction")
    src_local = pc.and_(pc.is_valid(_coalesce(table, "source.ID")), pc.is_null(_coalesce(table, "destination.ID")))
    dst_local = pc.and_(pc.is_valid(_coalesce(table, "destination.ID")), pc.is_null(_coalesce(table, "source.ID")))
    egress = pc.equal(direction, "EGRESS")
    ingress = pc.equal(direction, "INGRESS")
    by_dir = pc.case_when(
        pc.make_struct(
            pc.and_(egress, src_local),
            pc.and_(egress, dst_local),
            pc.and_(ingress, src_local),
            pc.and_(ingress, dst_local),
        ),
        1,
        -1,
        -1,
        1,
    )
    syn = pc.fill_null(_coalesce(table, "l4.TCP.flags.SYN"), False)
    ack = pc.fill_null(_coalesce(table, "l4.TCP.flags.ACK"), False)
    by_flags = pc.if_else(syn, pc.if_else(ack, -1, 1), 0)
    out = pc.coalesce(by_reply, by_dir, by_flags, pa.scalar(0, pa.int64()))
    return pa.array(np.asarray(out.to_numpy(zero_copy_only=False), dtype=np.int8)) if n else pa.array([], pa.int8())


def _identity(table: pa.Table, side: str) -> pa.Array:
    """``k8s:<ns>/<pod> <labels> identity <n>`` for workload endpoints; null without workload identity."""
    ns = _coalesce(table, f"{side}.namespace")
    pod = _coalesce(table, f"{side}.pod_name")
    labels = pc.binary_join(_coalesce(table, f"{side}.labels"), "\x1f")
    ident = _coalesce(table, f"{side}.identity").cast(pa.string())
    key = pc.binary_join_element_wise(
        pc.fill_null(ns, ""), pc.fill_null(pod, ""), pc.fill_null(labels, ""), pc.fill_null(ident, ""), "\x1e"
    )
    enc = pc.dictionary_encode(key)
    texts = [_identity_text(k) for k in enc.dictionary.to_pylist()]
    return pa.DictionaryArray.from_arrays(enc.indices, pa.array(texts, pa.string())).cast(pa.string())


def _identity_text(key: str) -> str | None:
    ns, pod, labels_text, ident = key.split("\x1e")
    labels = [lab for lab in labels_text.split("\x1f") if lab]
    k8s = sorted(
        lab[4:]
        for lab in labels
        if lab.startswith("k8s:")
        and not lab.startswith(("k8s:io.cilium.k8s.namespace.labels.", "k8s:io.kubernetes.pod.namespace="))
    )
    if not ns and not pod and not k8s:
        return None  # reserved (host, world, remote-node, health…) or CIDR identity: no workload
    where = f"k8s:{ns}/{pod}" if pod else f"k8s:{ns}"
    parts = [where]
    if k8s:
        parts.append(",".join(k8s))
    if ident:
        parts.append(f"identity {ident}")
    return " ".join(parts)


def _attr(table: pa.Table) -> pa.Array:
    """Ranked ``rank|protection|protocol|reason`` per event; the conversation keeps the lowest rank."""
    encrypted = pc.fill_null(_coalesce(table, "IP.encrypted"), False)
    dns = pc.is_valid(_coalesce(table, "l7.dns"))
    url = _coalesce(table, "l7.http.url")
    http = pc.is_valid(_coalesce(table, "l7.http"))
    https = pc.fill_null(pc.starts_with(url, "https:"), False)
    kafka = pc.is_valid(_coalesce(table, "l7.kafka"))
    p = Protection
    return pc.case_when(
        pc.make_struct(encrypted, dns, pc.and_(http, pc.invert(https)), kafka, https),
        f"0|{p.ENCRYPTED.value}||{ENCRYPTED_REASON}",
        f"1|{p.PLAINTEXT.value}|dns|hubble: L7 DNS parsed in cleartext by the Cilium DNS proxy",
        f"1|{p.PLAINTEXT.value}|http|hubble: L7 HTTP parsed in cleartext by the Cilium proxy",
        f"1|{p.PLAINTEXT.value}|kafka|hubble: L7 Kafka parsed in cleartext by the Cilium proxy",
        f"2|{p.UNKNOWN.value}|http|hubble: L7 HTTPS seen by the proxy; the wire is not described",
        f"3|{p.UNKNOWN.value}||{UNKNOWN_REASON}",
    )


__all__ = ["ENCRYPTED_REASON", "SCHEMA", "UNKNOWN_REASON", "HubbleReader"]
