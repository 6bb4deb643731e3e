"""Recognisers for a tunnel's own packets: what a GRE or L2TP flow still holds once the reader has made the
conversations it carries into flows of their own (``observe.flows._pcap_tunnels``).

That is GRE keepalives and protocol types the reader does not decode; in PPTP's enhanced GRE (RFC 2637 §4.1)
acknowledgements, PPP's negotiation (LCP, PAP, CHAP, EAP, CCP, IPCP: RFC 1661 §5) and MPPE-encrypted PPP (RFC
3078); in L2TPv2 (RFC 2661 §3.1, UDP 1701) control messages and the PPP negotiation of its sessions. None of
these tunnels encrypts: what they carry is judged as flows of its own, and these packets say who negotiated what.
"""

from __future__ import annotations

from typing import Final

import numpy as np

from ringfence.observe.recognise._bytes import I64, U8, Labeller, Packets, at, be16, be16_at, select
from ringfence.observe.recognise.labels import Label

_GRE: Final = 47
_UDP: Final = 17
L2TP_PORT: Final = 1701
_PPP_IN_GRE: Final = 0x880B
#: PPP protocols of the negotiation that share the code/identifier/length packet format, with the highest code
#: each defines: LCP (RFC 1661, 1570), PAP (1334), CHAP (1994), EAP (3748), IPCP (1332), IPV6CP (5072),
#: CCP (1962: Reset-Request/Ack are 14 and 15), ECP (1968), MPLSCP (3032).
_PPP_CODES: Final = {0xC021: 13, 0xC023: 3, 0xC223: 4, 0xC227: 4, 0x8021: 7, 0x8057: 7, 0x80FD: 15, 0x8053: 15,
                     0x8281: 7}  # fmt: skip
_PAP: Final = 0xC023
_MPPE: Final = 0x00FD  # PPP compressed datagram: MPPE/MPPC (RFC 3078 §3)
_MPPE_HEADER: Final = 2


def _ppp(s: U8, start: I64, size: I64) -> I64:
    """Label PPP frames at per-row ``start`` that end ``size`` bytes later: the optional ``ff 03`` address and
    control, the protocol (one byte where compressed, RFC 1661 §6.5), then a negotiation packet whose length is
    exactly what is left, or an MPPE header with its encrypted bit (D) set. 0 where neither."""
    ac = (at(s, start) == 0xFF) & (at(s, start + 1) == 0x03)
    q = start + 2 * ac
    short = (at(s, q) & 1) == 1
    proto = np.where(short, at(s, q), be16_at(s, q))
    q = q + np.where(short, 1, 2)
    left = start + size - q
    code = at(s, q)
    top = np.zeros(proto.shape[0], np.int64)
    for number, highest in _PPP_CODES.items():
        top[proto == number] = highest
    control = (top > 0) & (code >= 1) & (code <= top) & (be16_at(s, q + 2) == left) & (left >= 4)
    mppe = (proto == _MPPE) & ((at(s, q) & 0x10) != 0) & (left > _MPPE_HEADER)
    codes = np.select([control & (proto == _PAP), control, mppe], [Label.PPP_PAP, Label.PPP_CONTROL, Label.PPP_MPPE])
    return np.asarray(codes, np.int64)


def gre(p: Packets, out: Labeller) -> None:
    """GRE packets left in the GRE flow (IP protocol 47). Version 0 (RFC 2784, RFC 2890 key and sequence): the
    reserved bits zero, no RFC 1701 routing; nothing after the header with protocol type 0 is a keepalive's
    reply, any other payload is of a type not decoded. Version 1 (PPTP, RFC 2637 §4.1): key bit set, checksum,
    routing and strict-route bits clear, protocol type 0x880B and a payload length that is exactly what follows
    the header (zero: an acknowledgement); the payload is PPP."""
    c = p.cols
    cand = (p.proto == _GRE) & (p.length >= 4) & ((c[0] & 0x4F) == 0) & ((c[1] & 0x7E) == 0)
    idx, s, length, _ = select(p, out, cand)
    if idx.size == 0:
        return
    f0, f1 = s[:, 0].astype(np.int64), s[:, 1].astype(np.int64)
    ptype = be16(s, 2)
    csum, keyed, seq, acked = (f0 & 0x80) != 0, (f0 & 0x20) != 0, (f0 & 0x10) != 0, (f1 & 0x80) != 0
    v0 = f1 == 0
    hdr0 = 4 + 4 * csum + 4 * keyed + 4 * seq
    keepalive = v0 & (ptype == 0) & (length == hdr0)
    opaque = v0 & (length >= hdr0) & ~keepalive
    v1 = ((f1 & 0x7F) == 1) & keyed & ~csum & (ptype == _PPP_IN_GRE)
    hdr1 = 8 + 4 * seq + 4 * acked
    payload = be16(s, 4)
    v1 &= (length == hdr1 + payload) & (seq | (payload == 0))
    ack = v1 & (payload == 0) & acked
    ppp = np.where(v1 & (payload > 0), _ppp(s, hdr1, payload), 0)
    codes = np.select(
        [keepalive, opaque, ack, ppp > 0], [Label.GRE_KEEPALIVE, Label.GRE_OPAQUE, Label.PPTP_ACK, ppp], 0
    )
    out.assign(idx, np.asarray(codes, np.int64))


def l2tp(p: Packets, out: Labeller) -> None:
    """L2TPv2 on UDP 1701 (RFC 2661 §3.1). A control message: T, L and S set, O and P clear, version 2, a
    length that is the whole datagram, and either nothing after the 12-byte header (a zero-length-body
    acknowledgement) or a first AVP that is the Message Type (vendor 0, attribute 0, 8 bytes, §4.4.1). A data
    message left in the outer flow carries PPP that is not IP: its negotiation (the reader decoded the rest)."""
    c = p.cols
    flags = c[0] & 0xB4  # T and the reserved bits
    cand = (p.proto == _UDP) & p.port(L2TP_PORT) & (c[1] == 2) & ((flags == 0x80) | (flags == 0))
    idx, s, length, _ = select(p, out, cand)
    if idx.size == 0:
        return
    f0 = s[:, 0].astype(np.int64)
    zlb = length == 12
    avp = (length >= 20) & ((be16(s, 12) & 0x3FF) == 8) & (be16(s, 14) == 0) & (be16(s, 16) == 0)
    control = (f0 == 0xC8) & (be16(s, 2) == length) & (zlb | avp)
    has_len, has_seq, has_off = (f0 & 0x40) != 0, (f0 & 0x08) != 0, (f0 & 0x02) != 0
    data = ((f0 & 0xB4) == 0) & (~has_len | (be16(s, 2) == length)) & ~has_off
    start = 2 + 2 * has_len + 4 + 4 * has_seq
    ppp = np.where(data, _ppp(s, start, length - start), 0)
    codes = np.select([control, ppp > 0], [Label.L2TP_CONTROL, ppp], 0)
    out.assign(idx, np.asarray(codes, np.int64))


__all__ = ["L2TP_PORT", "gre", "l2tp"]
