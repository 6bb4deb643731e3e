"""Label every sampled packet by its protocol framing, in priority order (first match wins)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from ringfence.observe.recognise import framing_apps as ap
from ringfence.observe.recognise import framing_bigdata as bd
from ringfence.observe.recognise import framing_datagram as dg
from ringfence.observe.recognise import framing_datastores as ds
from ringfence.observe.recognise import framing_messaging as mq
from ringfence.observe.recognise import framing_network as nw
from ringfence.observe.recognise import framing_services as sv
from ringfence.observe.recognise import framing_storage as sg
from ringfence.observe.recognise import framing_stream as st
from ringfence.observe.recognise import framing_tunnels as tn
from ringfence.observe.recognise import framing_vpn as vpn
from ringfence.observe.recognise._bytes import HEAD, I64, N_COLS, Labeller, Packets, table
from ringfence.observe.recognise.labels import Label
from ringfence.observe.samples import FlowKeys, PayloadSamples

Recogniser = Callable[[Packets, Labeller], None]

# Strong, length-checked framings first; port-defined and weaker ones last.
_ORDER: Final[tuple[Recogniser, ...]] = (
    dg.macsec,
    dg.esp,
    dg.ah,
    tn.gre,
    tn.l2tp,
    st.rft,
    st.tls,
    st.ssh,
    st.http,
    st.gloo,
    nw.bgp,
    mq.zmtp,
    mq.amqp,
    st.ssh_kex,
    dg.dtls,
    dg.wireguard,
    vpn.openvpn,
    dg.quic,
    dg.ike,
    dg.nat_keepalive,
    dg.esp_in_udp,
    dg.roce,
    nw.bfd,
    dg.ptp,  # port-defined and length-exact: before the services' looser length tests claim its rows
    nw.vrrp,
    nw.ospf,
    nw.igmp,
    nw.pim,
    ap.mongodb,
    ap.rfb,
    ap.telnet,
    ds.redis,
    ds.memcached,
    ds.zookeeper,
    ds.cassandra,
    bd.hadoop_rpc,
    bd.hdfs_data,
    bd.spark,
    # then the storage and management protocols (_SERVICES, on their candidate rows only)
    st.dns,
    dg.ntp,
    st.syslog,
)
#: Where :data:`_ORDER` hands over to :data:`_SERVICES` (before the weaker DNS, NTP and syslog tests).
_SERVICES_AT: Final = _ORDER.index(st.dns)
# Storage and management protocols: fixed fields and bounded BER walks.
_SERVICES: Final[tuple[Recogniser, ...]] = (
    sg.onc_rpc,
    sg.smb,
    sg.iscsi,
    sg.nvme_tcp,
    sg.ceph,
    sg.lnet,
    sg.beegfs,
    sg.drbd,
    sv.snmp,
    sv.rmcp,
    sv.kerberos,
    sv.ldap,
    sv.radius,
    sv.tacacs,
    sv.pptp,
    nw.hsrp,
    sv.dhcp,
    sv.tftp_request,
    sv.postgres,
    sv.mysql,
    sv.mqtt,
    sv.rdp,
    sv.kafka,
    sv.slurm,
)


def _first_byte_table() -> npt.NDArray[np.bool_]:
    """First payload bytes any :data:`_SERVICES` recogniser can start with (a superset, for a cheap gate);
    Ceph frame tags (1..30) are gated with their segment count instead, which keeps the table sparse."""
    table = np.zeros(256, dtype=np.bool_)
    table[:14] = True  # lengths' high bytes (RPC, SMB, Kafka, Slurm, PostgreSQL, TFTP, LNet), NVMe, DHCP, RADIUS
    # MQTT, RMCP, RDP and iSCSI opcodes, SNMP/LDAP SEQUENCE, Ceph banner, Kerberos tags, RPC mark, LNet magics
    table[[0x10, 0x23, 0x24, 0x43, 0x44, 0x64, 0x30, 0x63, 0x6A, 0x6B, 0x6C, 0x6D, 0x6E, 0x6F, 0x7E]] = True
    table[[0x80, 0xAC, 0xED, 0xEE, 0x28, 0x29, 0x2A, 0x2B, 0x2C, 0x2D]] = True  # … RADIUS CoA/Disconnect
    table[[0xC0, 0xC1]] = True  # TACACS+ versions
    table[[0x83, 0x86]] = True  # DRBD magics (BeeGFS's little-endian length passes the TCP length gate)
    return table


_SERVICE_FIRST: Final = _first_byte_table()
_KRB_TCP: Final = table([0x6A, 0x6B, 0x6C, 0x6D, 0x6E, 0x6F, 0x7E])
_GQUIC_TAGS: Final = (b"CHLO", b"REJ\x00", b"SHLO")
_RX_HEADER: Final = 28


@dataclass(frozen=True)
class Framing:
    """Per sampled packet: its :class:`Label` and the body region to check for readable data (-1: none)."""

    label: npt.NDArray[np.int16]
    body_start: I64
    body_stop: I64


def packets(keys: FlowKeys, samples: PayloadSamples) -> Packets:
    """Broadcast each flow's header facts to its sampled packets."""
    flow = samples.flow.astype(np.int64)
    length = samples.length.astype(np.int64)
    head = np.ascontiguousarray(samples.head, dtype=np.uint8)
    return Packets(
        head=head,
        cols=np.ascontiguousarray(head[:, :N_COLS].T),
        length=length,
        valid=np.clip(length, 0, HEAD),
        flow=flow,
        forward=samples.forward.astype(np.bool_),
        proto=keys.proto[flow],
        ethertype=keys.ethertype[flow],
        sport=keys.sport[flow],
        dport=keys.dport[flow],
    )


def _gquic_tags(p: Packets, out: Labeller, n_flows: int) -> None:
    """In flows already shown to be gQUIC, packets carrying crypto-handshake tags are handshake too."""
    gquic_flows = np.zeros(n_flows, dtype=np.bool_)
    gquic_flows[p.flow[out.label == Label.GQUIC_HS]] = True
    idx = np.flatnonzero(out.free & gquic_flows[p.flow])
    if idx.size:
        found = st.rows_matching_tags(p.head[idx], _GQUIC_TAGS)
        out.assign(idx, np.where(found, Label.GQUIC_HS, 0).astype(np.int64))


def _tftp_transfer(p: Packets, out: Labeller) -> None:
    """TFTP DATA (opcode 3, block, <= 65464 data bytes: RFC 1350, 2348) and ACK (opcode 4, block;
    exactly 4 bytes) are two fixed bytes each, too little alone; a DATA block that the other side of
    the same flow ACKs is a transfer (the server answers from a fresh port, so the request is elsewhere)."""
    c = p.cols
    udp = out.free & (p.proto == 17) & (c[0] == 0)
    data = np.flatnonzero(udp & (c[1] == 3) & (p.length >= 4) & (p.length <= 65468))
    ack = np.flatnonzero(udp & (c[1] == 4) & (p.length == 4))
    if data.size == 0 or ack.size == 0:
        return
    block = (c[2].astype(np.int64) << 8) | c[3]
    # Key: flow, the direction DATA travels, block number.
    data_key = (p.flow[data] << 17) | (p.forward[data].astype(np.int64) << 16) | block[data]
    ack_key = (p.flow[ack] << 17) | ((~p.forward[ack]).astype(np.int64) << 16) | block[ack]
    both = np.intersect1d(data_key, ack_key)
    out.assign(data, np.where(np.isin(data_key, both), Label.TFTP_DATA, 0).astype(np.int64))
    out.assign(ack, np.where(np.isin(ack_key, both), Label.TFTP_ACK, 0).astype(np.int64))


def _rx(p: Packets, out: Labeller) -> None:
    """AFS Rx over UDP (the OpenAFS ``rx_header``, 28 bytes): epoch, connection id (low 2 bits: the
    channel), call number, sequence, serial, type 1..13, flags, user status, security index 0..3,
    spare, service id. A header is ~10 bits of evidence, too little alone; two packets of one flow
    with the same epoch and connection id (each a 32-bit value the client chose) make an Rx connection.
    DATA (type 1) bodies after the header are checked for readable data."""
    udp = np.flatnonzero(out.free & (p.proto == 17) & (p.length >= _RX_HEADER))
    # type and security index lie past the transposed columns: read them from the head, UDP rows only
    ok = ((p.head[udp, 20] - 1) < 13) & (p.head[udp, 23] <= 3)
    rows = udp[ok]
    if rows.size < 2:
        return
    s = p.head[rows]
    epoch = (s[:, 0].astype(np.int64) << 24) | (s[:, 1].astype(np.int64) << 16) | (s[:, 2].astype(np.int64) << 8)
    epoch |= s[:, 3]
    cid = (s[:, 4].astype(np.int64) << 22) | (s[:, 5].astype(np.int64) << 14) | (s[:, 6].astype(np.int64) << 6)
    cid |= s[:, 7] >> 2
    key = np.stack([p.flow[rows], epoch, cid], axis=1)
    _, inverse, counts = np.unique(key, axis=0, return_inverse=True, return_counts=True)
    shared = counts[inverse.reshape(-1)] >= 2
    data = s[:, 20] == 1
    security = s[:, 23]
    codes = np.select(
        [shared & data & (security == 0), shared & data & (security == 2), shared],
        [Label.RX_NULL, Label.RX_KAD, Label.RX_CTRL],
        0,
    ).astype(np.int64)
    body = codes == Label.RX_KAD
    out.assign(rows, codes, np.where(body, _RX_HEADER, -1), p.valid[rows])


def _services(p: Packets, out: Labeller) -> None:
    """Run :data:`_SERVICES` on the free rows that pass a cheap gate (their first byte, or the fields
    MySQL's, UDP RPC's and TCP Kerberos' rules start from), gathered once: most traffic is never a candidate."""
    c = p.cols
    tcp, udp = p.proto == 6, p.proto == 17
    gate = _SERVICE_FIRST[c[0]] | (tcp & ((c[3] <= 1) | _KRB_TCP[c[4]] | (((c[0] - 1) < 30) & ((c[1] - 1) < 4))))
    gate |= udp & (c[4] == 0) & (c[5] == 0) & (c[6] == 0)
    rows = np.flatnonzero(gate & out.free)
    if rows.size == 0:
        return
    sub = Labeller(rows.size)
    q = p.subset(rows)
    for recognise in _SERVICES:
        recognise(q, sub)
    out.assign(rows, sub.label.astype(np.int64))


def label_packets(p: Packets, n_flows: int) -> Framing:
    """Run every recogniser over the packets; see ``docs/verdicts.md`` for what each one checks."""
    out = Labeller(p.m)
    for recognise in _ORDER[:_SERVICES_AT]:
        recognise(p, out)
    _services(p, out)
    for recognise in _ORDER[_SERVICES_AT:]:
        recognise(p, out)
    _gquic_tags(p, out, n_flows)
    _tftp_transfer(p, out)
    _rx(p, out)
    return Framing(label=out.label, body_start=out.body_start, body_stop=out.body_stop)


__all__ = ["Framing", "label_packets", "packets"]
