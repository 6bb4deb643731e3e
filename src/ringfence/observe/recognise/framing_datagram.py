"""Recognisers for datagram and link-layer framing: MACsec, IPsec (ESP, IKE), WireGuard, QUIC and
gQUIC, DTLS, RoCEv2 and NTP (time, control and private modes).

Datagrams start at a message boundary, so every sampled packet can be judged on its own. Where a
protocol is defined by its port (ESP-in-UDP and IKE with the non-ESP marker on 4500, RoCEv2 on
4791), the port is part of the rule and the verdict's reason says so.
"""

from __future__ import annotations

from typing import Final

import numpy as np

from ringfence.observe.recognise._bytes import (
    I64,
    U8,
    Bool,
    Labeller,
    Packets,
    at,
    be16,
    be16_at,
    be32,
    is_digit,
    narrow,
    on_ports,
    select,
    take,
)
from ringfence.observe.recognise.labels import Label

_UDP: Final = 17
_ESP: Final = 50
_AH: Final = 51
ETHERTYPE_MACSEC: Final = 0x88E5
#: Where an ESP payload is checked for readable data: SPI, sequence number and up to 8 bytes of IV.
ESP_BODY: Final = 16
NAT_T_PORT: Final = 4500
ROCE_PORT: Final = 4791
NTP_PORT: Final = 123
#: Most data bytes in one NTP control message (RFC 9327 §2) and in one mode-7 response (ntpd's RESP_DATA_SIZE).
NTP_CONTROL_DATA: Final = 468
NTP_PRIVATE_DATA: Final = 500
_QUIC_V2: Final = 0x6B3343CF
# WireGuard message sizes (whitepaper §5.4.2-5.4.7): initiation, response, cookie reply; transport header + tag.
WG_INITIATION: Final = 148
WG_RESPONSE: Final = 92
WG_COOKIE_REPLY: Final = 64
WG_TRANSPORT_MIN: Final = 32
_IKE2_EXCHANGES: Final = np.array([34, 35, 36, 37, 38, 43, 44])
_IKE1_EXCHANGES: Final = np.array([1, 2, 3, 4, 5, 6, 32, 33])


def _roce_tables() -> tuple[Bool, Bool, I64]:
    """Per BTH opcode: valid?, carries RDMA payload?, bytes of extended headers after the 12-byte BTH."""
    # (low 5 bits of the opcode) -> (payload, extension bytes), from the InfiniBand spec vol. 1 ch. 9
    rc = {
        0: (True, 0), 1: (True, 0), 2: (True, 0), 3: (True, 4), 4: (True, 0), 5: (True, 4),
        6: (True, 16), 7: (True, 0), 8: (True, 0), 9: (True, 4), 10: (True, 16), 11: (True, 20),
        12: (False, 16), 13: (True, 4), 14: (True, 0), 15: (True, 4), 16: (True, 4), 17: (False, 4),
        18: (False, 12), 19: (False, 28), 20: (False, 28), 22: (True, 4), 23: (True, 4),
    }  # fmt: skip
    valid = np.zeros(256, dtype=np.bool_)
    payload = np.zeros(256, dtype=np.bool_)
    ext = np.zeros(256, dtype=np.int64)

    def put(code: int, has_payload: bool, extension: int) -> None:
        valid[code], payload[code], ext[code] = True, has_payload, extension

    for low, (has_payload, extension) in rc.items():
        put(0x00 + low, has_payload, extension)  # reliable connection
        put(0xA0 + low, has_payload, extension + 4)  # XRC: plus XRCETH
        if low <= 11:
            put(0x20 + low, has_payload, extension)  # unreliable connection
    put(0x64, True, 8)  # UD SEND only: DETH
    put(0x65, True, 12)  # UD SEND only with immediate
    put(0x81, False, 16)  # congestion notification packet
    return valid, payload, ext


_ROCE_VALID, _ROCE_PAYLOAD, _ROCE_EXT = _roce_tables()


def macsec(p: Packets, out: Labeller) -> None:
    """802.1AE SecTAG: TCI/AN (V bit 0), short length (top 2 bits 0), packet number (non-zero).

    E (0x08) set means the user data is encrypted; clear means integrity only, readable.
    """
    idx, s, _, v = select(p, out, p.ethertype == ETHERTYPE_MACSEC)
    if idx.size == 0:
        return
    tci = s[:, 0]
    ok = (v >= 8) & ((tci & 0x80) == 0) & ((s[:, 1] & 0xC0) == 0) & (be32(s, 2) != 0)
    codes = np.select([ok & ((tci & 0x08) != 0), ok], [Label.MACSEC_E, Label.MACSEC_I], default=Label.MACSEC_BAD)
    out.assign(idx, codes.astype(np.int64))


def _inner_ip(s: U8, length: I64, offset: int) -> Bool:
    """Rows with a plausible IPv4 or IPv6 header at ``offset`` whose length fits the packet."""
    first = s[:, offset]
    v4 = ((first >> 4) == 4) & ((first & 0x0F) >= 5)
    v4 &= (be16(s, offset + 2) >= 20) & (be16(s, offset + 2) <= length - offset)
    v6 = ((first >> 4) == 6) & (be16(s, offset + 4) + 40 <= length - offset)
    v6 &= np.isin(s[:, offset + 6], [0, 6, 17, 43, 44, 50, 51, 58, 60])
    return np.asarray((v4 | v6) & (length >= offset + 28))


def _esp_rows(out: Labeller, idx: I64, s: U8, length: I64, v: I64) -> None:
    spi_ok = be32(s, 0) >= 256  # 0 is the non-ESP marker, 1..255 are reserved
    null = spi_ok & _inner_ip(s, length, 8)
    codes = np.select([null, spi_ok], [Label.ESP_NULL, Label.ESP], 0).astype(np.int64)
    out.assign(idx, codes, np.where(spi_ok, ESP_BODY, -1), v)


def esp(p: Packets, out: Labeller) -> None:
    """ESP (IP protocol 50): the head starts at the SPI."""
    idx, s, length, v = select(p, out, (p.proto == _ESP) & (p.length >= 8))
    if idx.size:
        _esp_rows(out, idx, s, length, v)


_AH_LEN_MIN: Final = 4  # a 12-byte ICV
_AH_LEN_MAX: Final = 10  # a 32-byte ICV padded to 8 bytes (IPv6)


def ah(p: Packets, out: Labeller) -> None:
    """IPsec AH (IP protocol 51; in IPv6 the extension header the reader stops at), RFC 4302 §2: next header,
    payload length (the header's 32-bit words minus 2), reserved zero, an SPI above the reserved 0-255, the
    sequence number and the ICV; then the protected packet, in clear unless its next header is ESP. The ICV is
    12 to 36 bytes — every integrity algorithm RFC 8221 lists (HMAC-SHA1-96 and AES-XCBC-96: 12, HMAC-SHA2-256:
    16, AES-GMAC: 8 IV + 16, HMAC-SHA2-384: 24, HMAC-SHA2-512: 32), with IPv6's 8-byte padding: a payload
    length of 4 to 10; without that bound a random datagram on protocol 51 passed one in ~10^5."""
    c = p.cols
    cand = (p.proto == _AH) & (c[2] == 0) & (c[3] == 0) & (p.length >= 12)
    idx, s, length, _ = select(p, out, cand)
    if idx.size == 0:
        return
    size = (s[:, 1].astype(np.int64) + 2) * 4
    ok = (s[:, 1] >= _AH_LEN_MIN) & (s[:, 1] <= _AH_LEN_MAX) & (size <= length) & (be32(s, 4) > 255)
    ok &= (s[:, 0] < 143) | (s[:, 0] >= 253)
    codes = np.where(ok, np.where(s[:, 0] == _ESP, Label.AH_ESP, Label.AH), 0)
    out.assign(idx, codes.astype(np.int64))


def esp_in_udp(p: Packets, out: Labeller) -> None:
    """ESP in UDP (RFC 3948): on port 4500 a datagram not starting with the zero non-ESP marker."""
    idx, s, length, v = select(p, out, (p.proto == _UDP) & p.port(NAT_T_PORT) & (p.length >= 16))
    if idx.size:
        _esp_rows(out, idx, s, length, v)


def nat_keepalive(p: Packets, out: Labeller) -> None:
    """NAT-T keepalive: a single 0xFF byte (RFC 3948 §2.3)."""
    idx, _, _, _ = select(p, out, (p.proto == _UDP) & (p.length == 1) & (p.cols[0] == 0xFF))
    out.assign(idx, np.full(idx.size, Label.NAT_KEEPALIVE, dtype=np.int64))


def ike(p: Packets, out: Labeller) -> None:
    """IKE header (RFC 7296 / 2408), bare or after the 4-byte non-ESP marker; its length is the datagram's."""
    c = p.cols
    udp = (p.proto == _UDP) & (p.length >= 28)
    bare = udp & np.isin(c[17], [0x10, 0x20])
    marked = udp & (c[0] == 0) & (c[1] == 0) & (c[2] == 0) & (c[3] == 0) & (p.length >= 32)
    for offset, cand in ((0, bare), (4, marked)):
        idx, s, length, _ = select(p, out, cand)
        if idx.size == 0:
            continue
        version = s[:, offset + 17]
        exchange = s[:, offset + 18]
        spi_i = np.any(s[:, offset : offset + 8] != 0, axis=1)
        ok = spi_i & (be32(s, offset + 24) == length - offset)
        v2 = ok & (version == 0x20) & np.isin(exchange, _IKE2_EXCHANGES)
        v1 = ok & (version == 0x10) & np.isin(exchange, _IKE1_EXCHANGES)
        out.assign(idx, np.select([v2, v1], [Label.IKE2, Label.IKE1], 0).astype(np.int64))


def wireguard(p: Packets, out: Labeller) -> None:
    """WireGuard message (whitepaper §5.4): type 1..4 and three reserved zero bytes, then per type.

    Handshake initiation, response and cookie reply have one exact size each (148, 92, 64). Transport
    data is a 16-byte header (type, receiver index, 64-bit little-endian counter) and the AEAD
    ciphertext with its 16-byte tag, so at least 32 bytes. Its length is *not* always a multiple of
    16: both implementations (Linux ``calculate_skb_padding``, wireguard-go ``calculatePaddingSize``)
    pad the plaintext to 16 but never beyond the tunnel MTU, so every full-size packet of a tunnel
    with the default MTU 1420 is 1452 bytes. What pins a transport message instead is its counter:
    it restarts at 0 with every session key, and a session lives at most 180 s (REJECT_AFTER_TIME),
    so it stays below 2^40 (the top three bytes are zero) even at hundreds of Gbit/s.
    """
    c = p.cols
    cand = (p.proto == _UDP) & ((c[0] - 1) <= 3) & (c[1] == 0) & (c[2] == 0) & (c[3] == 0)
    idx, s, length, _ = select(p, out, cand)
    kind = s[:, 0]
    counter_ok = (s[:, 13] == 0) & (s[:, 14] == 0) & (s[:, 15] == 0)
    codes = np.select(
        [
            (kind == 1) & (length == WG_INITIATION),
            (kind == 2) & (length == WG_RESPONSE),
            (kind == 3) & (length == WG_COOKIE_REPLY),
            (kind == 4) & (length >= WG_TRANSPORT_MIN) & counter_ok,
        ],
        [Label.WG_INIT, Label.WG_RESP, Label.WG_COOKIE, Label.WG_DATA],
        0,
    )
    out.assign(idx, codes.astype(np.int64))


def quic(p: Packets, out: Labeller) -> None:
    """QUIC long header (RFC 9000 §17.2, v2 RFC 9369, drafts) and gQUIC (Q0xx/T0xx versions)."""
    c = p.cols
    idx, s, length, _ = select(p, out, (p.proto == _UDP) & ((c[0] & 0x80) != 0) & (p.length >= 7))
    if idx.size:
        version = be32(s, 1)
        fixed = (s[:, 0] & 0x40) != 0
        dcid = s[:, 5].astype(np.int64)
        scid = at(s, 6 + dcid)
        ids_ok = (dcid <= 20) & (scid <= 20)
        draft = (s[:, 1] == 0xFF) & (s[:, 2] == 0) & (s[:, 3] == 0)
        v1 = fixed & ids_ok & ((version == 1) | draft)
        v2 = fixed & ids_ok & (version == _QUIC_V2)
        vn = (version == 0) & ids_ok & (length > 7 + dcid + scid) & ((length - 7 - dcid - scid) % 4 == 0)
        # gQUIC Q046+ uses the long-header form with an ASCII version and packed connection-id lengths.
        google = np.isin(s[:, 1], [0x51, 0x54]) & (s[:, 2] == 0x30) & is_digit(s[:, 3]) & is_digit(s[:, 4])
        kind = (s[:, 0] >> 4) & 3
        v1_kinds = [Label.QUIC_INITIAL, Label.QUIC_0RTT, Label.QUIC_HANDSHAKE, Label.QUIC_RETRY]
        v2_kinds = [Label.QUIC_RETRY, Label.QUIC_INITIAL, Label.QUIC_0RTT, Label.QUIC_HANDSHAKE]
        codes = np.select(
            [google, vn, v1, v2],
            [Label.GQUIC_HS, Label.QUIC_VN, np.choose(kind, v1_kinds), np.choose(kind, v2_kinds)],
            0,
        )
        out.assign(idx, codes.astype(np.int64))
    # gQUIC up to Q043: public flags with the version bit (0x01) and an 8-byte connection id (0x08).
    idx, s, _, _ = select(p, out, (p.proto == _UDP) & ((c[0] & 0x89) == 0x09) & (p.length >= 13))
    if idx.size:
        ok = (s[:, 9] == 0x51) & (s[:, 10] == 0x30) & is_digit(s[:, 11]) & is_digit(s[:, 12])
        out.assign(idx, np.where(ok, Label.GQUIC_HS, 0).astype(np.int64))


def dtls(p: Packets, out: Labeller) -> None:
    """DTLS 1.0/1.2 record header: content type, version 0xFEFF/0xFEFD, epoch, sequence, length."""
    c = p.cols
    cand = (p.proto == _UDP) & ((c[0] - 20) <= 5) & (c[1] == 0xFE) & np.isin(c[2], [0xFF, 0xFD, 0xFC])
    idx, s, length, _ = select(p, out, cand & (p.length >= 13))
    ok = be16(s, 11) + 13 <= length
    ct = s[:, 0]
    codes = np.select([ok & (ct == 22), ok & (ct == 23), ok], [Label.DTLS_HS, Label.DTLS_APP, Label.DTLS_OTHER], 0)
    out.assign(idx, codes.astype(np.int64))


def roce(p: Packets, out: Labeller) -> None:
    """RoCEv2 base transport header on UDP 4791: valid opcode, TVer 0, reserved bits zero."""
    c = p.cols
    cand = (p.proto == _UDP) & p.port(ROCE_PORT) & (p.length >= 12) & ((c[1] & 0x0F) == 0) & (c[4] == 0)
    idx, s, length, v = select(p, out, cand & ((c[8] & 0x7F) == 0))
    opcode = s[:, 0]
    start = 12 + _ROCE_EXT[opcode]
    stop = np.minimum(v, length - 4)  # the 4-byte invariant CRC ends every packet
    data = _ROCE_VALID[opcode] & _ROCE_PAYLOAD[opcode] & (stop > start)
    codes = np.select([data, _ROCE_VALID[opcode]], [Label.ROCE_DATA, Label.ROCE_CTRL], 0).astype(np.int64)
    out.assign(idx, codes, np.where(data, start, -1), stop)


_NTS_FIELDS: Final = (0x0104, 0x0204, 0x0304, 0x0404)


def ntp(p: Packets, out: Labeller) -> None:
    """NTP v1-4: the time modes 1-5 (RFC 5905), control mode 6 (ntpq, RFC 9327) and private mode 7 (ntpdc).

    Modes 1-5: 48-byte header, sane stratum/poll, root delay/dispersion < 256 s. Modes 6 and 7 have 12- and
    8-byte headers whose counts must fit the datagram; being shorter, they are taken on UDP port 123 only.
    """
    c = p.cols
    version = (c[0] >> 3) & 7
    mode = c[0] & 7
    udp_v = (p.proto == _UDP) & ((version - 1) <= 3)
    cand = udp_v & (p.length >= 48) & (p.length % 4 == 0)
    cand &= ((mode - 1) <= 4) & (c[1] <= 16) & ((c[2] <= 17) | (c[2] >= 0xF6))
    cand &= (c[4] == 0) & (c[8] == 0)
    idx, s, length, _ = select(p, out, cand)
    # 20 (key id + MD5) or 24 (key id + SHA-1) bytes of MAC after the header; 4 (a key id alone) is a crypto-NAK,
    # which authenticates nothing
    mac = np.isin(length - 48, [20, 24])
    # NTS (RFC 8915 §5.7): an extension field (RFC 7822: a multiple of 4, at least 16 bytes, inside the datagram)
    # of an NTS type first: Unique Identifier, NTS Cookie, Cookie Placeholder, Authenticator and Encrypted EFs
    ef_len = be16(s, 50)
    nts = (length > 48) & np.isin(be16(s, 48), _NTS_FIELDS) & (ef_len >= 16) & (ef_len % 4 == 0)
    nts &= 48 + ef_len <= length
    out.assign(idx, np.select([nts, mac], [Label.NTP_NTS, Label.NTP_MAC], Label.NTP).astype(np.int64))
    on_123 = udp_v & p.port(NTP_PORT)
    _ntp_control(p, out, on_123 & (mode == 6) & (p.length >= 12))
    _ntp_private(p, out, on_123 & (mode == 7) & (p.length >= 8))


def _ntp_control(p: Packets, out: Labeller, cand: Bool) -> None:
    # RFC 9327 §2: R E M opcode | sequence | status | association | offset | count, then count bytes of data
    # (at most 468), zero padding to a 32-bit boundary (ntpd pads to 64 bits when it signs) and an optional
    # authenticator (key id + 16- or 20-byte MAC).
    c = p.cols
    response, opcode = (c[1] & 0x80) != 0, c[1] & 0x1F
    cand = cand & (opcode != 0) & (response | ((c[1] & 0x60) == 0))  # E and M are a response's bits
    idx, s, length, _ = select(p, out, cand)
    count = be16(s, 10)
    rest = length - 12 - count
    ok = (count <= NTP_CONTROL_DATA) & (((rest >= 0) & (rest <= 7)) | ((rest >= 20) & (rest <= 31)))
    out.assign(idx[ok], np.full(int(ok.sum()), Label.NTP_CONTROL, np.int64))


def _ntp_private(p: Packets, out: Labeller, cand: Bool) -> None:
    # ntpd's mode 7 (ntp_request.h): R M VN mode | A sequence | implementation (0 universal, 2 and 3 xntpd) |
    # request code | err:4 nitems:12 | mbz:4 itemsize:12, then nitems items of itemsize bytes.
    c = p.cols
    cand = cand & np.isin(c[2], [0, 2, 3]) & ((c[6] & 0xF0) == 0) & (((c[0] & 0x80) != 0) | ((c[0] & 0x40) == 0))
    idx, s, length, _ = select(p, out, cand)
    nitems, itemsize = be16(s, 4) & 0xFFF, be16(s, 6) & 0xFFF
    ok = (itemsize <= NTP_PRIVATE_DATA) & (nitems * itemsize + 8 <= length)
    out.assign(idx[ok], np.full(int(ok.sum()), Label.NTP_PRIVATE, np.int64))


#: PTP's UDP ports (IEEE 1588-2019 Annex C/D): event messages on 319, general messages on 320.
PTP_PORTS: Final = (319, 320)
#: Shortest message of each PTPv2 messageType (IEEE 1588-2019 §13): Sync, Delay_Req, Pdelay_Req, Pdelay_Resp,
#: Follow_Up, Delay_Resp, Pdelay_Resp_Follow_Up, Announce, Signaling, Management; 0 where undefined.
_PTP_BASE: Final = np.array([44, 44, 54, 54, 0, 0, 0, 0, 44, 54, 54, 64, 44, 48, 0, 0], dtype=np.int64)
_PTP_AUTH_TLV: Final = 0x8009  # AUTHENTICATION (IEEE 1588-2019 §16.14, Table 52)
_PTP_MANAGEMENT: Final = 0xD
_PTP_TLV_WALK: Final = 4


def ptp(p: Packets, out: Labeller) -> None:
    """PTPv2 (IEEE 1588-2008/2019) over UDP 319/320: versionPTP 2 (minor version 0 or 1), a defined messageType,
    a messageLength at least that type's and equal to the datagram's. The TLVs after the message body are walked
    while inside the head: an AUTHENTICATION TLV (§16.14) authenticates the message; a message with no TLV, or
    whose TLVs are all read and none is AUTHENTICATION, is not authenticated; one whose TLVs run past the head is
    labelled apart (its protection is not visible). Unauthenticated management messages (pmc's GET/SET of the
    clock's data sets) are labelled apart too."""
    idx, cc = narrow(p, out, (p.cols[1] & 0x0F) == 2)  # versionPTP
    base = _PTP_BASE[cc[0] & 0x0F]
    keep = (p.proto[idx] == _UDP) & on_ports(p, idx, PTP_PORTS) & (base > 0) & (p.length[idx] >= base)
    idx, s, length, v = take(p, idx[keep])
    if idx.size == 0:
        return
    size, base = be16(s, 2), base[keep]
    # The datagram is the message (IPv6 event messages may carry 2 more bytes, Annex D.3's checksum trailer), and
    # minorVersionPTP is 0 (2008) or 1 (2019): with the length merely within the datagram, a random datagram on
    # 319/320 passed one in ~2,500.
    ok = (size >= base) & ((size == length) | (size + 2 == length)) & ((s[:, 1] >> 4) <= 1)
    pos, auth = base.copy(), np.zeros(idx.size, dtype=np.bool_)
    for _ in range(_PTP_TLV_WALK):
        visible = (pos < size) & (pos + 4 <= v) & ~auth
        auth |= visible & (be16_at(s, pos) == _PTP_AUTH_TLV)
        pos = np.where(visible, pos + 4 + be16_at(s, pos + 2), pos)
    read_all = pos == size
    management = (s[:, 0] & 0x0F) == _PTP_MANAGEMENT
    codes = np.select(
        [auth, ~read_all, management],
        [Label.PTP_AUTH, Label.PTP_TLV, Label.PTP_MANAGEMENT],
        Label.PTP,
    )
    out.assign(idx, np.where(ok, codes, 0).astype(np.int64))


__all__ = [
    "ESP_BODY",
    "ETHERTYPE_MACSEC",
    "NAT_T_PORT",
    "PTP_PORTS",
    "ROCE_PORT",
    "dtls",
    "esp",
    "esp_in_udp",
    "ike",
    "macsec",
    "nat_keepalive",
    "ntp",
    "ptp",
    "quic",
    "roce",
    "wireguard",
]
