"""Recognisers for management, identity and service protocols: SNMP, IPMI/RMCP(+), Kerberos, LDAP,
RADIUS, DHCP, TFTP requests, PostgreSQL, MySQL, MQTT, RDP, Kafka and Slurm RPC.

BER-encoded protocols (SNMP, Kerberos, LDAP) are walked TLV by TLV with every length bounded
(short form or 0x81-0x83 long form; anything else ends the walk unlabelled); the others are checked
field by field against their fixed layouts.
"""

from __future__ import annotations

from typing import Final

import numpy as np

from ringfence.observe.recognise._bytes import (
    HEAD,
    I64,
    U8,
    Bool,
    Labeller,
    Packets,
    at,
    be16,
    be16_at,
    be32,
    le,
    on_ports,
    printable,
    select,
    table,
)
from ringfence.observe.recognise.labels import Label

_TCP: Final = 6
_UDP: Final = 17
_DHCP6_PORTS: Final = (546, 547)
_LDAP_STARTTLS_OID: Final = b"1.3.6.1.4.1.1466.20037"
_TFTP_MODES: Final = (b"octet\x00", b"netascii\x00", b"mail\x00")
_MUNGE: Final = b"MUNGE:"
TACACS_PORT: Final = 49
_TACACS_MAX_BODY: Final = 1 << 16
_PPTP_COOKIE: Final = 0x1A2B3C4D
#: Length of each PPTP control message by its type (RFC 2637 §2.1-2.15); 0: not a type.
_PPTP_LENGTHS: Final = np.array([0, 156, 156, 16, 16, 16, 20, 168, 32, 220, 24, 28, 16, 148, 32, 24] + [0] * 240)
#: RADIUS codes: Access-Request/Accept/Reject, Accounting, Challenge, Status-Server/Client, CoA/Disconnect.
_RADIUS_CODE: Final = table([1, 2, 3, 4, 5, 11, 12, 13, 40, 41, 42, 43, 44, 45])
_RADIUS_WALK: Final = 4
_RADIUS_WALK_ALL: Final = (HEAD - 20) // 2  # attributes of >= 2 bytes after the header, all inside the head
_RADIUS_PORTS: Final = (1812, 1813, 1645, 1646, 3799, 1700)
#: RMCP+ payload types (IPMI v2.0 §13.27.3): IPMI message, SOL, open session request/response, RAKP 1-4.
_RMCPP_PAYLOADS: Final = np.array([0x00, 0x01, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15])
_KRB_APP: Final = np.array([0x6A, 0x6B, 0x6C, 0x6D, 0x6E, 0x6F, 0x7E])  # AS/TGS REQ/REP, AP-REQ/REP, KRB-ERROR
#: Per byte value: a Kerberos APPLICATION tag (a look-up is cheaper than isin over every row).
_KRB_TAG: Final = table(_KRB_APP.tolist())
_LDAP_OPS: Final = np.array(
    [0x42, 0x4A, 0x50, 0x60, 0x61, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68, 0x69, 0x6B, 0x6C, 0x6D, 0x6E, 0x6F, 0x73]
    + [0x77, 0x78, 0x79]
)


def tlv(s: U8, pos: I64, v: I64) -> tuple[I64, I64, I64, Bool]:
    """The BER TLV at ``pos`` of every row: (tag, content length, header length, header visible and sane)."""
    tag = at(s, pos)
    first = at(s, pos + 1)
    long1 = first == 0x81
    long2 = first == 0x82
    long3 = first == 0x83
    long4 = first == 0x84  # Active Directory writes every LDAP length in this form
    length = np.select(
        [first < 0x80, long1, long2, long3, long4],
        [
            first,
            at(s, pos + 2),
            be16_at(s, pos + 2),
            (at(s, pos + 2) << 16) | be16_at(s, pos + 3),
            (be16_at(s, pos + 2) << 16) | be16_at(s, pos + 4),
        ],
        -1,
    )
    header = np.select([first < 0x80, long1, long2, long3, long4], [2, 3, 4, 5, 6], 0)
    ok = (header > 0) & (pos + header <= v) & ((tag & 0x1F) != 0x1F)  # no multi-byte tags here
    return tag, length, header, np.asarray(ok)


def _int_small(s: U8, pos: I64, v: I64) -> tuple[I64, I64, Bool]:
    """A BER INTEGER of 1..5 bytes at ``pos``: (value of its last up to 4 bytes, next position, ok)."""
    tag, length, header, ok = tlv(s, pos, v)
    ok &= (tag == 0x02) & (length >= 1) & (length <= 5) & (pos + header + length <= v)
    start = pos + header
    value = np.zeros(s.shape[0], dtype=np.int64)
    for i in range(5):
        inside = i < length
        value = np.where(inside, ((value << 8) | at(s, start + i)) & 0xFFFFFFFF, value)
    return value, start + np.maximum(length, 0), ok


def snmp(p: Packets, out: Labeller) -> None:
    """SNMP message (RFC 3416 / 3412): SEQUENCE { version, … } whose length is the datagram's.

    v1/v2c (version 0/1): the community OCTET STRING then a PDU tag 0xA0..0xA8. v3 (version 3):
    msgGlobalData { msgID, msgMaxSize >= 484, msgFlags (1 byte; priv needs auth), msgSecurityModel },
    then the USM security parameters; an empty authoritative engine id is discovery (RFC 3414 §4).
    """
    c = p.cols
    idx, s, length, v = select(p, out, (p.proto == _UDP) & (c[0] == 0x30) & (p.length >= 16))
    if idx.size == 0:
        return
    zero = np.zeros(idx.size, dtype=np.int64)
    _, total, header, ok = tlv(s, zero, v)
    ok &= header + total == length
    if not ok.any():  # most candidates fail here: skip the rest of the walk
        return
    version, pos, vok = _int_small(s, header, v)
    ok &= vok
    tag, clen, chdr, cok = tlv(s, pos, v)
    community = ok & (version <= 1) & cok & (tag == 0x04) & (clen <= 255)
    pdu = pos + chdr + clen
    community &= (pdu >= v) | ((at(s, pdu) >= 0xA0) & (at(s, pdu) <= 0xA8))
    v3 = ok & (version == 3) & cok & (tag == 0x30)
    _, pos3, ok1 = _int_small(s, pos + chdr, v)  # msgID
    max_size, pos3, ok2 = _int_small(s, pos3, v)
    ftag, flen, fhdr, fok = tlv(s, pos3, v)
    flags = at(s, pos3 + fhdr)
    model, pos3, ok4 = _int_small(s, pos3 + fhdr + 1, v)
    v3 &= ok1 & ok2 & fok & (ftag == 0x04) & (flen == 1) & (max_size >= 484) & ok4 & (model == 3)
    v3 &= (flags & 0xF8) == 0
    v3 &= (flags & 3) != 2  # privacy without authentication is invalid (RFC 3412 §6.4)
    # msgSecurityParameters OCTET STRING { SEQUENCE { msgAuthoritativeEngineID OCTET STRING, … } }
    stag, _, shdr, sok = tlv(s, pos3, v)
    utag, _, uhdr, uok = tlv(s, pos3 + shdr, v)
    etag, elen, _, eok = tlv(s, pos3 + shdr + uhdr, v)
    usm = sok & (stag == 0x04) & uok & (utag == 0x30) & eok & (etag == 0x04)
    discovery = v3 & ((flags & 3) == 0) & usm & (elen == 0)
    codes = np.select(
        [community, discovery, v3 & ((flags & 3) == 3), v3 & ((flags & 3) == 1), v3],
        [Label.SNMP_COMMUNITY, Label.SNMP3_DISCOVERY, Label.SNMP3_PRIV, Label.SNMP3_AUTH, Label.SNMP3_NOAUTH],
        0,
    )
    out.assign(idx, codes.astype(np.int64))


def rmcp(p: Packets, out: Labeller) -> None:
    """RMCP (DMTF DSP0136) on UDP: version 6, reserved 0, sequence, class (6 ASF, 7 IPMI).

    IPMI 1.5 session header (IPMI v2.0 §13.6): authentication type 0/1/2/4/5, then the message length
    byte that must match the datagram. RMCP+ (authentication type 6, §13.6): payload type with the
    encrypted (0x80) and authenticated (0x40) bits and a 16-bit payload length: exact without an
    integrity trailer, shorter than the datagram with one.
    """
    c = p.cols
    cand = (p.proto == _UDP) & (c[0] == 0x06) & (c[1] == 0x00) & np.isin(c[3] & 0x9F, [0x06, 0x07])
    idx, s, length, _ = select(p, out, cand & (p.length >= 8))
    if idx.size == 0:
        return
    cls = s[:, 3] & 0x1F
    auth = s[:, 4] & 0x0F
    asf = (cls == 0x06) & (be32(s, 4) == 4542) & np.isin(s[:, 8], [0x40, 0x80])
    v15_short = (cls == 0x07) & (auth == 0) & (length >= 14) & np.isin(length - 14 - s[:, 13], [0, 1])
    v15_auth = (cls == 0x07) & np.isin(auth, [1, 2, 4, 5]) & (length >= 30) & np.isin(length - 30 - s[:, 29], [0, 1])
    plus = (cls == 0x07) & (auth == 6) & (length >= 16)
    ptype = s[:, 5] & 0x3F
    plen = le(s, 14, 2)
    encrypted = (s[:, 5] & 0x80) != 0
    authed = (s[:, 5] & 0x40) != 0
    plus &= np.where(authed, 16 + plen < length, 16 + plen == length) & np.isin(ptype, _RMCPP_PAYLOADS)
    setup = plus & (ptype >= 0x10) & ~encrypted & ~authed
    # Outside a session (session id 0) an IPMI 1.5 message is discovery — Get Channel Authentication
    # Capabilities, which ipmitool sends in clear before every RMCP+ session — not session traffic.
    sessionless = (v15_short | v15_auth) & (be32(s, 9) == 0)
    codes = np.select(
        [
            asf,
            sessionless,
            v15_short | (v15_auth & (auth == 4)),  # none, or the password itself as the "authcode"
            v15_auth,
            setup,
            plus & encrypted,
            plus & authed,
            plus & (ptype < 0x10),
        ],
        [
            Label.ASF,
            Label.RMCPP_SETUP,
            Label.IPMI15_CLEAR,
            Label.IPMI15_AUTH,
            Label.RMCPP_SETUP,
            Label.RMCPP_ENC,
            Label.RMCPP_AUTH,
            Label.RMCPP_PLAIN,
        ],
        0,
    )
    out.assign(idx, codes.astype(np.int64))


def kerberos(p: Packets, out: Labeller) -> None:
    """Kerberos v5 (RFC 4120 §5): an APPLICATION-tagged message (AS/TGS-REQ/REP, AP-REQ/REP, KRB-ERROR)
    holding a SEQUENCE whose first fields are pvno 5 and the msg-type the tag names; over TCP after a
    4-byte length (§7.2.2)."""
    c = p.cols
    udp = (p.proto == _UDP) & _KRB_TAG[c[0]]
    tcp = (p.proto == _TCP) & (c[0] < 0x80) & _KRB_TAG[c[4]]
    for base, rows in ((0, udp), (4, tcp)):
        idx, s, length, v = select(p, out, rows & (p.length >= base + 16))
        if idx.size == 0:
            continue
        pos = np.full(idx.size, base, dtype=np.int64)
        app, total, header, ok = tlv(s, pos, v)
        # UDP: the message is the datagram; TCP: the length prefix counts it and may exceed the segment.
        size = length if base == 0 else be32(s, 0)
        ok &= (header + total == size) & (size >= length - base)
        if not ok.any():
            continue
        seq, _, shdr, sok = tlv(s, pos + header, v)
        ok &= sok & (seq == 0x30)
        first = pos + header + shdr
        msg_type = app & 0x1F
        pvno_tag = np.where(np.isin(msg_type, [10, 12]), 0xA1, 0xA0)  # KDC-REQ numbers pvno [1]
        pvno_ok = (at(s, first) == pvno_tag) & (at(s, first + 1) == 3) & (at(s, first + 2) == 2)
        pvno_ok &= (at(s, first + 3) == 1) & (at(s, first + 4) == 5)
        mt_ok = (at(s, first + 5) == pvno_tag + 1) & (at(s, first + 6) == 3) & (at(s, first + 7) == 2)
        mt_ok &= (at(s, first + 8) == 1) & (at(s, first + 9) == msg_type)
        out.assign(idx, np.where(ok & pvno_ok & mt_ok & (first + 10 <= v), Label.KERBEROS, 0).astype(np.int64))


def ldap(p: Packets, out: Labeller) -> None:
    """LDAPv3 message (RFC 4511 §4.1.1): SEQUENCE { messageID INTEGER, protocolOp [APPLICATION n] }.

    A BindRequest's authentication choice says simple [0] (the password in clear) or SASL [3]; an
    ExtendedRequest naming 1.3.6.1.4.1.1466.20037 is StartTLS (RFC 4511 §4.14).
    """
    c = p.cols
    idx, s, length, v = select(p, out, (p.proto == _TCP) & (c[0] == 0x30) & (p.length >= 7))
    if idx.size == 0:
        return
    zero = np.zeros(idx.size, dtype=np.int64)
    _, total, header, ok = tlv(s, zero, v)
    ok &= total >= 5  # a message may span segments or share one, so its length bounds only its own fields
    ok &= at(s, header) == 0x02  # the messageID INTEGER
    if not ok.any():
        return
    msg_id, pos, iok = _int_small(s, header, v)
    op, olen, ohdr, ook = tlv(s, pos, v)
    # The protocolOp ends the message, or optional controls ([0], RFC 4511 §4.1.11) follow it.
    op_end = pos + ohdr + olen
    ends = (op_end == header + total) | ((op_end < header + total) & ((op_end >= v) | (at(s, op_end) == 0xA0)))
    ok &= iok & ook & np.isin(op, _LDAP_OPS) & ends & (msg_id < 1 << 31)
    body = pos + ohdr
    version, after_version, vok = _int_small(s, body, v)
    ntag, nlen, nhdr, nok = tlv(s, after_version, v)
    auth_pos = after_version + nhdr + nlen
    bind = ok & (op == 0x60) & vok & (version >= 1) & (version <= 3) & nok & (ntag == 0x04)
    auth_tag = at(s, auth_pos)
    simple = bind & (auth_pos < v) & (auth_tag == 0x80)
    sasl = bind & (auth_pos < v) & (auth_tag == 0xA3)
    oid = np.frombuffer(_LDAP_STARTTLS_OID, dtype=np.uint8)
    name_at = body + 2
    shown = np.zeros(idx.size, dtype=np.bool_)
    if bool(np.any(ok & (op == 0x77))):
        cols = np.clip(name_at[:, None] + np.arange(oid.size), 0, HEAD - 1)
        shown = np.all(s[np.arange(idx.size)[:, None], cols] == oid, axis=1) & (name_at + oid.size <= v)
    starttls = ok & (op == 0x77) & (at(s, body) == 0x80) & (at(s, body + 1) == oid.size) & shown
    codes = np.select(
        [simple, sasl | (ok & (op == 0x61)), starttls, ok & ~bind & (op != 0x78)],
        [Label.LDAP_SIMPLE_BIND, Label.LDAP_SASL_BIND, Label.LDAP_STARTTLS, Label.LDAP_OP],
        0,
    )
    out.assign(idx, codes.astype(np.int64))


def dhcp(p: Packets, out: Labeller) -> None:
    """DHCPv4/BOOTP (RFC 2131 §2): op 1/2, htype Ethernet/IEEE 802/InfiniBand, hlen 6 (0 for
    InfiniBand, RFC 4390), hops <= 16, only the broadcast flag, zero chaddr padding, >= 240 bytes.
    DHCPv6 (RFC 8415), defined by its ports 546/547: message type 1..13 and a first option that fits."""
    c = p.cols
    cand = (p.proto == _UDP) & ((c[0] - 1) <= 1) & np.isin(c[1], [1, 6, 32]) & ((c[2] == 6) | (c[2] == 0))
    cand &= (c[3] <= 16) & ((c[10] & 0x7F) == 0) & (c[11] == 0) & (p.length >= 240)
    idx, s, _, _ = select(p, out, cand)
    if idx.size:
        hlen = s[:, 2].astype(np.int64)
        col = np.arange(16)
        pad = s[:, 28:44]
        clean = np.all((pad == 0) | (col[None, :] < hlen[:, None]), axis=1)
        ok = clean & ((hlen == 6) | (s[:, 1] == 32))
        out.assign(idx, np.where(ok, Label.DHCP, 0).astype(np.int64))
    six = (p.proto == _UDP) & (p.port(_DHCP6_PORTS[0]) | p.port(_DHCP6_PORTS[1])) & (c[0] >= 1) & (c[0] <= 13)
    idx, s, length, _ = select(p, out, six & (c[4] == 0) & (p.length >= 8))
    if idx.size:
        code, olen = be16(s, 4), be16(s, 6)
        ok = (code >= 1) & (code <= 200) & (8 + olen <= length)
        out.assign(idx, np.where(ok, Label.DHCP, 0).astype(np.int64))


def tftp_request(p: Packets, out: Labeller) -> None:
    """TFTP read/write request (RFC 1350 §5): opcode 1/2, a printable file name, NUL, then the mode
    ``octet``, ``netascii`` or ``mail`` (any case) and NUL."""
    c = p.cols
    idx, s, _, v = select(p, out, (p.proto == _UDP) & (c[0] == 0) & ((c[1] - 1) <= 1) & (p.length >= 9))
    if idx.size == 0:
        return
    rows = np.arange(idx.size)
    nul = 2 + np.argmax(s[:, 2:] == 0, axis=1)
    named = (s[rows, nul] == 0) & (nul > 2) & (nul < v)
    col = np.arange(HEAD)
    name_ok = np.all(printable(s) | (col[None, :] < 2) | (col[None, :] >= nul[:, None]), axis=1)
    lower = s | 0x20
    mode_ok = np.zeros(idx.size, dtype=np.bool_)
    for mode in _TFTP_MODES:
        want = np.frombuffer(mode, dtype=np.uint8)
        cols = np.clip(nul[:, None] + 1 + np.arange(want.size), 0, HEAD - 1)
        got = np.where(want == 0, s[rows[:, None], cols], lower[rows[:, None], cols])
        mode_ok |= np.all(got == want, axis=1) & (nul + 1 + want.size <= v)
    out.assign(idx, np.where(named & name_ok & mode_ok, Label.TFTP_REQ, 0).astype(np.int64))


def postgres(p: Packets, out: Labeller) -> None:
    """PostgreSQL frontend start (protocol 3, §55.2): SSLRequest / GSSENCRequest (length 8, codes
    80877103 / 80877104) or a StartupMessage (length, version 3.0..3.2, a printable parameter name)."""
    c = p.cols
    idx, s, length, v = select(p, out, (p.proto == _TCP) & (c[0] == 0) & (c[1] == 0) & (p.length >= 8))
    if idx.size == 0:
        return
    size = be32(s, 0)
    code = be32(s, 4)
    request = (size == 8) & (length == 8) & np.isin(code, [80877103, 80877104])
    startup = (size >= 12) & (size <= 10000) & (size >= length) & (code >= 0x00030000) & (code <= 0x00030002)
    startup &= np.all(printable(s[:, 8:12]) & (s[:, 8:12] > 0x20), axis=1) & (v >= 12)
    codes = np.select([request, startup], [Label.PG_SSLREQ, Label.PG_STARTUP], 0)
    out.assign(idx, codes.astype(np.int64))


def mysql(p: Packets, out: Labeller) -> None:
    """MySQL client/server protocol (3-byte length, sequence id): the server's Handshake v10
    (sequence 0, protocol 10, version string, NUL, …, filler 0) and the client's SSLRequest (sequence
    1, 32 bytes, CLIENT_SSL and CLIENT_PROTOCOL_41, 23 zero bytes) or HandshakeResponse41 (the same
    fixed part, then the user name in clear)."""
    c = p.cols
    idx, s, length, v = select(p, out, (p.proto == _TCP) & (c[3] <= 1) & (p.length >= 36))
    if idx.size == 0:
        return
    size = le(s, 0, 3)
    seq = s[:, 3]
    rows = np.arange(idx.size)
    nul = 5 + np.argmax(s[:, 5:40] == 0, axis=1)
    digits = np.all(printable(s[:, 5:8]), axis=1) & (s[:, 5] >= 0x30) & (s[:, 5] <= 0x39)
    greeting = (seq == 0) & (s[:, 4] == 0x0A) & digits & (s[rows, nul] == 0) & (nul < v) & (size + 4 == length)
    greeting &= (nul + 13 < v) & (at(s, nul + 13) == 0)
    caps = le(s, 4, 4)
    fixed = (seq == 1) & ((caps & 0x200) != 0) & np.all(s[:, 13:36] == 0, axis=1) & (size + 4 == length)
    ssl_request = fixed & ((caps & 0x800) != 0) & (size == 32)
    login = fixed & ((caps & 0x800) == 0) & (size > 32) & (v > 36) & (s[:, 36] > 0x20) & (s[:, 36] < 0x7F)
    codes = np.select([greeting, ssl_request, login], [Label.MYSQL_GREETING, Label.MYSQL_SSLREQ, Label.MYSQL_LOGIN], 0)
    out.assign(idx, codes.astype(np.int64))


def mqtt(p: Packets, out: Labeller) -> None:
    """MQTT CONNECT (3.1.1 §3.1 / 5.0 §3.1): fixed header 0x10, remaining length (1..4 byte varint),
    protocol name ``MQTT`` (level 4/5) or ``MQIsdp`` (level 3), connect flags with bit 0 clear."""
    c = p.cols
    idx, s, _, v = select(p, out, (p.proto == _TCP) & (c[0] == 0x10) & (p.length >= 12))
    if idx.size == 0:
        return
    width = np.ones(idx.size, dtype=np.int64)
    for i in range(1, 4):
        width = np.where((width == i) & ((s[:, i] & 0x80) != 0), i + 1, width)
    name = 1 + width
    mqtt311 = (be16_at(s, name) == 4) & (at(s, name + 2) == 0x4D) & (at(s, name + 3) == 0x51)
    mqtt311 &= (at(s, name + 4) == 0x54) & (at(s, name + 5) == 0x54) & np.isin(at(s, name + 6), [4, 5])
    flags311 = at(s, name + 7)
    v31 = (be16_at(s, name) == 6) & (at(s, name + 2) == 0x4D) & (at(s, name + 3) == 0x51)
    v31 &= (at(s, name + 4) == 0x49) & (at(s, name + 5) == 0x73) & (at(s, name + 8) == 3)
    flags31 = at(s, name + 9)
    ok = (mqtt311 & ((flags311 & 1) == 0) & (name + 8 <= v)) | (v31 & ((flags31 & 1) == 0) & (name + 10 <= v))
    out.assign(idx, np.where(ok, Label.MQTT_CONNECT, 0).astype(np.int64))


def rdp(p: Packets, out: Labeller) -> None:
    """RDP connection request / confirm (MS-RDPBCGR §2.2.1.1-2): TPKT (3, 0, length), X.224 with a
    length indicator of TPKT length - 5, CR 0xE0 / CC 0xD0, class 0; the RDP negotiation structure
    (type 1 request / 2 response, length 8) is the last 8 bytes, naming PROTOCOL_RDP (0: standard RDP
    security) or SSL / HYBRID / RDSTLS / HYBRID_EX (TLS, with or without CredSSP)."""
    c = p.cols
    idx, s, length, v = select(p, out, (p.proto == _TCP) & (c[0] == 3) & (c[1] == 0) & (p.length >= 11))
    if idx.size == 0:
        return
    total = be16(s, 2)
    ok = (total == length) & (s[:, 4] == total - 5) & np.isin(s[:, 5], [0xE0, 0xD0]) & (s[:, 10] == 0)
    neg = total - 8
    has_neg = ok & (total <= v) & (total >= 19) & np.isin(at(s, neg), [1, 2]) & (at(s, neg + 2) == 8)
    has_neg &= at(s, neg + 3) == 0
    protocols = at(s, neg + 4) | (at(s, neg + 5) << 8) | (at(s, neg + 6) << 16) | (at(s, neg + 7) << 24)
    legacy_cr = ok & (s[:, 5] == 0xE0) & (total <= v) & ~has_neg & (total == 11)  # no negotiation: standard
    codes = np.select(
        [has_neg & (protocols != 0), (has_neg & (protocols == 0)) | legacy_cr],
        [Label.RDP_NEG_TLS, Label.RDP_NEG_STD],
        0,
    )
    out.assign(idx, codes.astype(np.int64))


def kafka(p: Packets, out: Labeller) -> None:
    """Kafka request header v1/v2 (the Kafka protocol guide): size, api_key <= 80, api_version <= 20,
    correlation id, then client_id as a 16-bit length and printable text."""
    c = p.cols
    cand = (p.proto == _TCP) & (c[0] == 0) & (c[4] == 0) & (c[5] <= 80) & (c[6] == 0) & (c[7] <= 20)
    idx, s, _, v = select(p, out, cand & (p.length >= 16))
    if idx.size == 0:
        return
    size = be32(s, 0)
    id_len = be16(s, 12)
    col = np.arange(HEAD)
    region = (col[None, :] >= 14) & (col[None, :] < np.minimum(14 + id_len, v)[:, None])
    text = np.all(printable(s) & (s > 0x20) | ~region, axis=1)
    ok = (size >= 14) & (size <= 1 << 27) & (id_len >= 1) & (id_len <= 255) & (14 + np.minimum(id_len, 2) <= v)
    out.assign(idx, np.where(ok & text, Label.KAFKA, 0).astype(np.int64))


def radius(p: Packets, out: Labeller) -> None:
    """RADIUS (RFC 2865 §3, 2866, 5176): code 1-5, 11-13 or 40-45, identifier, length equal to the
    datagram's (20..4096), the 16-byte authenticator, then attributes (type >= 1, length >= 2) that
    fit the packet, walked while inside the head. On its ports (1812/1813, the old 1645/1646, CoA 3799 and
    1700) that is enough; elsewhere the attributes must be walked to the packet's exact end inside the head —
    the shorter test is ~20 bits of evidence, and one of 160,000 random datagrams passed it."""
    c = p.cols
    cand = (p.proto == _UDP) & _RADIUS_CODE[c[0]] & (p.length >= 20) & (p.length <= 4096)
    idx, s, length, v = select(p, out, cand)
    if idx.size == 0:
        return
    ok = be16(s, 2) == length
    pos = np.full(idx.size, 20, dtype=np.int64)
    for step in range(_RADIUS_WALK_ALL):
        visible = ok & (pos < length) & (pos + 2 <= v)
        if step >= _RADIUS_WALK and not visible.any():
            break
        attr_len = at(s, pos + 1)
        ok &= ~visible | ((at(s, pos) >= 1) & (attr_len >= 2) & (pos + attr_len <= length))
        pos = np.where(visible, pos + attr_len, pos)
    ok &= on_ports(p, idx, _RADIUS_PORTS) | ((length <= v) & (pos == length))
    out.assign(idx, np.where(ok, Label.RADIUS, 0).astype(np.int64))


def slurm(p: Packets, out: Labeller) -> None:
    """Slurm RPC (slurm_protocol_pack.c): 4-byte length, protocol version (19.05 .. 27.x: high byte
    33..50, low 0), flags, msg_type 1001..12000, body length; the MUNGE credential (``MUNGE:…``)
    follows the header and is visible in short headers."""
    c = p.cols
    cand = (p.proto == _TCP) & (c[0] == 0) & (c[4] >= 33) & (c[4] <= 50) & (c[5] == 0) & (c[6] == 0)
    idx, s, _, _ = select(p, out, cand & (p.length >= 20))
    if idx.size == 0:
        return
    size = be32(s, 0)
    msg_type = be16(s, 8)
    body = be32(s, 10)
    ok = (size >= 14) & (size <= 1 << 26) & (msg_type >= 1001) & (msg_type <= 12000) & (body <= size)
    windows = np.lib.stride_tricks.sliding_window_view(s, len(_MUNGE), axis=1)
    munge = np.all(windows == np.frombuffer(_MUNGE, dtype=np.uint8), axis=2).any(axis=1)
    codes = np.select([ok & munge, ok], [Label.SLURM_MUNGE, Label.SLURM], 0)
    out.assign(idx, codes.astype(np.int64))


def tacacs(p: Packets, out: Labeller) -> None:
    """TACACS+ on TCP 49 (RFC 8907 §4.1): version 0xC0/0xC1, type 1-3 (authentication, authorization,
    accounting), sequence number >= 1 (odd from the client, even from the server), flags within UNENCRYPTED
    (0x01) and SINGLE_CONNECT (0x04), session id and a body length. The UNENCRYPTED flag means the body is in
    clear; without it the body is obfuscated with an MD5 keystream of the shared secret (§4.5)."""
    c = p.cols
    cand = (p.proto == _TCP) & p.port(TACACS_PORT) & ((c[0] & 0xFE) == 0xC0) & ((c[1] - 1) <= 2) & (c[2] >= 1)
    idx, s, _, _ = select(p, out, cand & ((c[3] & 0xFA) == 0) & (p.length >= 12))
    if idx.size == 0:
        return
    ok = be32(s, 8) <= _TACACS_MAX_BODY
    clear = (s[:, 3] & 0x01) != 0
    codes = np.select([ok & clear, ok], [Label.TACACS_CLEAR, Label.TACACS_OBFUSCATED], 0)
    out.assign(idx, codes.astype(np.int64))


def pptp(p: Packets, out: Labeller) -> None:
    """PPTP control connection (RFC 2637 §1.4, §2): length, message type 1 (control), the magic cookie
    0x1A2B3C4D, a control message type 1-15, reserved zero, and the length that type has."""
    c = p.cols
    cand = (p.proto == _TCP) & (c[0] == 0) & (c[2] == 0) & (c[3] == 1) & (c[8] == 0) & (c[10] == 0) & (c[11] == 0)
    idx, s, length, _ = select(p, out, cand & (p.length >= 16))
    if idx.size == 0:
        return
    ok = (be32(s, 4) == _PPTP_COOKIE) & (be16(s, 0) == _PPTP_LENGTHS[s[:, 9]]) & (be16(s, 0) <= length)
    out.assign(idx, np.where(ok, Label.PPTP, 0).astype(np.int64))


__all__ = [
    "dhcp",
    "kafka",
    "kerberos",
    "ldap",
    "mqtt",
    "mysql",
    "postgres",
    "pptp",
    "radius",
    "rdp",
    "rmcp",
    "slurm",
    "snmp",
    "tacacs",
    "tftp_request",
    "tlv",
]
