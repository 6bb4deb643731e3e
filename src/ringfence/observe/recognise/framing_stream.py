"""Recognisers for framing at the start of TCP payloads: TLS, SSH, HTTP, gloo, ringfence transport,
syslog and DNS (DNS also over UDP).

Each one first selects candidate rows with a test on one to four leading bytes over all rows, then
checks the candidates' full structure (lengths that must agree, reserved bits that must be zero).
TCP segments need not start at a record boundary, so a packet that matches nothing here may still
belong to a recognised flow (a continuation segment); :mod:`.verdict` reasons per flow.
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
    count_in,
    is_digit,
    le,
    narrow,
    prefix,
    printable,
    select,
    take,
)
from ringfence.observe.recognise.labels import Label

_TCP: Final = 6
_UDP: Final = 17
# 2^14 plaintext + 2048 expansion: the largest record RFC 8446/5246 allow.
_TLS_MAX_RECORD: Final = 18432
# Handshake types that travel in the clear only up to TLS 1.2 (TLS 1.3 encrypts all after ServerHello).
_TLS12_ONLY: Final = np.array([4, 11, 12, 13, 14, 15, 16])
#: Where a TLS application_data body is checked for readable data (5-byte header + 8-byte explicit nonce).
TLS_BODY: Final = 13
#: Size of a ringfence-transport record header; the AEAD ciphertext follows it.
RFT_BODY: Final = 24
_RFT_MAX_BODY: Final = (64 << 20) + 16
#: Size of gloo's TCP preamble: six 64-bit fields (nbytes, opcode, slot, offset, length, roffset).
GLOO_PREAMBLE: Final = 48
#: SSH binary packets followed within one segment (the head holds at most a few small ones).
_SSH_WALK: Final = 4
#: A NEWKEYS packet with the minimum padding: length 12, padding 10, code 21.
_SSH_NEWKEYS_SIZE: Final = 16
_HTTP_METHODS: Final = (b"GET", b"POST", b"PUT", b"HEAD", b"DELETE", b"OPTIONS", b"PATCH", b"CONNECT", b"TRACE")


def rft(p: Packets, out: Labeller) -> None:
    """Ringfence's own transport (:mod:`ringfence.secure.transport.wire`): a 24-byte ``RFT1`` header.

    Header: magic, type, flags 0, reserved 0, epoch, seq, length. HELLO/AUTH/ALERT (1-3) carry a
    plaintext handshake body at epoch 0; DATA/ABORT/FINISHED (16-18) carry AEAD ciphertext.
    """
    c = p.cols
    cand = (c[0] == 0x52) & (c[1] == 0x46) & (c[2] == 0x54) & (c[3] == 0x31) & (c[5] == 0) & (c[6] == 0)
    idx, s, _, v = select(p, out, cand & (c[7] == 0) & (p.length >= RFT_BODY))
    kind = s[:, 4]
    sane = be32(s, 20) <= _RFT_MAX_BODY
    protected = sane & np.isin(kind, [16, 17, 18])
    handshake = sane & np.isin(kind, [1, 2, 3])
    codes = np.select([protected, handshake], [Label.RFT, Label.RFT_HS], 0).astype(np.int64)
    out.assign(idx, codes, np.where(protected, RFT_BODY, -1), v)


def tls(p: Packets, out: Labeller) -> None:
    """TLS record layer: content type 20..24, version 3.0..3.4, length within the RFC limit."""
    c = p.cols
    cand = (p.proto == _TCP) & ((c[0] - 20) <= 4) & (c[1] == 3) & (c[2] <= 4)
    idx, s, _, v = select(p, out, cand)
    if idx.size == 0:
        return
    ct = s[:, 0]
    rl = be16(s, 3)
    ok = (rl >= 1) & (rl <= _TLS_MAX_RECORD)
    hs = ok & (ct == 22)
    hs_type = s[:, 5]
    hs_len = (s[:, 6].astype(np.int64) << 16) | be16(s, 7)
    hs_fits = hs_len + 4 <= rl  # a cleartext handshake message's own length agrees with its record
    hello = hs & hs_fits & (s[:, 9] == 3)
    ch = hello & (hs_type == 1)
    sh = hello & (hs_type == 2)
    sh13 = sh & _supported_versions_13(s, v)
    legacy = s[:, 10]
    hs12 = hs & hs_fits & np.isin(hs_type, _TLS12_ONLY)
    # ChangeCipherSpec (1 byte) and what follows it in the same segment, at offset 6.
    ccs = ok & (ct == 20) & (rl == 1) & (s[:, 5] == 1)
    nxt = ccs & (v >= 11) & (s[:, 7] == 3)
    codes = np.select(
        [
            ch,
            sh13,
            sh & (legacy == 0),
            sh & (legacy == 1),
            sh & (legacy == 2),
            sh,
            hs12,
            hs,
            nxt & (s[:, 6] == 22),
            nxt & (s[:, 6] == 23),
            ccs,
            ok & (ct == 21),
            ok & (ct == 23),
            ok & (ct == 24),
        ],
        [
            Label.TLS_CH,
            Label.TLS_SH13,
            Label.TLS_SH_SSL3,
            Label.TLS_SH10,
            Label.TLS_SH11,
            Label.TLS_SH,
            Label.TLS_HS12,
            Label.TLS_HS,
            Label.TLS_CCS12,
            Label.TLS_APP13,
            Label.TLS_CCS,
            Label.TLS_ALERT,
            Label.TLS_APP,
            Label.TLS_HB,
        ],
        default=0,
    ).astype(np.int64)
    app = codes == Label.TLS_APP
    start = np.where(app, TLS_BODY, -1)
    stop = np.minimum(v, rl + 5)
    out.assign(idx, codes, start, stop)


def _supported_versions_13(s: U8, v: I64) -> Bool:
    """ServerHello rows whose supported_versions extension (0x002b) says 0x0304 inside the head.

    Visible only with an empty session id (compatibility mode echoes 32 bytes and pushes the
    extensions past 64 bytes); the first two extensions are looked at.
    """
    no_sid = s[:, 43] == 0
    found = np.zeros(s.shape[0], dtype=np.bool_)
    pos = np.full(s.shape[0], 49, dtype=np.int64)
    for _ in range(2):
        visible = no_sid & (pos + 6 <= v)
        ext_type = be16_at(s, pos)
        ext_len = be16_at(s, pos + 2)
        found |= visible & (ext_type == 0x002B) & (ext_len == 2) & (be16_at(s, pos + 4) == 0x0304)
        pos = pos + 4 + ext_len
    return found


def ssh(p: Packets, out: Labeller) -> None:
    """SSH identification string ``SSH-<proto>-``; the binary packets come in :func:`ssh_kex`."""
    c = p.cols
    cand = (p.proto == _TCP) & (c[0] == 0x53) & (c[1] == 0x53) & (c[2] == 0x48) & (c[3] == 0x2D)
    idx, s, _, _ = select(p, out, cand)
    ok = is_digit(s[:, 4]) & (s[:, 5] == 0x2E)
    out.assign(idx, np.where(ok, Label.SSH_BANNER, 0).astype(np.int64))


def _ssh_packet(s: U8, pos: I64, v: I64) -> tuple[Bool, I64, I64]:
    """A cleartext SSH binary packet at ``pos``: (valid, message code, packet_length)."""
    visible = pos + 6 <= v
    plen = (be16_at(s, pos) << 16) | be16_at(s, pos + 2)
    pad = at(s, pos + 4)
    code = at(s, pos + 5)
    # Before NEWKEYS: length a multiple of the 8-byte block, 4..255 bytes of padding, and a
    # transport or key-exchange message (RFC 4250: 1-6 transport, 20-49 key exchange).
    ok = (
        visible
        & (plen >= 12)
        & (plen <= 35000)
        & ((plen + 4) % 8 == 0)
        & (pad >= 4)
        & (pad + 1 < plen)
        & (((code >= 1) & (code <= 6)) | ((code >= 20) & (code <= 49)))
    )
    return ok, code, plen


def ssh_kex(p: Packets, out: Labeller) -> None:
    """Cleartext SSH binary packets of the key exchange (RFC 4253 §6), every one the segment holds.

    A segment may carry several packets (a server writes its key-exchange reply and NEWKEYS, often
    EXT_INFO too, in one go), so the walk goes packet by packet by ``packet_length`` while the next
    header is inside the head, and uses the segment's full length beyond it:

    - NEWKEYS (21) followed by more bytes in the same segment: those bytes are under the new keys
      (RFC 4253 §7.3: every message after NEWKEYS uses them) and do not parse as a cleartext packet
      where visible → :attr:`Label.SSH_NEWKEYS_DATA`;
    - a key-exchange reply (31: KEXDH/ECDH reply, 33: DH group-exchange reply) that ends inside the
      segment, followed by at least the 16 bytes of a NEWKEYS packet: after its reply a server sends
      NEWKEYS and nothing else in clear (§7.3; GEX_GROUP, also 31, is followed by nothing: the
      server waits for GEX_INIT) → :attr:`Label.SSH_NEWKEYS`, inferred from the lengths.
    """
    c = p.cols
    cand = (p.proto == _TCP) & (c[0] == 0) & (c[1] == 0) & (c[2] <= 0x88)
    idx, s, length, v = select(p, out, cand)
    if idx.size == 0:
        return
    k = idx.size
    ok, code, plen = _ssh_packet(s, np.zeros(k, dtype=np.int64), v)
    if not ok.any():
        return
    newkeys = ok & (code == 21)
    last_code = np.where(ok, code, 0)
    end = np.where(ok, plen + 4, length)  # where the last parsed packet ends
    walking = ok.copy()
    for _ in range(_SSH_WALK - 1):
        walking &= end < length
        nxt_ok, nxt_code, nxt_plen = _ssh_packet(s, end, v)
        step = walking & nxt_ok & ~newkeys  # after NEWKEYS nothing is cleartext: stop there
        newkeys |= step & (nxt_code == 21)
        last_code = np.where(step, nxt_code, last_code)
        end = np.where(step, end + 4 + nxt_plen, end)
        walking &= step
    follows = ok & (end < length)
    # Visible bytes after NEWKEYS that parse as another cleartext packet: not evidence of ciphertext.
    visible_clear = _ssh_packet(s, end, v)[0]
    data_after = newkeys & follows & ~visible_clear
    # Only where the bytes after the reply lie beyond the head: visible ones were walked above.
    reply_then_more = ok & ~newkeys & np.isin(last_code, [31, 33]) & (length - end >= _SSH_NEWKEYS_SIZE)
    reply_then_more &= end + 6 > v
    codes = np.select(
        [data_after, newkeys | reply_then_more, ok],
        [Label.SSH_NEWKEYS_DATA, Label.SSH_NEWKEYS, Label.SSH_KEX],
        0,
    )
    out.assign(idx, codes.astype(np.int64))


def http(p: Packets, out: Labeller) -> None:
    """HTTP/1.x request or status line, or the HTTP/2 cleartext connection preface."""
    c = p.cols
    key = (c[0].astype(np.int64) << 24) | (c[1].astype(np.int64) << 16) | (c[2].astype(np.int64) << 8) | c[3]
    firsts = [int.from_bytes((m + b" ")[:4], "big") for m in (*_HTTP_METHODS, b"HTTP", b"PRI ")]
    idx, s, _, v = select(p, out, (p.proto == _TCP) & np.isin(key, firsts))
    if idx.size == 0:
        return
    request = np.zeros(idx.size, dtype=np.bool_)
    for method in _HTTP_METHODS:
        n = len(method) + 1
        request |= prefix(s, 0, method + b" ") & (s[:, n] > 0x20) & (s[:, n] < 0x7F)
    status = prefix(s, 0, b"HTTP/1.") & is_digit(s[:, 7]) & (s[:, 8] == 0x20) & is_digit(s[:, 9])
    status &= is_digit(s[:, 10]) & is_digit(s[:, 11])
    preface = prefix(s, 0, b"PRI * HTTP/2.0\r\n")
    # The start of a request line (method, target) is printable; a status line's digits are proof enough.
    head_text = count_in(printable(s), np.zeros(idx.size, dtype=np.int64), np.minimum(v, 16)) == np.minimum(v, 16)
    codes = np.select([preface, request & head_text, status], [Label.HTTP2_PREFACE, Label.HTTP_REQ, Label.HTTP_RESP], 0)
    out.assign(idx, codes.astype(np.int64))


def gloo(p: Packets, out: Labeller) -> None:
    """gloo's TCP transport: a 48-byte preamble of six little-endian u64 before every operation.

    ``nbytes`` counts the preamble: exactly 48 for NOTIFY_SEND_READY/NOTIFY_RECV_READY (opcode 2/3),
    48 + ``length`` for SEND_BUFFER/SEND_UNBOUND_BUFFER (opcode 0/1), whose tensor data follows.
    """
    c = p.cols
    cand = (p.proto == _TCP) & (p.length >= GLOO_PREAMBLE) & (c[8] <= 3) & (c[6] == 0) & (c[7] == 0)
    for col in range(9, 16):
        cand &= c[col] == 0
    idx, s, _, v = select(p, out, cand)
    if idx.size == 0:
        return
    nbytes = le(s, 0, 6)
    opcode = s[:, 8]
    length = le(s, 32, 6)
    high_zero = (s[:, 38] == 0) & (s[:, 39] == 0)
    ctrl = (opcode >= 2) & (nbytes == GLOO_PREAMBLE) & high_zero
    data = (opcode <= 1) & (length > 0) & (nbytes == GLOO_PREAMBLE + length) & high_zero
    codes = np.select([ctrl, data], [Label.GLOO_CTRL, Label.GLOO_DATA], 0).astype(np.int64)
    out.assign(idx, codes, np.where(data, GLOO_PREAMBLE, -1), v)


def syslog(p: Packets, out: Labeller) -> None:
    """A syslog message: ``<PRI>`` with PRI 0..191, then mostly printable text (RFC 3164/5424)."""
    c = p.cols
    idx, s, _, v = select(p, out, (c[0] == 0x3C) & is_digit(c[1]) & ((p.proto == _UDP) | (p.proto == _TCP)))
    if idx.size == 0:
        return
    close = np.select([s[:, 2] == 0x3E, s[:, 3] == 0x3E, s[:, 4] == 0x3E], [2, 3, 4], default=-1)
    d1, d2, d3 = (s[:, i].astype(np.int64) - 0x30 for i in (1, 2, 3))
    digits = (close == 2) | ((close == 3) & is_digit(s[:, 2])) | ((close == 4) & is_digit(s[:, 2]) & is_digit(s[:, 3]))
    value = np.select([close == 2, close == 3], [d1, d1 * 10 + d2], default=d1 * 100 + d2 * 10 + d3)
    text = count_in(printable(s) | (s == 0), close + 1, v) * 10 >= (v - close - 1) * 9
    ok = (close > 0) & digits & (value <= 191) & (v > close + 1) & text
    out.assign(idx, np.where(ok, Label.SYSLOG, 0).astype(np.int64))


MDNS_PORT: Final = 5353


def dns(p: Packets, out: Labeller) -> None:
    """DNS message: sane header (one question, known opcode, Z bit clear) and a parsable question.

    Over TCP the message follows a 2-byte length prefix (RFC 1035 §4.2.2). On UDP 5353 a multicast DNS response
    carries no question (RFC 6762 §6): QR set, opcode 0, at least one answer, and its first record's name and
    class parse as a question's would.
    """
    c = p.cols
    tcp = (p.proto == _TCP) & (((c[0].astype(np.int64) << 8) | c[1]) <= p.length - 2)
    udp = p.proto == _UDP
    for base, rows in ((0, udp), (2, tcp)):
        hdr = [c[base + i] for i in range(6)]
        opcode = (hdr[2] >> 3) & 0x0F
        cand = rows & (hdr[4] == 0) & (hdr[5] == 1) & np.isin(opcode, [0, 1, 2, 4, 5]) & ((hdr[3] & 0x40) == 0)
        cand &= p.length >= base + 17
        idx, s, _, v = select(p, out, cand)
        if idx.size:
            ok = _dns_question(s, base + 12, v)
            out.assign(idx, np.where(ok, Label.DNS, 0).astype(np.int64))
    idx, cc = narrow(p, out, p.port(MDNS_PORT))
    mdns = (p.proto[idx] == _UDP) & (cc[4] == 0) & (cc[5] == 0) & ((cc[2] & 0xF8) == 0x80) & ((cc[3] & 0x40) == 0)
    idx, s, _, v = take(p, idx[mdns & ((cc[6] > 0) | (cc[7] > 0)) & (p.length[idx] >= 17)])
    if idx.size:
        out.assign(idx, np.where(_dns_question(s, 12, v), Label.DNS, 0).astype(np.int64))


def _dns_question(s: U8, first: int, v: I64) -> Bool:
    """Walk the question name's labels (all rows at once); accept a name cut off by the head's end."""
    k = s.shape[0]
    rows = np.arange(k)
    name_char = np.zeros((k, HEAD + 1), dtype=np.int64)
    name_char[:, 1:] = np.cumsum((s - 0x21) < 0x5E, axis=1)  # printable, no space
    pos = np.full(k, first, dtype=np.int64)
    ok = np.ones(k, dtype=np.bool_)
    done = np.zeros(k, dtype=np.bool_)
    labels = np.zeros(k, dtype=np.int64)
    for _ in range(HEAD // 2):
        active = ok & ~done
        if not active.any():
            break
        cut = active & (pos >= v)
        done |= cut
        ok &= ~cut | (labels >= 1)
        active &= ~cut
        n = at(s, pos)
        end = np.minimum(pos + 1 + n, v)
        chars = name_char[rows, np.clip(end, 0, HEAD)] - name_char[rows, np.clip(pos + 1, 0, HEAD)]
        label = active & (n >= 1) & (n <= 63)
        ok &= ~(label & (chars != end - pos - 1))
        terminal = active & ((n == 0) | (n >= 0xC0))
        ok &= ~(active & ~label & ~terminal)
        # With the terminating zero inside the head, QCLASS must be IN, CH, HS, NONE or ANY (mDNS sets 0x8000).
        qclass = be16_at(s, pos + 3) & 0x7FFF
        qclass_seen = terminal & (n == 0) & (pos + 5 <= v)
        ok &= ~(qclass_seen & ~np.isin(qclass, [1, 3, 4, 254, 255]))
        ok &= ~(terminal & (n == 0) & (labels == 0) & ~qclass_seen)
        labels += label
        pos = np.where(label, pos + 1 + n, pos)
        done |= terminal
    return np.asarray(ok & done)


def rows_matching_tags(s: U8, tags: tuple[bytes, ...]) -> Bool:
    """Rows containing any of the 4-byte ``tags`` at any offset of the head."""
    windows = np.lib.stride_tricks.sliding_window_view(s, 4, axis=1)
    found = np.zeros(s.shape[0], dtype=np.bool_)
    for tag in tags:
        found |= np.all(windows == np.frombuffer(tag, dtype=np.uint8), axis=2).any(axis=1)
    return found


__all__ = [
    "GLOO_PREAMBLE",
    "MDNS_PORT",
    "RFT_BODY",
    "TLS_BODY",
    "dns",
    "gloo",
    "http",
    "rft",
    "rows_matching_tags",
    "ssh",
    "ssh_kex",
    "syslog",
    "tls",
]
