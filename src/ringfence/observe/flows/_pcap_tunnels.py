"""Tunnels opened in bulk: the conversation a tunnel carries is the flow, the tunnel is described in ``outer``.

Decoded here: VXLAN (RFC 7348), VXLAN-GPE (UDP 4790; next protocol IPv4, IPv6, Ethernet, NSH or MPLS), Geneve
(RFC 8926), MPLS over UDP (RFC 7510), NSH (RFC 8300), GRE (RFC 2784 with the RFC 2890 key and sequence fields;
protocol types IPv4, IPv6, MPLS, transparent Ethernet bridging, NSH, PPP and WCCP redirection), enhanced GRE
(version 1, RFC 2637: PPTP's PPP), ERSPAN types I, II and III carried in GRE, whose mirrored frame is the flow,
Cisco MetaData in GRE (protocol type 0x8909: the inner ethertype, then version, length, option and the security
group tag), and L2TPv2 data messages (RFC 2661 §3.1, UDP 1701 at either end), whose PPP frame is the flow.

What becomes of the outer packet, per row:
- the payload decodes to an IP (or MACsec) flow: that flow, with the tunnel's addresses and id as its outer;
- the payload is cut short or invalid: the outer flow is kept and flagged ``cut`` (the reader warns);
- the payload is a frame that is not IP (ARP inside VXLAN, STP in an ERSPAN mirror): no flow, as that frame
  would make none seen on its own link; except inside plain GRE, whose control traffic (GRE keepalives, PPTP's
  LCP and MPPE-encrypted PPP) is the tunnel's own: there the GRE flow is kept;
  L2TP's control messages and its PPP negotiation (LCP, authentication) are likewise the tunnel's own;
- a GRE protocol type we do not decode, RFC 1701 source routing, or a fragmented tunnel packet: the outer flow
  is kept as it is (tunnels are not reassembled).
Each decoder loops over nothing per packet: it selects the rows carrying its tunnel, reads their headers in one
gather, and decodes every payload in one call back into the frame decoder.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import numpy as np

from ringfence.observe.flows._pcap_layout import (
    ETHERTYPE_NSH,
    I64,
    KIND_BAD,
    KIND_FLOW,
    KIND_SKIP,
    LT_ETHERNET,
    LT_IPV4,
    LT_IPV6,
    LT_MPLS,
    LT_NONE,
    LT_NSH,
    LT_PPP,
    LT_RAW,
    OUTER_ERSPAN,
    OUTER_GENEVE,
    OUTER_GRE,
    OUTER_L2TP,
    OUTER_MPLS,
    OUTER_MPLS_UDP,
    OUTER_NONE,
    OUTER_NSH,
    OUTER_PPTP,
    OUTER_VXLAN,
    OUTER_VXLAN_GPE,
    U8,
    Cols,
    Mask,
    any_of,
    u16,
    u32,
)
from ringfence.observe.flows._pcap_walk import gather
from ringfence.observe.samples import ETHERTYPE_IPV4, ETHERTYPE_IPV6

#: Decodes frames ``depth`` tunnels deep: (buf, pos, end, wire_end, linktype, depth) → columns.
Decoder = Callable[[U8, I64, I64, I64, I64, int], Cols]

UDP_VXLAN: Final = 4789
UDP_VXLAN_GPE: Final = 4790
UDP_GENEVE: Final = 6081
UDP_MPLS: Final = 6635
UDP_L2TP: Final = 1701

_GRE_PROTO: Final = 47
_ERSPAN_II: Final = 0x88BE  # also type I (no ERSPAN header) when the GRE sequence bit is clear
_ERSPAN_III: Final = 0x22EB
_WCCP: Final = 0x883E
_PPP: Final = 0x880B
_CMD: Final = 0x8909  # Cisco MetaData (TrustSec's security group tag)
#: GRE protocol types (ethertypes) whose payload starts a frame of a link type we decode.
_GRE_TYPES: Final = {ETHERTYPE_IPV4: LT_IPV4, ETHERTYPE_IPV6: LT_IPV6, 0x8847: LT_MPLS, 0x8848: LT_MPLS,
                     0x6558: LT_ETHERNET, ETHERTYPE_NSH: LT_NSH, _PPP: LT_PPP, _WCCP: LT_IPV4}  # fmt: skip
#: VXLAN-GPE next-protocol values (draft-ietf-nvo3-vxlan-gpe §3.1) and NSH's (RFC 8300 §2.2).
_GPE_NEXT: Final = {1: LT_IPV4, 2: LT_IPV6, 3: LT_ETHERNET, 4: LT_NSH, 5: LT_MPLS}
_NSH_NEXT: Final = {1: LT_IPV4, 2: LT_IPV6, 3: LT_ETHERNET, 5: LT_MPLS}


def _lookup(values: I64, table: dict[int, int]) -> I64:
    out = np.full(values.shape[0], LT_NONE, np.int64)
    for value, linktype in table.items():
        out[values == value] = linktype
    return out


def _adopt(buf: U8, end: I64, out: Cols, depth: int, dec: Decoder, idx: I64, inner: I64, lt: I64,
           kind: I64, ident: I64, keep_l2: Mask, addresses: bool = True) -> None:  # fmt: skip
    """Replace rows ``idx`` by what their tunnel carries (frames at ``inner`` of link types ``lt``).

    ``kind``/``ident``: the tunnel's outer kind and id (-1: none). ``keep_l2``: rows whose outer flow stays
    when the payload is a frame that is not IP. Rows whose header runs past the captured bytes are ``cut``.
    """
    tend = out.ip_end[idx]
    lim = np.minimum(end[idx], tend)
    cut = inner > lim
    empty = inner == tend  # a tunnel packet without payload (a PPTP acknowledgement, a GRE keepalive)
    take = ~cut & ~empty & (lt != LT_NONE)
    out.cut[idx[cut]] = True
    idx, inner, lt, kind, ident, keep_l2 = idx[take], inner[take], lt[take], kind[take], ident[take], keep_l2[take]
    if not idx.shape[0]:
        return
    sub = dec(buf, inner, np.minimum(end[idx], out.ip_end[idx]), out.ip_end[idx], lt, depth + 1)
    bad = sub.kind == KIND_BAD
    out.cut[idx[bad]] = True
    replace = (sub.kind == KIND_FLOW) | ((sub.kind == KIND_SKIP) & ~keep_l2)
    idx, kind, ident = idx[replace], kind[replace], ident[replace]
    sub = sub.take(np.flatnonzero(replace))
    # The nearest tunnel describes the flow (an MPLS stack inside it only lends its label).
    top = (sub.okind == OUTER_NONE) | (sub.okind == OUTER_MPLS)
    sub.okind = np.where(top, kind, sub.okind).astype(np.uint8)
    sub.ovni = np.where(top, ident, sub.ovni)
    if addresses:
        for name in ("src_hi", "src_lo", "dst_hi", "dst_lo"):
            setattr(sub, "o" + name, np.where(top, getattr(out, name)[idx], getattr(sub, "o" + name)))
    out.put(idx, sub)


def overlays(buf: U8, end: I64, out: Cols, depth: int, dec: Decoder) -> None:
    """VXLAN, VXLAN-GPE, Geneve and MPLS over UDP, by destination port."""
    idx = np.flatnonzero(any_of(out.dport, (UDP_VXLAN, UDP_VXLAN_GPE, UDP_GENEVE, UDP_MPLS)))
    if not idx.shape[0]:
        return
    idx = idx[(out.kind[idx] == KIND_FLOW) & (out.proto[idx] == 17) & (out.frag_id[idx] < 0)]
    p = out.pay_off[idx]
    w = gather(buf, p, 8)
    fits = p + 8 <= np.minimum(end[idx], out.ip_end[idx])
    dport = out.dport[idx]
    inner = np.full(idx.shape[0], -1, np.int64)
    lt = np.full(idx.shape[0], LT_NONE, np.int64)
    kind = np.zeros(idx.shape[0], np.int64)
    vni = u32(w, 4) >> 8
    vx = (dport == UDP_VXLAN) & ((w[:, 0] & 0x08) != 0)
    inner[vx], lt[vx], kind[vx] = p[vx] + 8, LT_ETHERNET, OUTER_VXLAN
    gpe = (dport == UDP_VXLAN_GPE) & ((w[:, 0] & 0x08) != 0)
    has_next = (w[:, 0] & 0x04) != 0  # P bit: the next-protocol field is set; else Ethernet, as in VXLAN
    next_lt = np.where(has_next, _lookup(w[:, 3].astype(np.int64), _GPE_NEXT), LT_ETHERNET)
    inner[gpe], lt[gpe], kind[gpe] = p[gpe] + 8, next_lt[gpe], OUTER_VXLAN_GPE
    ptype = u16(w, 2)
    gv = (dport == UDP_GENEVE) & ((w[:, 0] >> 6) == 0) & any_of(ptype, (0x6558, ETHERTYPE_IPV4, ETHERTYPE_IPV6))
    inner[gv] = p[gv] + 8 + (w[gv, 0] & 0x3F).astype(np.int64) * 4
    lt[gv] = _lookup(ptype[gv], {0x6558: LT_ETHERNET, ETHERTYPE_IPV4: LT_IPV4, ETHERTYPE_IPV6: LT_IPV6})
    kind[gv] = OUTER_GENEVE
    mp = dport == UDP_MPLS
    inner[mp], lt[mp], kind[mp] = p[mp], LT_MPLS, OUTER_MPLS_UDP
    out.cut[idx[~fits & (vx | gpe | gv)]] = True
    take = (inner >= 0) & (fits | mp)
    ident = np.where(kind == OUTER_MPLS_UDP, -1, vni)
    _adopt(buf, end, out, depth, dec, idx[take], inner[take], lt[take], kind[take], ident[take],
           np.zeros(int(take.sum()), np.bool_))  # fmt: skip


def l2tp(buf: U8, end: I64, out: Cols, depth: int, dec: Decoder) -> None:
    """L2TPv2 data messages (RFC 2661 §3.1) on UDP 1701, at either end (the LNS listens there; a LAC may send
    from any port): the PPP frame they carry is the flow. The header is the flags word (T clear for data; the
    reserved bits zero; version 2), the length if L is set (it must be the whole datagram's payload), tunnel
    and session ids, Ns/Nr if S is set, and an offset pad if O is set. Control messages (T set) and PPP
    frames that are not IP (LCP, CHAP, PAP) stay in the outer flow: they are the tunnel's own. No tunnel id
    is kept: each end's header carries the id its peer assigned, so the two directions would not meet."""
    idx = np.flatnonzero((out.dport == UDP_L2TP) | (out.sport == UDP_L2TP))
    if not idx.shape[0]:
        return
    idx = idx[(out.kind[idx] == KIND_FLOW) & (out.proto[idx] == 17) & (out.frag_id[idx] < 0)]
    p = out.pay_off[idx]
    w = gather(buf, p, 12)
    f0, f1 = w[:, 0].astype(np.int64), w[:, 1].astype(np.int64)
    has_len, has_seq, has_off = (f0 & 0x40) != 0, (f0 & 0x08) != 0, (f0 & 0x02) != 0
    data = ((f0 & 0xB4) == 0) & (f1 == 2)  # T clear, reserved bits clear; version 2, its reserved bits clear
    size = out.ip_end[idx] - p
    length_ok = ~has_len | (u16(w, 2) == size)
    at = p + 2 + 2 * has_len + 4 + 4 * has_seq
    pad = u16(gather(buf, at, 2), 0)
    inner = at + np.where(has_off, 2 + pad, 0)
    lim = np.minimum(end[idx], out.ip_end[idx])
    fits = (at + 2 * has_off <= lim) & (inner <= out.ip_end[idx])
    out.cut[idx[data & length_ok & ~fits]] = True
    take = data & length_ok & fits
    n = int(take.sum())
    _adopt(buf, end, out, depth, dec, idx[take], inner[take], np.full(n, LT_PPP, np.int64),
           np.full(n, OUTER_L2TP, np.int64), np.full(n, -1, np.int64), np.ones(n, np.bool_))  # fmt: skip


def gre(buf: U8, end: I64, out: Cols, depth: int, dec: Decoder) -> None:
    """GRE (version 0 and the enhanced version 1) and the ERSPAN mirrors it carries."""
    idx = np.flatnonzero(out.proto == _GRE_PROTO)
    if not idx.shape[0]:
        return
    idx = idx[(out.kind[idx] == KIND_FLOW) & (out.frag_id[idx] < 0) & ~out.trunc[idx]]
    if not idx.shape[0]:
        return
    p = out.pay_off[idx]
    w = gather(buf, p, 4)
    f0, f1 = w[:, 0].astype(np.int64), w[:, 1].astype(np.int64)
    ptype = u16(w, 2)
    csum = (f0 & 0xC0) != 0  # checksum or routing present: a 4-byte checksum/offset word
    routed = (f0 & 0x40) != 0
    keyed = (f0 & 0x20) != 0
    seq = (f0 & 0x10) != 0
    ver = f1 & 7
    v1 = (ver == 1) & keyed & ~csum & (ptype == _PPP)
    valid = ((ver == 0) & ~routed) | v1
    hdr = 4 + 4 * csum + 4 * keyed + 4 * seq + 4 * (v1 & ((f1 & 0x80) != 0))
    key = u32(gather(buf, p + 4 + 4 * csum, 4), 0)
    inner = p + hdr
    lt = _lookup(ptype, _GRE_TYPES)
    kind = np.where(v1, OUTER_PPTP, OUTER_GRE)
    ident = np.where(v1, key & 0xFFFF, np.where(keyed, key, -1))  # PPTP: the call id (the rest is a length)
    keep = np.ones(idx.shape[0], np.bool_)
    wccp = ptype == _WCCP  # WCCPv2 puts a 4-byte redirect header before the IP packet; v1 does not
    first = gather(buf, inner, 1)[:, 0]
    inner += 4 * (wccp & ((first >> 4) != 4))
    cmd = ptype == _CMD
    if cmd.any():  # the ethertype, version 1, length 1, option type 1 (the SGT), the SGT: 8 bytes
        m = gather(buf, inner, 8)
        ok = (m[:, 2] == 1) & (m[:, 3] == 1) & ((u16(m, 4) & 0x1FFF) == 1)
        lt = np.where(cmd, np.where(ok, _lookup(u16(m, 0), _GRE_TYPES), LT_NONE), lt)
        inner = inner + 8 * cmd
    e2 = ptype == _ERSPAN_II
    e3 = ptype == _ERSPAN_III
    if (e2 | e3).any():
        h = gather(buf, inner, 12)
        hver = (h[:, 0] >> 4).astype(np.int64)
        session = u16(h, 2) & 0x3FF
        t2 = e2 & seq  # type II has a sequence number and an 8-byte header; type I neither
        ok2 = t2 & (hver == 1)
        ft = (h[:, 10] >> 2) & 0x1F
        ok3 = e3 & (hver == 2) & ((ft == 0) | (ft == 2))
        lt = np.where(e2 & ~t2, LT_ETHERNET, lt)
        lt = np.where(ok2, LT_ETHERNET, np.where(ok3, np.where(ft == 0, LT_ETHERNET, LT_RAW), lt))
        lt = np.where((t2 & ~ok2) | (e3 & ~ok3), LT_NONE, lt)
        hlen = np.where(t2, 8, np.where(e3, 12 + 8 * (h[:, 11] & 1), 0))
        header_cut = (e2 | e3) & (inner + np.where(t2 | e3, 12, 0) > np.minimum(end[idx], out.ip_end[idx]))
        out.cut[idx[header_cut & valid]] = True
        valid &= ~header_cut
        inner = inner + hlen
        kind = np.where(e2 | e3, OUTER_ERSPAN, kind)
        ident = np.where(e2 & ~t2, -1, np.where(e2 | e3, session, ident))
        keep = ~(e2 | e3)  # a mirrored frame that is not IP makes no flow, as it would not on its own link
    out.cut[idx[routed & (ver == 0)]] = True  # RFC 1701 source routing: not followed
    _adopt(buf, end, out, depth, dec, idx[valid], inner[valid], lt[valid], kind[valid], ident[valid], keep[valid])


def nsh(buf: U8, idx: I64, l3: I64, end: I64, wire_end: I64, out: Cols, depth: int, dec: Decoder) -> None:
    """Replace Network Service Header packets (RFC 8300) by the flow they carry, noting the service path.

    The base header's length field counts 4-byte words of the whole NSH (base, service path, context headers);
    the next-protocol byte says what follows. Version must be 0. Anything else is reported as invalid NSH.
    """
    at = l3[idx]
    w = gather(buf, at, 8)
    words = (u16(w, 0) & 0x3F).astype(np.int64)
    lt = _lookup(w[:, 3].astype(np.int64), _NSH_NEXT)
    inner = at + words * 4
    ok = (at + 8 <= end[idx]) & ((w[:, 0] >> 6) == 0) & (words >= 2) & (inner <= end[idx]) & (lt != LT_NONE)
    bad = idx[~ok]
    out.kind[bad] = KIND_BAD
    out.why[bad] = 8
    idx, inner, lt, w = idx[ok], inner[ok], lt[ok], w[ok]
    if not idx.shape[0]:
        return
    sub = dec(buf, inner, end[idx], wire_end[idx], lt, depth + 1)
    top = (sub.okind == OUTER_NONE) | (sub.okind == OUTER_MPLS)
    path = u32(w, 4)  # service path id (24 bits), then service index (8 bits)
    sub.okind = np.where(top, OUTER_NSH, sub.okind).astype(np.uint8)
    sub.ovni = np.where(top, path, sub.ovni)
    out.put(idx, sub)


__all__ = [
    "UDP_GENEVE",
    "UDP_L2TP",
    "UDP_MPLS",
    "UDP_VXLAN",
    "UDP_VXLAN_GPE",
    "Decoder",
    "gre",
    "l2tp",
    "nsh",
    "overlays",
]
