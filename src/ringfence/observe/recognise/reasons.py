"""The words of every verdict: one function per protocol family, reading one flow signature.

A signature (see :mod:`.verdict`) is a flat list of integers: the family, a few header facts, the
per-label packet counts and the per-kind content counts. :class:`Row` gives them names.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import IntEnum
from typing import Final

from ringfence.observe.recognise.labels import (
    CLEAR_APP_LABELS,
    CLEAR_APP_PROTOCOL,
    CLEAR_APP_WORDS,
    HTTP_LABELS,
    N_KINDS,
    N_LABELS,
    READABLE_KINDS,
    TENSOR_KINDS,
    UPGRADES,
    Kind,
    Label,
)
from ringfence.observe.schema import Protection

Verdict = tuple[str, str | None, str]

ENC: Final = Protection.ENCRYPTED.value
PLAIN: Final = Protection.PLAINTEXT.value
INTEG: Final = Protection.INTEGRITY_ONLY.value
HANDSHAKE: Final = Protection.HANDSHAKE_ONLY.value
UNKNOWN: Final = Protection.UNKNOWN.value

PORT_HINTS: Final = {
    22: "SSH",
    53: "DNS",
    80: "HTTP",
    88: "Kerberos",
    123: "NTP",
    161: "SNMP",
    319: "PTP",
    320: "PTP",
    389: "LDAP",
    443: "TLS or QUIC",
    445: "SMB",
    500: "IKE",
    514: "syslog",
    623: "IPMI/RMCP",
    636: "LDAPS",
    853: "DNS over TLS/QUIC",
    988: "Lustre",
    1194: "OpenVPN",
    1883: "MQTT",
    2049: "NFS",
    2181: "ZooKeeper",
    2379: "etcd",
    3260: "iSCSI",
    3300: "Ceph",
    3306: "MySQL",
    3389: "RDP",
    3784: "BFD",
    4420: "NVMe/TCP",
    4500: "IPsec NAT-T",
    4791: "RoCEv2",
    5432: "PostgreSQL",
    6379: "Redis",
    6443: "Kubernetes API (TLS)",
    7077: "Spark",
    7337: "Spark shuffle",
    8020: "HDFS NameNode",
    6817: "Slurm",
    6818: "Slurm",
    8443: "TLS",
    9042: "Cassandra",
    9092: "Kafka",
    9866: "HDFS DataNode",
    11211: "memcached",
    29500: "torch.distributed rendezvous",
    51820: "WireGuard",
}
_TENSOR_NAMES: Final = {Kind.F32: "tensor-f32", Kind.BF16: "tensor-bf16", Kind.F16: "tensor-f16"}
_TENSOR_WORDS: Final = {
    Kind.F32: "float32 words with exponents of real weights/activations (2^-30..2^10)",
    Kind.BF16: "bf16 words with exponents of real weights/activations (2^-30..2^10)",
    Kind.F16: "fp16 words with exponents of values near 1 (2^-6..4)",
}


class Family(IntEnum):
    """The protocol a flow is judged as (priority order: lower value wins)."""

    NO_PAYLOAD = 0
    MACSEC = 1
    ESP = 2
    ICMP = 3
    RFT = 4
    TLS = 5
    SSH = 6
    WIREGUARD = 7
    QUIC = 8
    GQUIC = 9
    DTLS = 10
    IKE = 11
    ROCE = 12
    GLOO = 13
    HTTP = 14
    DNS = 15
    NTP = 16
    SYSLOG = 17
    # storage, management and service protocols (worded in :mod:`.reasons_services`)
    ONC_RPC = 18
    SMB = 19
    ISCSI = 20
    NVME_TCP = 21
    CEPH = 22
    LNET = 23
    SNMP = 24
    IPMI = 25
    KERBEROS = 26
    LDAP = 27
    DHCP = 28
    TFTP = 29
    POSTGRES = 30
    MYSQL = 31
    MQTT = 32
    RDP = 33
    KAFKA = 34
    SLURM = 35
    RADIUS = 36
    RX = 37
    GENERIC = 38
    PPTP = 39
    HSRP = 40
    VRRP = 41
    BGP = 42
    TACACS = 43
    OSPF = 44
    ZMTP = 45
    AMQP = 46
    GRE = 47
    L2TP = 48
    DRBD = 49
    BEEGFS = 50
    IGMP = 51
    PIM = 52
    TELNET = 53
    VNC = 54
    MONGODB = 55
    AH = 56
    REDIS = 57
    MEMCACHED = 58
    ZOOKEEPER = 59
    CASSANDRA = 60
    PTP = 61
    BFD = 62
    OPENVPN = 63
    HADOOP_RPC = 64
    HDFS = 65
    SPARK = 66


# Layout of a flow signature (one integer column per flow in :func:`.verdict.decide`).
FAMILY, PROTO, SPORT, DPORT, SAMPLED, MORE, FWD_FREE, SHORT, UNIFIED, GEN_H, BODY_H, DETAIL, LATER_B = range(13)
LABELS = 13
GENERIC = LABELS + N_LABELS
BODY = GENERIC + N_KINDS
WIDTH = BODY + N_KINDS


def plural(count: int, noun: str) -> str:
    """``1 packet``, ``2 packets``."""
    return _n(count, noun)


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _entropy(value: float) -> str:
    return "" if value != value else f"{value:.1f} bits/byte"  # NaN: not computed


class Row:
    """One signature as plain Python values (cheap to read while wording a reason)."""

    __slots__ = (
        "body",
        "body_entropy",
        "detail",
        "dport",
        "fwd_free",
        "generic",
        "generic_entropy",
        "labels",
        "later",
        "later_bytes",
        "more",
        "proto",
        "sampled",
        "short",
        "sport",
        "unified",
    )

    def __init__(self, row: list[int], texts: list[str]) -> None:
        self.labels = row[LABELS:GENERIC]
        self.generic = row[GENERIC:BODY]
        self.body = row[BODY:WIDTH]
        self.sampled = row[SAMPLED]
        self.more = bool(row[MORE])
        self.later = row[MORE]  # later (unsampled) payload packets: 0, 1, or 2 meaning "2 or more"
        self.later_bytes = row[LATER_B]  # their bytes as a power of ten; -1: none
        self.fwd_free = row[FWD_FREE]
        self.short = row[SHORT]
        self.unified = row[UNIFIED]
        self.generic_entropy = row[GEN_H] / 10 if row[GEN_H] >= 0 else float("nan")
        self.body_entropy = row[BODY_H] / 10 if row[BODY_H] >= 0 else float("nan")
        self.proto = row[PROTO]
        self.sport = row[SPORT]
        self.dport = row[DPORT]
        self.detail = texts[row[DETAIL]]

    def c(self, *labels: Label) -> int:
        return sum(self.labels[label] for label in labels)

    @property
    def free(self) -> int:
        return self.labels[Label.NONE]

    def tensors(self) -> tuple[int, Kind | None]:
        """Unlabelled packets that are float tensors, and the most common float layout."""
        counts = {kind: self.generic[kind] for kind in TENSOR_KINDS}
        total = sum(counts.values())
        return total, (max(counts, key=lambda k: counts[k]) if total else None)

    def readable_body(self, kinds: tuple[Kind, ...] = READABLE_KINDS) -> int:
        return sum(self.body[kind] for kind in kinds)

    def sample_note(self) -> str:
        return f" in the first {self.sampled} payload packets (later ones not sampled)" if self.more else ""

    def later_note(self) -> str:
        """The unsampled rest of the flow in words, e.g. "the 2+ later payload packets (over 100 kB)"."""
        count = "the later payload packet" if self.later == 1 else "the 2+ later payload packets"
        if self.later_bytes < 0:
            return count
        size = 10**self.later_bytes
        unit = next((f"{size // u} {name}" for u, name in ((10**9, "GB"), (10**6, "MB"), (10**3, "kB")) if size >= u),
                    f"{size} bytes")  # fmt: skip
        return f"{count} (over {unit})" if self.later_bytes > 0 else f"{count} (under 10 bytes)"

    def port_hint(self) -> str:
        ports = [p for p in (self.sport, self.dport) if p in PORT_HINTS]
        hints = sorted({PORT_HINTS[p] for p in ports})
        shown = "/".join(str(p) for p in ports)
        return f"; port {shown} suggests {' or '.join(hints)}, which a port alone cannot prove" if hints else ""


def _downgrade(r: Row, name: str) -> Verdict | None:
    """Plaintext if a flow of an encrypting protocol also carries readable application data."""
    http = r.c(*HTTP_LABELS)
    tensors, kind = r.tensors()
    clear = {label: r.c(label) for label in CLEAR_APP_LABELS if r.c(label)}
    if not http and not tensors and not clear:
        return None
    parts = []
    if http:
        parts.append(f"{_n(http, 'HTTP request/status line')}")
    if tensors and kind is not None:
        parts.append(f"{_n(tensors, 'packet')} of plaintext {_TENSOR_NAMES[kind][7:]} tensor data")
    parts += [f"{_n(count, CLEAR_APP_WORDS[label])}" for label, count in clear.items()]
    protocol = _TENSOR_NAMES[kind] if kind is not None and not http else "http"
    if clear and not http and not tensors:
        protocol = CLEAR_APP_PROTOCOL[next(iter(clear))]
    return PLAIN, protocol, f"{name} framing seen, but the flow also carries {' and '.join(parts)} in clear"


def _tls(r: Row) -> Verdict:
    sh = r.c(Label.TLS_SH, Label.TLS_SH13, Label.TLS_SH_SSL3, Label.TLS_SH10, Label.TLS_SH11)
    app = r.c(Label.TLS_APP, Label.TLS_APP13)
    tls12 = r.c(Label.TLS_HS12, Label.TLS_CCS12)
    if r.c(Label.TLS_SH13):
        protocol, name, how = "tls1.3", "TLS 1.3", " (ServerHello supported_versions 0x0304)"
    elif r.c(Label.TLS_SH_SSL3, Label.TLS_SH10, Label.TLS_SH11):
        old = [
            (Label.TLS_SH_SSL3, "ssl3.0", "SSL 3.0"),
            (Label.TLS_SH10, "tls1.0", "TLS 1.0"),
            (Label.TLS_SH11, "tls1.1", "TLS 1.1"),
        ]
        protocol, name = next((p, n) for label, p, n in old if r.c(label))
        how = " (ServerHello version; obsolete, deprecated by RFC 8996)"
    elif tls12:
        protocol, name = "tls1.2", "TLS 1.2" if sh else "TLS <= 1.2"
        how = " (handshake messages in clear after ServerHello, which TLS 1.3 encrypts)"
    elif r.c(Label.TLS_APP13) or (sh and app):
        protocol, name = "tls1.3", "TLS 1.3"
        how = " (inferred: ServerHello 0x0303 followed by encrypted records and no cleartext handshake)"
    else:
        protocol, name, how = "tls", "TLS", " (version not visible in the sampled heads)"
    if (down := _downgrade(r, name)) is not None:
        return down
    upgrade = [what for label, what in UPGRADES.items() if r.c(label)]
    if upgrade:
        how += f", after a cleartext upgrade ({', '.join(upgrade)})"
    hs = [
        ("ClientHello", r.c(Label.TLS_CH)),
        ("ServerHello", sh),
        ("other handshake", r.c(Label.TLS_HS, Label.TLS_HS12)),
        ("ChangeCipherSpec", r.c(Label.TLS_CCS, Label.TLS_CCS12)),
        ("alert", r.c(Label.TLS_ALERT)),
    ]
    seen = ", ".join(f"{what} x{n}" for what, n in hs if n)
    if app and r.readable_body():
        return (
            INTEG,
            protocol,
            (
                f"{name}{how}: {_n(r.readable_body(), 'application_data record')} carry readable data — a NULL cipher "
                "suite authenticates but does not encrypt; NOT confidential"
            ),
        )
    if app:
        lead = "handshake then " if seen else "handshake not sampled; "
        ent = _entropy(r.body_entropy)
        tail = f" (record body {ent})" if ent else ""
        records = _n(app, "application_data record")
        return ENC, protocol, f"{name}{how}: {lead}{records} (content type 23); ciphertext{tail}"
    return HANDSHAKE, protocol, f"{name}{how}: only handshake records ({seen}), no application_data{r.sample_note()}"


def _ssh(r: Row) -> Verdict:
    banner, kex = r.c(Label.SSH_BANNER), r.c(Label.SSH_KEX)
    newkeys, data_after = r.c(Label.SSH_NEWKEYS), r.c(Label.SSH_NEWKEYS_DATA)
    if (down := _downgrade(r, "SSH")) is not None:
        return down
    parts = [f"banner x{banner}" if banner else "", f"cleartext key-exchange packets x{kex}" if kex else ""]
    seen_newkeys = f"NEWKEYS x{newkeys + data_after}" if newkeys or data_after else ""
    shown = ", ".join(p for p in [*parts, seen_newkeys] if p)
    if data_after:
        return (
            ENC,
            "ssh",
            f"SSH ({shown}): {_n(data_after, 'segment')} carry bytes after NEWKEYS that are not cleartext SSH "
            "packets; encrypted after NEWKEYS (RFC 4253 §7.3)",
        )
    # Before NEWKEYS every client packet is a banner or a cleartext binary packet, so an unrecognised
    # client packet comes after it — unless it is readable text (the tail of a long KEXINIT name-list);
    # server-side continuation segments of a long key-exchange reply prove nothing.
    if r.free and (newkeys or (r.fwd_free and not r.generic[Kind.TEXT])):
        return (
            ENC,
            "ssh",
            f"SSH ({shown}), then {_n(r.free, 'binary packet')} that are not cleartext SSH packets; "
            "encrypted after NEWKEYS",
        )
    # The reader samples a flow's first payload packets, so everything it did not sample came later —
    # after NEWKEYS. Of those, only the other side's NEWKEYS (one packet) can still be in clear.
    if newkeys and (r.later >= 2 or (newkeys >= 2 and r.later)):
        return (
            ENC,
            "ssh",
            f"SSH ({shown}) in the first {r.sampled} payload packets; {r.later_note()} follow NEWKEYS, "
            "so RFC 4253 §7.3 encrypts them (not sampled)",
        )
    return HANDSHAKE, "ssh", f"SSH handshake only ({shown}); no packet after NEWKEYS{r.sample_note()}"


def _wireguard(r: Row) -> Verdict:
    hs = r.c(Label.WG_INIT, Label.WG_RESP, Label.WG_COOKIE)
    data = r.c(Label.WG_DATA)
    if (down := _downgrade(r, "WireGuard")) is not None:
        return down
    if data:
        lead = f"handshake ({_n(hs, 'message')}: initiation 148 B / response 92 B / cookie 64 B) then " if hs else ""
        return (
            ENC,
            "wireguard",
            (
                f"WireGuard: {lead}{_n(data, 'transport data message')} "
                "(type 4: receiver index, session counter, AEAD tag); ciphertext (ChaCha20-Poly1305)"
            ),
        )
    return HANDSHAKE, "wireguard", f"WireGuard: only handshake messages ({hs}); no transport data{r.sample_note()}"


def _quic(r: Row) -> Verdict:
    initial, zero_rtt = r.c(Label.QUIC_INITIAL), r.c(Label.QUIC_0RTT)
    handshake, other = r.c(Label.QUIC_HANDSHAKE), r.c(Label.QUIC_RETRY, Label.QUIC_VN)
    if (down := _downgrade(r, "QUIC")) is not None:
        return down
    seen = f"Initial x{initial}, Handshake x{handshake}" + (f", Retry/Version Negotiation x{other}" if other else "")
    if r.short or zero_rtt:
        protected = r.short + zero_rtt
        return (
            ENC,
            "quic",
            (
                f"QUIC: long headers ({seen}) then {_n(protected, 'protected packet')} (1-RTT short header or 0-RTT); "
                "ciphertext (AEAD with header protection)"
            ),
        )
    return (
        HANDSHAKE,
        "quic",
        (
            f"QUIC: only long-header packets ({seen}); Initial keys derive from the connection id, so this is "
            f"handshake, not confidential data{r.sample_note()}"
        ),
    )


def _gquic(r: Row) -> Verdict:
    hs = r.c(Label.GQUIC_HS)
    if (down := _downgrade(r, "gQUIC")) is not None:
        return down
    if r.free:
        return (
            ENC,
            "gquic",
            (
                f"Google QUIC: {_n(hs, 'handshake packet')} (version or CHLO/REJ tags) then "
                f"{_n(r.free, 'packet')} without them; encrypted"
            ),
        )
    return HANDSHAKE, "gquic", f"Google QUIC: only handshake packets ({hs}: version / CHLO / REJ){r.sample_note()}"


def _dtls(r: Row) -> Verdict:
    hs, app = r.c(Label.DTLS_HS), r.c(Label.DTLS_APP)
    if (down := _downgrade(r, "DTLS")) is not None:
        return down
    if app or r.unified:
        return (
            ENC,
            "dtls",
            (
                f"DTLS: handshake x{hs} then {_n(app + r.unified, 'application record')} "
                "(content type 23 or DTLS 1.3 unified header); ciphertext"
            ),
        )
    return HANDSHAKE, "dtls", f"DTLS: only handshake records ({hs}){r.sample_note()}"


def _rft(r: Row) -> Verdict:
    records, handshake = r.c(Label.RFT), r.c(Label.RFT_HS)
    readable = r.readable_body((Kind.TEXT, Kind.F32, Kind.BF16, Kind.F16))
    name = "ringfence-transport"
    if readable:
        return PLAIN, name, f"ringfence transport: {_n(readable, 'protected RFT1 record')} carry readable data"
    if (down := _downgrade(r, "ringfence transport")) is not None:
        return down
    if records:
        lead = f"{_n(handshake, 'handshake record')} then " if handshake else ""
        why = f"{lead}{_n(records, 'protected record')} (RFT1 DATA/ABORT/FINISHED)"
        return ENC, name, f"ringfence transport: {why}; AES-GCM ciphertext after the 24-byte header"
    return HANDSHAKE, name, f"ringfence transport: only {_n(handshake, 'handshake record')}{r.sample_note()}"


def _esp(r: Row) -> Verdict:
    esp, null = r.c(Label.ESP), r.c(Label.ESP_NULL)
    where = "IPsec ESP" if r.proto == 50 else "ESP in UDP 4500 (RFC 3948: identified by the port and a non-zero SPI)"
    ike = r.c(Label.IKE1, Label.IKE2)
    also = f", with {_n(ike, 'IKE message')} on the same port" if ike else ""
    spi = f", {r.detail}" if r.detail else ""
    if not esp and not null:
        return UNKNOWN, "esp", f"{where}: no packet with a valid SPI (0 or reserved 1-255)"
    if null or r.readable_body():
        return (
            INTEG,
            "esp",
            (
                f"{where}{spi}: {_n(null + r.readable_body(), 'packet')} show the inner packet readable right after "
                "the sequence number — NULL encryption (integrity only); NOT confidential"
            ),
        )
    ent = _entropy(r.body_entropy)
    body = f" (entropy {ent})" if ent else ""
    return (
        ENC,
        "esp",
        (
            f"{where}{spi}{also}: {_n(esp, 'packet')}, payload after SPI and sequence number opaque{body}; "
            "ESP-NULL would show the inner header there"
        ),
    )


def _macsec(r: Row) -> Verdict:
    enc, integ, bad = r.c(Label.MACSEC_E), r.c(Label.MACSEC_I), r.c(Label.MACSEC_BAD)
    if integ:
        mixed = f" ({enc} other frames had E=1)" if enc else ""
        return (
            INTEG,
            "macsec",
            (
                f"MACsec: {_n(integ, 'frame')} with SecTAG E=0{mixed}: the ICV authenticates but the user data is "
                "readable — integrity only, NOT confidential"
            ),
        )
    if enc:
        return ENC, "macsec", f"MACsec: {_n(enc, 'frame')} with SecTAG E=1 (and C=1): user data encrypted (GCM-AES)"
    return UNKNOWN, "macsec", f"ethertype 0x88E5 but {_n(bad, 'frame')} without a valid SecTAG"


def _ike(r: Row) -> Verdict:
    v1, v2, keepalive = r.c(Label.IKE1), r.c(Label.IKE2), r.c(Label.NAT_KEEPALIVE)
    if not v1 and not v2:
        return UNKNOWN, "ike", f"only {_n(keepalive, 'NAT-T keepalive')} (0xFF); no IKE or ESP packet"
    versions = " and ".join(f"IKEv{v} x{n}" for v, n in ((1, v1), (2, v2)) if n)
    return (
        HANDSHAKE,
        "ike",
        (
            f"IKE key exchange ({versions}): control messages only; the ESP it negotiates travels in other "
            "flows (or on UDP 4500) and is judged there"
        ),
    )


def _structured(r: Row) -> tuple[int, str]:
    """Packets (bodies or unframed) whose bytes are readable or clearly structured, and what they are."""
    kinds = (*READABLE_KINDS, Kind.LOW)
    counts = {kind: r.body[kind] + r.generic[kind] for kind in kinds}
    total = sum(counts.values())
    names = {Kind.ZERO: "zeros", Kind.TEXT: "text", Kind.LOW: "low-entropy data", **_TENSOR_NAMES}
    what = ", ".join(f"{names[k]} x{n}" for k, n in counts.items() if n)
    return total, what


def _roce(r: Row) -> Verdict:
    data, ctrl = r.c(Label.ROCE_DATA), r.c(Label.ROCE_CTRL)
    lead = "RoCEv2 (UDP 4791 and a well-formed base transport header)"
    if not data:
        return UNKNOWN, "rocev2", f"{lead}: only {_n(ctrl, 'ACK/read-request/CNP packet')}, no RDMA payload sampled"
    total, what = _structured(r)
    if total:
        return PLAIN, "rocev2", f"{lead}: RDMA payload readable ({what}); RoCE has no encryption of its own"
    return (
        UNKNOWN,
        "rocev2",
        (
            f"{lead}: RDMA payload high entropy in {_n(data, 'packet')}; RoCE never encrypts, so this is "
            "application-level encryption or compression — unproven"
        ),
    )


def _gloo(r: Row) -> Verdict:
    ctrl, data = r.c(Label.GLOO_CTRL), r.c(Label.GLOO_DATA)
    lead = f"gloo TCP transport (48-byte preambles in clear: {ctrl} notify, {data} send)"
    total, what = _structured(r)
    if total:
        return PLAIN, "gloo", f"{lead}; tensor data readable ({what})"
    if data or r.free:
        return UNKNOWN, "gloo", f"{lead}; tensor data high entropy — compressed or application-encrypted, unproven"
    return UNKNOWN, "gloo", f"{lead}; only control messages, no tensor data sampled"


def _generic(r: Row) -> Verdict:
    g = r.generic
    analysed = sum(g)
    tensors, kind = r.tensors()
    if tensors and kind is not None:
        return (
            PLAIN,
            _TENSOR_NAMES[kind],
            (f"{tensors} of {analysed} analysed payload heads are plaintext tensors ({_TENSOR_WORDS[kind]})"),
        )
    if g[Kind.TEXT]:
        return PLAIN, "text", f"{g[Kind.TEXT]} of {analysed} analysed payload heads are printable text, no framing"
    if g[Kind.ZERO]:
        return PLAIN, None, f"{g[Kind.ZERO]} of {analysed} analysed payload heads are all zero bytes: not ciphertext"
    ent = _entropy(r.generic_entropy)
    hint = r.port_hint()
    if g[Kind.HIGH] and not g[Kind.LOW]:
        return (
            UNKNOWN,
            None,
            (
                f"high entropy ({ent}) but no recognised encryption protocol framing; ciphertext, compressed and "
                f"random data all look like this{hint}"
            ),
        )
    if g[Kind.LOW] or g[Kind.MID]:
        shown = f" ({ent}, below ciphertext)" if ent else ""
        return UNKNOWN, None, f"binary payload{shown} with no recognised protocol framing{hint}"
    return UNKNOWN, None, f"only short payloads (< 16 bytes) with no recognised framing{hint}"


#: Handlers of the families worded here; :mod:`.verdict` joins them with :mod:`.reasons_services`' ones.
HANDLERS: Final[dict[Family, Callable[[Row], Verdict]]] = {
    Family.MACSEC: _macsec,
    Family.ESP: _esp,
    Family.RFT: _rft,
    Family.TLS: _tls,
    Family.SSH: _ssh,
    Family.WIREGUARD: _wireguard,
    Family.QUIC: _quic,
    Family.GQUIC: _gquic,
    Family.DTLS: _dtls,
    Family.IKE: _ike,
    Family.ROCE: _roce,
    Family.GLOO: _gloo,
    Family.GENERIC: _generic,
}


__all__ = [
    "BODY",
    "ENC",
    "HANDSHAKE",
    "INTEG",
    "PLAIN",
    "UNKNOWN",
    "BODY_H",
    "DETAIL",
    "DPORT",
    "FAMILY",
    "FWD_FREE",
    "GENERIC",
    "GEN_H",
    "HANDLERS",
    "LABELS",
    "LATER_B",
    "MORE",
    "PORT_HINTS",
    "PROTO",
    "SAMPLED",
    "SHORT",
    "SPORT",
    "UNIFIED",
    "WIDTH",
    "Family",
    "Row",
    "Verdict",
    "plural",
]
