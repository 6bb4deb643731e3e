"""Codes for what one sampled packet was recognised as, and what its bytes look like."""

from __future__ import annotations

from enum import IntEnum
from typing import Final


class Label(IntEnum):
    """Protocol framing recognised at the start of one sampled payload (0: none)."""

    NONE = 0
    # TLS record layer (TCP)
    TLS_CH = 1  # ClientHello
    TLS_SH = 2  # ServerHello, legacy_version 0x0303, version not visible
    TLS_SH13 = 3  # ServerHello with supported_versions = 0x0304 inside the head
    TLS_SH_SSL3 = 4  # ServerHello choosing SSL 3.0
    TLS_SH10 = 5  # … TLS 1.0
    TLS_SH11 = 6  # … TLS 1.1
    TLS_HS12 = 7  # plaintext Certificate/ServerKeyExchange/…/ClientKeyExchange: TLS <= 1.2 only
    TLS_HS = 8  # other handshake record (e.g. an encrypted Finished)
    TLS_CCS12 = 9  # ChangeCipherSpec followed by a handshake record (TLS <= 1.2 encrypted Finished)
    TLS_CCS = 10  # ChangeCipherSpec alone
    TLS_ALERT = 11
    TLS_APP = 12  # application_data record (content type 23)
    TLS_APP13 = 13  # ChangeCipherSpec then application_data: TLS 1.3 middlebox-compatibility flight
    TLS_HB = 14  # heartbeat
    # DTLS (UDP)
    DTLS_HS = 15
    DTLS_APP = 16
    DTLS_OTHER = 17
    # SSH (TCP)
    SSH_BANNER = 18
    SSH_KEX = 19  # cleartext binary packet of the key exchange
    SSH_NEWKEYS = 20
    # QUIC (UDP)
    QUIC_INITIAL = 21
    QUIC_0RTT = 22
    QUIC_HANDSHAKE = 23
    QUIC_RETRY = 24
    QUIC_VN = 25  # version negotiation
    GQUIC_HS = 26  # Google QUIC packet with version or crypto-handshake tags
    # WireGuard (UDP)
    WG_INIT = 27
    WG_RESP = 28
    WG_COOKIE = 29
    WG_DATA = 30
    # IPsec
    IKE1 = 31
    IKE2 = 32
    ESP = 33
    ESP_NULL = 34  # inner IP header readable right after SPI and sequence number
    NAT_KEEPALIVE = 35
    # MACsec (L2)
    MACSEC_E = 36
    MACSEC_I = 37
    MACSEC_BAD = 38
    # RDMA
    ROCE_DATA = 39
    ROCE_CTRL = 40
    # collective transports
    GLOO_CTRL = 41
    GLOO_DATA = 42
    RFT = 43  # ringfence transport protected record (DATA, ABORT, FINISHED)
    # plaintext application protocols
    HTTP_REQ = 44
    HTTP_RESP = 45
    HTTP2_PREFACE = 46
    DNS = 47
    NTP = 48
    NTP_MAC = 49
    SYSLOG = 50
    RFT_HS = 51  # ringfence transport handshake record (HELLO, AUTH, ALERT: plaintext body)
    SSH_NEWKEYS_DATA = 52  # NEWKEYS and, in the same segment, bytes under the new keys


#: Number of label codes (array dimension for per-flow counts).
N_LABELS = max(Label) + 1


class Kind(IntEnum):
    """What the bytes of an unframed payload (or a protocol body) look like."""

    SHORT = 0  # too few bytes to say anything
    ZERO = 1  # all zero
    TEXT = 2  # printable ASCII
    F32 = 3  # float32 words with plausible exponents
    BF16 = 4
    F16 = 5
    LOW = 6  # byte entropy well below random: not ciphertext
    MID = 7
    HIGH = 8  # byte entropy of random data: ciphertext, compressed or random


N_KINDS = max(Kind) + 1

#: Kinds that show readable data in a body that should have been ciphertext.
READABLE_KINDS = (Kind.ZERO, Kind.TEXT, Kind.F32, Kind.BF16, Kind.F16)
TENSOR_KINDS = (Kind.F32, Kind.BF16, Kind.F16)

TLS_LABELS: Final = tuple(Label(i) for i in range(Label.TLS_CH, Label.TLS_HB + 1))
TLS_STRONG: Final = (
    Label.TLS_CH,
    Label.TLS_SH,
    Label.TLS_SH13,
    Label.TLS_SH_SSL3,
    Label.TLS_SH10,
    Label.TLS_SH11,
    Label.TLS_HS12,
    Label.TLS_CCS12,
    Label.TLS_CCS,
    Label.TLS_APP13,
)
QUIC_LABELS: Final = (Label.QUIC_INITIAL, Label.QUIC_0RTT, Label.QUIC_HANDSHAKE, Label.QUIC_RETRY, Label.QUIC_VN)
HTTP_LABELS: Final = (Label.HTTP_REQ, Label.HTTP_RESP, Label.HTTP2_PREFACE)


__all__ = [
    "HTTP_LABELS",
    "N_KINDS",
    "N_LABELS",
    "QUIC_LABELS",
    "READABLE_KINDS",
    "TENSOR_KINDS",
    "TLS_LABELS",
    "TLS_STRONG",
    "Kind",
    "Label",
]
