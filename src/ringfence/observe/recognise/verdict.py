"""From per-flow counts of labels and content kinds to (protection, protocol, reason).

Which protocol a flow speaks is decided for all flows at once (numpy masks in priority order);
the reason is worded in plain Python (:mod:`.reasons`) once per distinct flow signature.
Principles: framing proves a protocol, never entropy alone; handshakes never make a flow
plaintext; readable application data anywhere in a flow makes it plaintext (the weakest packet wins).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from ringfence.observe.recognise import reasons as rs
from ringfence.observe.recognise.labels import HTTP_LABELS, QUIC_LABELS, TLS_LABELS, TLS_STRONG, Label
from ringfence.observe.recognise.reasons import PORT_HINTS, Family
from ringfence.observe.recognise.reasons_apps import APP_HANDLERS
from ringfence.observe.recognise.reasons_bigdata import BIGDATA_HANDLERS
from ringfence.observe.recognise.reasons_datastores import DATASTORE_HANDLERS
from ringfence.observe.recognise.reasons_messaging import MESSAGING_HANDLERS
from ringfence.observe.recognise.reasons_network import NETWORK_HANDLERS
from ringfence.observe.recognise.reasons_services import SERVICE_HANDLERS
from ringfence.observe.recognise.reasons_tunnels import TUNNEL_HANDLERS

I64 = npt.NDArray[np.int64]
SSH_BINARY = (Label.SSH_KEX, Label.SSH_NEWKEYS, Label.SSH_NEWKEYS_DATA)
#: Every family's handler, in one explicit registry.
HANDLERS: Final = {**rs.HANDLERS, **SERVICE_HANDLERS, **NETWORK_HANDLERS, **MESSAGING_HANDLERS, **TUNNEL_HANDLERS,
                   **APP_HANDLERS, **DATASTORE_HANDLERS, **BIGDATA_HANDLERS}  # fmt: skip
_RPC = (*(Label(i) for i in range(Label.RPC_CALL_CLEAR, Label.RPC_REPLY_GSS + 1)), Label.RPC_DENIED, Label.RPC_NULL,
        Label.RPC_TLS_PROBE, Label.RPC_STARTTLS)  # fmt: skip
_SMB = tuple(Label(i) for i in range(Label.SMB1, Label.SMB3_COMPRESSED + 1))
_CEPH = (Label.CEPH_BANNER, Label.CEPH_FRAME, Label.CEPH_SECURE, Label.CEPH_CRC)
_SNMP = tuple(Label(i) for i in range(Label.SNMP_COMMUNITY, Label.SNMP3_DISCOVERY + 1))
_IPMI = tuple(Label(i) for i in range(Label.IPMI15_CLEAR, Label.ASF + 1))
_LDAP = (Label.LDAP_SIMPLE_BIND, Label.LDAP_SASL_BIND, Label.LDAP_STARTTLS, Label.LDAP_OP)
_MYSQL = (Label.MYSQL_GREETING, Label.MYSQL_SSLREQ, Label.MYSQL_LOGIN)
_RDP = (Label.RDP_NEG_TLS, Label.RDP_NEG_STD)
_PPP = (Label.PPP_CONTROL, Label.PPP_PAP, Label.PPP_MPPE)
_HADOOP = (Label.HRPC_SIMPLE, Label.HRPC_SASL, Label.HRPC_SASL_MSG, Label.HRPC_WRAP, Label.HRPC_CALL)
_MEMCACHED = (Label.MEMCACHED, Label.MEMCACHED_SASL, Label.MEMCACHED_TEXT, Label.MEMCACHED_UDP)


@dataclass(frozen=True)
class FlowFacts:
    """Everything the verdicts use, one row per flow."""

    ethertype: npt.NDArray[np.uint16]
    proto: npt.NDArray[np.uint8]
    sport: npt.NDArray[np.int32]
    dport: npt.NDArray[np.int32]
    payload_packets: I64
    sampled: I64  # sampled packets per flow
    later_bytes: I64  # payload bytes of the flow after (not in) its sampled packets
    labels: I64  # (N_LABELS, n): packets per label and flow
    free_forward: I64  # unlabelled packets initiator → responder
    short_form: I64  # unlabelled UDP packets with the QUIC short-header form bits (0b01xxxxxx)
    unified_form: I64  # unlabelled UDP packets with the DTLS 1.3 unified-header form bits (0b001xxxxx)
    generic: I64  # (N_KINDS, n): content kinds of analysed unlabelled packets
    body: I64  # (N_KINDS, n): content kinds of analysed protocol bodies
    generic_entropy: npt.NDArray[np.float64]  # mean over packets whose entropy was computed; NaN if none
    body_entropy: npt.NDArray[np.float64]
    details: dict[int, str]  # flow -> a short excerpt (HTTP line, ESP SPI …) where one was taken

    @property
    def n(self) -> int:
        """Number of flows."""
        return int(self.proto.shape[0])

    def count(self, *labels: Label) -> I64:
        """Per flow: packets carrying any of ``labels``."""
        return np.asarray(self.labels[list(labels)].sum(axis=0), dtype=np.int64)


def families(f: FlowFacts) -> I64:
    """The :class:`Family` of every flow."""
    rules: list[tuple[Family, npt.NDArray[np.bool_]]] = [
        (Family.NO_PAYLOAD, f.sampled == 0),
        (Family.MACSEC, f.ethertype == 0x88E5),
        (Family.ESP, (f.proto == 50) | (f.count(Label.ESP, Label.ESP_NULL) > 0)),
        (Family.AH, (f.proto == 51) & (f.count(Label.AH, Label.AH_ESP) > 0)),
        (Family.GRE, (f.proto == 47) & (f.count(Label.GRE_KEEPALIVE, Label.GRE_OPAQUE, Label.PPTP_ACK, *_PPP) > 0)),
        (Family.L2TP, (f.proto == 17) & (f.count(Label.L2TP_CONTROL, *_PPP) > 0)),
        (Family.ICMP, (f.proto == 1) | (f.proto == 58)),
        (Family.RFT, f.count(Label.RFT, Label.RFT_HS) > 0),
        # A bare record header (application_data, alert, other handshake) is 3 bytes of evidence: random data
        # matches one in ~10^6 packets, so one alone does not make a TLS flow; two, or a hello, do.
        (Family.TLS, (f.count(*TLS_STRONG) > 0) | (f.count(*TLS_LABELS) >= 2)),
        (Family.SSH, (f.count(Label.SSH_BANNER) > 0) | (f.count(*SSH_BINARY) >= 2)),
        (Family.WIREGUARD, f.count(Label.WG_INIT, Label.WG_RESP, Label.WG_COOKIE, Label.WG_DATA) > 0),
        (Family.QUIC, f.count(*QUIC_LABELS) > 0),
        (Family.OPENVPN, f.count(Label.OVPN_RESET, Label.OVPN_RESET_AUTH, Label.OVPN_RESET_CRYPT) > 0),
        (Family.GQUIC, f.count(Label.GQUIC_HS) > 0),
        (Family.DTLS, f.count(Label.DTLS_HS, Label.DTLS_APP, Label.DTLS_OTHER) >= 2),
        (Family.IKE, f.count(Label.IKE1, Label.IKE2, Label.NAT_KEEPALIVE) > 0),
        (Family.ROCE, f.count(Label.ROCE_DATA, Label.ROCE_CTRL) > 0),
        (Family.GLOO, f.count(Label.GLOO_CTRL, Label.GLOO_DATA) > 0),
        (Family.ONC_RPC, f.count(*_RPC) > 0),
        (Family.SMB, f.count(*_SMB) > 0),
        (Family.ISCSI, f.count(Label.ISCSI_LOGIN, Label.ISCSI_TEXT) > 0),
        # A bare capsule/data PDU is ~4 bytes of evidence: ICReq/ICResp, or two PDUs, make the flow.
        (Family.NVME_TCP, (f.count(Label.NVME_IC) > 0) | (f.count(Label.NVME_PDU) >= 2)),
        (Family.CEPH, f.count(*_CEPH) > 0),
        (Family.LNET, f.count(Label.LNET) > 0),
        (Family.BEEGFS, f.count(Label.BEEGFS, Label.BEEGFS_AUTH) > 0),
        (Family.DRBD, f.count(Label.DRBD, Label.DRBD_DATA, Label.DRBD_AUTH) > 0),
        (Family.SNMP, f.count(*_SNMP) > 0),
        (Family.IPMI, f.count(*_IPMI) > 0),
        (Family.KERBEROS, f.count(Label.KERBEROS) > 0),
        (Family.LDAP, f.count(*_LDAP) > 0),
        (Family.RADIUS, f.count(Label.RADIUS) > 0),
        (Family.TACACS, f.count(Label.TACACS_CLEAR, Label.TACACS_OBFUSCATED) > 0),
        (Family.PPTP, f.count(Label.PPTP) > 0),
        (Family.HSRP, f.count(Label.HSRP_DEFAULT, Label.HSRP_TEXT, Label.HSRP_MD5, Label.HSRP_NOAUTH) > 0),
        (Family.VRRP, f.count(Label.VRRP_TEXT, Label.VRRP_NOAUTH) > 0),
        (Family.BGP, f.count(Label.BGP) > 0),
        (Family.BFD, f.count(Label.BFD_NOAUTH, Label.BFD_SIMPLE, Label.BFD_KEYED) > 0),
        (Family.OSPF, f.count(Label.OSPF_NULL, Label.OSPF_SIMPLE, Label.OSPF_CRYPTO, Label.OSPF3) > 0),
        (Family.IGMP, f.count(Label.IGMP) > 0),
        (Family.PIM, f.count(Label.PIM) > 0),
        # a bare signature is 2 bytes and a length: a mechanism makes the flow ZMTP
        (Family.ZMTP, f.count(Label.ZMTP_NULL, Label.ZMTP_PLAIN, Label.ZMTP_CURVE, Label.ZMTP_GSSAPI) > 0),
        (Family.AMQP, f.count(Label.AMQP, Label.AMQP_SASL, Label.AMQP_TLS) > 0),
        (Family.TELNET, f.count(Label.TELNET) > 0),
        (Family.VNC, f.count(Label.RFB) > 0),
        (Family.MONGODB, f.count(Label.MONGODB) > 0),
        # replies and in-flow messages are weak alone: a command, a connect or an auth makes the flow
        (Family.REDIS, f.count(Label.REDIS, Label.REDIS_AUTH, Label.REDIS_CLUSTER) > 0),
        (Family.MEMCACHED, f.count(*_MEMCACHED) > 0),
        (Family.ZOOKEEPER, f.count(Label.ZOOKEEPER, Label.ZK_DIGEST, Label.ZK_AUTH, Label.ZK_WORD) > 0),
        (Family.CASSANDRA, f.count(Label.CQL, Label.CQL_AUTH) > 0),
        (Family.HADOOP_RPC, f.count(*_HADOOP) > 0),
        (Family.HDFS, f.count(Label.HDFS_OP, Label.HDFS_SASL, Label.HDFS_PACKET) > 0),
        (Family.SPARK, f.count(Label.SPARK, Label.SPARK_AUTH, Label.SPARK_SASL, Label.SPARK_REPLY) > 0),
        (Family.RX, f.count(Label.RX_NULL, Label.RX_KAD, Label.RX_CTRL) > 0),
        (Family.DHCP, f.count(Label.DHCP) > 0),
        (Family.TFTP, f.count(Label.TFTP_REQ, Label.TFTP_DATA, Label.TFTP_ACK) > 0),
        (Family.POSTGRES, f.count(Label.PG_SSLREQ, Label.PG_STARTUP) > 0),
        (Family.MYSQL, f.count(*_MYSQL) > 0),
        (Family.MQTT, f.count(Label.MQTT_CONNECT) > 0),
        (Family.RDP, f.count(*_RDP) > 0),
        (Family.KAFKA, f.count(Label.KAFKA) > 0),
        # The Slurm header alone is a version byte, a message-type range and lengths: MUNGE or two headers.
        (Family.SLURM, (f.count(Label.SLURM_MUNGE) > 0) | (f.count(Label.SLURM) >= 2)),
        (Family.HTTP, f.count(*HTTP_LABELS) > 0),
        (Family.DNS, f.count(Label.DNS) > 0),
        (Family.PTP, f.count(Label.PTP, Label.PTP_AUTH, Label.PTP_TLV, Label.PTP_MANAGEMENT) > 0),
        (Family.NTP, f.count(Label.NTP, Label.NTP_MAC, Label.NTP_NTS, Label.NTP_CONTROL, Label.NTP_PRIVATE) > 0),
        (Family.SYSLOG, f.count(Label.SYSLOG) > 0),
    ]
    fam = np.full(f.n, Family.GENERIC, dtype=np.int64)
    for family, mask in reversed(rules):
        fam[mask] = family
    return fam


def _deci(x: npt.NDArray[np.float64]) -> I64:
    """Entropy in tenths of a bit (-1 where not computed), so equal verdict texts share a signature."""
    return np.where(np.isnan(x), -1, np.round(np.nan_to_num(x) * 10)).astype(np.int64)


def _signatures(f: FlowFacts, family: I64) -> tuple[npt.NDArray[np.int32], list[str]]:
    """Every fact a reason may mention, one integer column per flow (column-major: (width, n)).

    Flows with equal columns get equal verdicts.
    """
    sig = np.zeros((rs.WIDTH, f.n), dtype=np.int32)
    generic = family == Family.GENERIC
    hinted = np.array(sorted(PORT_HINTS))
    sig[rs.FAMILY] = family
    sig[rs.PROTO] = f.proto
    # Ports matter only for the port hints of unrecognised flows.
    sig[rs.SPORT] = np.where(generic & np.isin(f.sport, hinted), f.sport, 0)
    sig[rs.DPORT] = np.where(generic & np.isin(f.dport, hinted), f.dport, 0)
    sig[rs.SAMPLED] = f.sampled
    # 0, 1 or "2 or more" later packets; their bytes as a power of ten (reasons say "over 100 kB").
    sig[rs.MORE] = np.clip(f.payload_packets - f.sampled, 0, 2)
    sig[rs.LATER_B] = np.where(f.later_bytes > 0, np.floor(np.log10(np.maximum(f.later_bytes, 1))), -1)
    sig[rs.FWD_FREE] = f.free_forward
    sig[rs.SHORT] = f.short_form
    sig[rs.UNIFIED] = f.unified_form
    sig[rs.GEN_H] = _deci(f.generic_entropy)
    sig[rs.BODY_H] = _deci(f.body_entropy)
    texts = [""] + sorted(set(f.details.values()))
    text_id = {t: i for i, t in enumerate(texts)}
    for flow, text in f.details.items():
        sig[rs.DETAIL, flow] = text_id[text]
    sig[rs.LABELS : rs.GENERIC] = f.labels
    sig[rs.GENERIC : rs.BODY] = f.generic
    sig[rs.BODY : rs.WIDTH] = f.body
    return sig, texts


def _hash(sig: npt.NDArray[np.int32], multiplier: int) -> I64:
    """A 64-bit polynomial hash of each flow's signature column (wrapping arithmetic)."""
    key = np.zeros(sig.shape[1], dtype=np.uint64)
    m = np.uint64(multiplier)
    for column in sig:
        key = key * m + column.astype(np.uint64)
    return key.view(np.int64)


def _groups(sig: npt.NDArray[np.int32]) -> tuple[I64, I64]:
    """(one representative flow per distinct signature, each flow's group).

    Grouping sorts one 64-bit hash (sorting whole signatures is far slower); a second, independent
    hash must also agree within a group, and any flow where it does not gets a group of its own.
    """
    # A signature row that is zero for every flow (a label no flow has) changes no grouping: skip it.
    sig = sig[np.flatnonzero(np.any(sig != 0, axis=1))]
    _, first, inverse = np.unique(_hash(sig, 0x9E3779B97F4A7C15), return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    check = _hash(sig, 0xC2B2AE3D27D4EB4F)
    collided = np.flatnonzero(check != check[first[inverse]])
    if collided.size:
        inverse[collided] = first.size + np.arange(collided.size)
        first = np.concatenate([first, collided])
    return first, inverse


def decide(f: FlowFacts) -> tuple[list[str], list[str | None], list[str]]:
    """(protection, protocol, reason) for every flow.

    Reasons are worded once per distinct signature (flows with the same family, counts and rounded
    entropies read the same), so the per-flow Python work does not grow with the number of flows.
    """
    if f.n == 0:
        return [], [], []
    family = families(f)
    sig, texts = _signatures(f, family)
    first, inverse = _groups(sig)
    verdicts = [HANDLERS[Family(row[rs.FAMILY])](rs.Row(row, texts)) for row in sig[:, first].T.tolist()]
    table = np.empty((len(verdicts), 3), dtype=object)
    table[:] = verdicts
    out = table[inverse]
    return out[:, 0].tolist(), out[:, 1].tolist(), out[:, 2].tolist()


__all__ = ["Family", "FlowFacts", "decide", "families"]
