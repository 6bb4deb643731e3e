"""Vectorised packet decoding: link layer → IP → transport, for a batch of packets at once.

Every layer gathers a fixed-width window of bytes per packet at that layer's (per-packet) offset in one
memcpy-like gather, then reads fields from fixed columns of that window. Uncommon shapes (VLAN stacks, MPLS,
IPv6 extension headers, tunnels) loop over just the packets that have them; tunnels are decoded in
:mod:`._pcap_tunnels`, which calls back into :func:`decode_at` for what they carry. Every field read is checked
against the packet's captured length, so a hostile length never reads another packet's bytes as its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np

from ringfence.observe.flows._pcap_layout import (
    BAD_REASONS,
    ETHERTYPE_NSH,
    I64,
    KIND_BAD,
    KIND_FLOW,
    KIND_SKIP,
    LT_C_HDLC,
    LT_ERF,
    LT_ETHERNET,
    LT_INFINIBAND,
    LT_IPOIB,
    LT_IPV4,
    LT_IPV6,
    LT_LOOP,
    LT_MPLS,
    LT_NSH,
    LT_NULL,
    LT_PPP,
    LT_PPP_ETHER,
    LT_PPP_HDLC,
    LT_PPP_WITH_DIR,
    LT_RAW,
    LT_RAW_12,
    LT_RAW_14,
    LT_SLL,
    LT_SLL2,
    OUTER_MPLS,
    OUTER_NAMES,
    OUTER_NONE,
    OUTER_NSH,
    U8,
    Cols,
    Mask,
)
from ringfence.observe.flows._pcap_layout import any_of as _any_of
from ringfence.observe.flows._pcap_layout import u16 as _u16
from ringfence.observe.flows._pcap_layout import u32 as _u32
from ringfence.observe.flows._pcap_layout import u64 as _u64
from ringfence.observe.flows._pcap_tunnels import gre, l2tp, nsh, overlays
from ringfence.observe.flows._pcap_walk import gather
from ringfence.observe.samples import ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_MACSEC

_VLAN_TPIDS: Final = (0x8100, 0x88A8, 0x9100)
_MPLS_TYPES: Final = (0x8847, 0x8848)
_PPPOE_SESSION: Final = 0x8864
_CMD: Final = 0x8909  # Cisco MetaData
#: PPP protocol numbers (RFC 1661 and the IANA PPP DLL registry) of the network layers we decode, as ethertypes.
#: Like tcpdump, ethertype values in the protocol field are accepted too (some stacks send them).
_PPP_PROTOCOLS: Final = {0x0021: ETHERTYPE_IPV4, 0x0057: ETHERTYPE_IPV6, 0x0281: 0x8847, 0x0283: 0x8848,
                         ETHERTYPE_IPV4: ETHERTYPE_IPV4, ETHERTYPE_IPV6: ETHERTYPE_IPV6, 0x8847: 0x8847,
                         0x8848: 0x8848}  # fmt: skip
#: IPv6 extension headers skipped to reach the transport header; at most _MAX_EXT of them are followed.
_IPV6_EXT: Final = (0, 43, 44, 60, 135, 139, 140)
_MAX_EXT: Final = 8
_PORTED: Final = (6, 17, 33, 132, 136)  # tcp, udp, dccp, sctp, udp-lite
#: The fields :func:`decode_at` computes for every packet of a batch (so they are not zeroed first).
_ASSIGNED: Final = frozenset(
    ("etype", "vlan", "olabel", "okind", "src_lo", "dst_lo", "proto", "kind", "why", "length", "ip_end", "trunc",
     "sport", "dport", "syn", "pay_off", "wire_pay", "pay_len", "pay_cap")
)  # fmt: skip
_FRAME_WINDOW: Final = 72  # 14 Ethernet + 40 IPv6 + 14 TCP up to its flags, rounded up
#: Tunnels inside tunnels are followed this deep (bounds the work a hostile nesting can ask for).
MAX_DEPTH: Final = 3


@dataclass(frozen=True)
class _Link:
    etype: I64  # 0 where unknown
    l3: I64
    vlan: I64
    label: I64  # top MPLS label, -1 if none
    bad: I64  # reason code, 0 if fine


def _shim(buf: U8, etype: I64, l3: I64, end: I64, vlan: I64, label: I64, bad: I64) -> None:
    """Strip 802.1Q/802.1ad tags, Cisco MetaData (TrustSec's security group tag: version 1, length 1, option
    type 1, the tag, then the ethertype: 8 bytes) and MPLS label stacks in place (loops over only the tagged
    packets)."""
    for _ in range(4):
        idx = np.flatnonzero(_any_of(etype, _VLAN_TPIDS + (_CMD,)))
        if not idx.shape[0]:
            break
        cmd = etype[idx] == _CMD
        size = np.where(cmd, 8, 4)
        w = gather(buf, l3[idx], 8)
        ok = (l3[idx] + size <= end[idx]) & (~cmd | ((w[:, 0] == 1) & (w[:, 1] == 1) & ((_u16(w, 2) & 0x1FFF) == 1)))
        bad[idx[~ok]] = 6
        etype[idx[~ok]] = 0
        idx, cmd, size, w = idx[ok], cmd[ok], size[ok], w[ok]
        vlan[idx] = np.where(cmd, vlan[idx], _u16(w, 0) & 0xFFF)
        etype[idx] = np.where(cmd, _u16(w, 6), _u16(w, 2))
        l3[idx] += size
    idx = np.flatnonzero(etype == _PPPOE_SESSION)
    if idx.shape[0]:  # RFC 2516 session stage: 6-byte PPPoE header (version/type 0x11, code 0), PPP protocol
        w = gather(buf, l3[idx], 8)
        ok = (l3[idx] + 8 <= end[idx]) & (w[:, 0] == 0x11) & (w[:, 1] == 0)
        bad[idx[~ok]] = 8
        etype[idx] = np.where(ok, _ppp_etype(_u16(w, 6)), 0)
        l3[idx] += 8
    idx = np.flatnonzero(_any_of(etype, _MPLS_TYPES))
    if idx.shape[0]:
        _mpls(buf, idx, etype, l3, end, label, bad)


def _mpls(buf: U8, idx: I64, etype: I64, l3: I64, end: I64, label: I64, bad: I64) -> None:
    """Pop the label stack of packets ``idx``; the payload is IP if its first nibble says so, else not IP."""
    etype[idx] = -1  # "in the stack"
    for depth in range(8):
        live = idx[etype[idx] == -1]
        if not live.shape[0]:
            break
        ok = l3[live] + 4 <= end[live]
        bad[live[~ok]] = 6
        etype[live[~ok]] = 0
        live = live[ok]
        w = gather(buf, l3[live], 4)
        if depth == 0:
            label[live] = _u32(w, 0) >> 12
        l3[live] += 4
        bottom = live[(w[:, 2] & 1) == 1]
        nib = gather(buf, l3[bottom], 1)[:, 0] >> 4
        ip_ok = l3[bottom] < end[bottom]
        etype[bottom] = np.where(
            ip_ok & (nib == 4), ETHERTYPE_IPV4, np.where(ip_ok & (nib == 6), ETHERTYPE_IPV6, 0x8847)
        )
    etype[idx[etype[idx] == -1]] = 0x8847  # deeper than 8 labels: leave it as MPLS, not IP


def _window(buf: U8, w0: U8, pos: I64, rel: I64, width: int) -> U8:
    """``width`` bytes at ``pos + rel``: a view of the frame-start window when every row's ``rel`` is the same."""
    if rel.shape[0]:
        lo = int(rel.min())
        if lo >= 0 and lo + width <= w0.shape[1] and int(rel.max()) == lo:
            return w0[:, lo : lo + width]
    return gather(buf, pos + rel, width)


def _ppp_etype(proto: I64) -> I64:
    """PPP protocol numbers → ethertypes of the network layers we decode (0: not one of them, e.g. LCP)."""
    out = np.zeros(proto.shape[0], np.int64)
    for number, etype in _PPP_PROTOCOLS.items():
        out[proto == number] = etype
    return out


def _col(w: U8, col: I64) -> I64:
    """Per-row byte ``w[i, col[i]]`` (columns inside the window)."""
    return np.take_along_axis(w, np.clip(col, 0, w.shape[1] - 1)[:, None], axis=1)[:, 0].astype(np.int64)


def _ppp(w: U8, base: int) -> tuple[I64, I64]:
    """PPP as in LINKTYPE_PPP (RFC 1661/1662): optional ``ff 03`` address/control, then a protocol field of two
    bytes, or one when compressed (PFC: an odd first byte). Returns (ethertype, header length)."""
    n = w.shape[0]
    acf = (w[:, base] == 0xFF) & (w[:, base + 1] == 0x03)
    off = np.full(n, base, np.int64) + 2 * acf
    b0 = _col(w, off)
    pfc = (b0 & 1) == 1
    proto = np.where(pfc, b0, (b0 << 8) | _col(w, off + 1))
    return _ppp_etype(proto), off + np.where(pfc, 1, 2)


def _ppp_hdlc(buf: U8, w: U8, p: I64, end: I64) -> tuple[I64, I64, I64]:
    """LINKTYPE_PPP_HDLC: PPP in HDLC-like framing (``ff``, control, protocol) or Cisco HDLC (``0f``/``8f``).

    A protocol field starting with the HDLC flag 0x7e means the frame still carries its HDLC framing; as tcpdump
    does, the bytes after the flag are read as a PPP frame (one-byte IP/IPv6 protocol, ``ff 03`` and a protocol, or a
    bare protocol). Byte-stuffed frames (0x7d escapes) are not un-escaped: they are reported, not guessed at.
    Returns (ethertype, header length, reason code or 0).
    """
    n = w.shape[0]
    bad = np.zeros(n, np.int64)
    cisco = (w[:, 0] == 0x0F) | (w[:, 0] == 0x8F)
    et, hdr = _ppp(w, 0)
    hdlc = w[:, 0] == 0xFF
    proto = _u16(w, 2)
    et = np.where(hdlc, _ppp_etype(proto), et)
    hdr = np.where(hdlc, 4, hdr)
    framed = hdlc & ((proto >> 8) == 0x7E)
    if framed.any():
        s0, s1 = w[:, 3].astype(np.int64), w[:, 4].astype(np.int64)
        one = (s0 == 0x21) | (s0 == 0x57)
        ppp_hdr = (s0 == 0xFF) & (s1 == 0x03)
        inner = np.where(one, s0, np.where(ppp_hdr, _u16(w, 5), (s0 << 8) | s1))
        et = np.where(framed, _ppp_etype(inner), et)
        hdr = np.where(framed, np.where(one, 4, np.where(ppp_hdr, 7, 5)), hdr)
        for i in np.flatnonzero(framed).tolist():  # only the rare still-framed packets
            if (buf[int(p[i]) : int(end[i])] == 0x7D).any():
                bad[i], et[i] = 7, 0
    et = np.where(cisco, _u16(w, 2), et)
    hdr = np.where(cisco, 4, hdr)
    return et, hdr, bad


def _link(buf: U8, w0: U8, pos: I64, end: I64, lt: I64) -> _Link:
    n = pos.shape[0]
    etype = np.zeros(n, np.int64)
    l3 = pos.copy()
    bad = np.zeros(n, np.int64)
    kinds = [int(lt[0])] if n and (lt == lt[0]).all() else np.unique(lt).tolist()
    for linktype in kinds:
        sel: slice | I64 = slice(None) if len(kinds) == 1 else np.flatnonzero(lt == linktype)
        p = pos[sel]
        w = w0[sel]
        avail = end[sel] - p
        hdr: int | I64
        if linktype == LT_ETHERNET:
            et, hdr = _u16(w, 12), 14
        elif linktype == LT_SLL:
            et, hdr = _u16(w, 14), 16
        elif linktype == LT_SLL2:
            et, hdr = _u16(w, 0), 20
        elif linktype == LT_IPOIB:
            et, hdr = _u16(w, 40), 44
        elif linktype in (LT_PPP, LT_PPP_WITH_DIR):
            et, hdr = _ppp(w, 1 if linktype == LT_PPP_WITH_DIR else 0)
        elif linktype == LT_PPP_HDLC:
            et, hdr, why = _ppp_hdlc(buf, w, p, end[sel])
            bad[sel] = why
        elif linktype == LT_C_HDLC:
            et, hdr = _u16(w, 2), 4
        elif linktype == LT_PPP_ETHER:  # PPPoE header, then the PPP protocol
            et, hdr = _ppp_etype(_u16(w, 6)), 8
        elif linktype in (LT_NULL, LT_LOOP):
            af = _u32(w, 0)
            if linktype == LT_NULL:  # host byte order of the capturing machine: try both
                af = np.where(af > 0xFFFF, af.astype(np.uint32).byteswap().astype(np.int64), af)
            et = np.where(af == 2, ETHERTYPE_IPV4, np.where(_any_of(af, (10, 24, 28, 30)), ETHERTYPE_IPV6, 0))
            hdr = 4
        elif linktype in (LT_RAW, LT_RAW_12, LT_RAW_14, LT_IPV4, LT_IPV6, LT_MPLS, LT_NSH):
            fixed = {LT_IPV4: ETHERTYPE_IPV4, LT_IPV6: ETHERTYPE_IPV6, LT_MPLS: 0x8847, LT_NSH: ETHERTYPE_NSH}.get(
                linktype
            )
            if fixed is not None:
                et = np.full(p.shape[0], fixed, np.int64)
            else:
                nib = w[:, 0] >> 4
                et = np.where(nib == 4, ETHERTYPE_IPV4, np.where(nib == 6, ETHERTYPE_IPV6, 0))
            hdr = 0
        elif linktype in (LT_INFINIBAND, LT_ERF):
            # Not IP: no flow (and not undecodable); their BTH/RETH are gathered by ._pcap_rdma. ERF records of
            # any other type than InfiniBand (21) are not decoded at all, and say so.
            et, hdr = np.zeros(p.shape[0], np.int64), 0
            if linktype == LT_ERF:
                bad[sel] = np.where((w[:, 8] & 0x7F) == 21, 0, 5)
        else:
            bad[sel] = 5
            continue
        short = avail < np.maximum(hdr, 1)
        etype[sel] = np.where(short, 0, et)
        bad[sel] = np.where(short, 1, bad[sel])
        l3[sel] = p + hdr
    vlan = np.full(n, -1, np.int64)
    label = np.full(n, -1, np.int64)
    if _any_of(etype, _VLAN_TPIDS + _MPLS_TYPES + (_PPPOE_SESSION, _CMD)).any():
        _shim(buf, etype, l3, end, vlan, label, bad)
    return _Link(etype=etype, l3=l3, vlan=vlan, label=label, bad=bad)


def decode(buf: U8, pos: I64, end: I64, wire_end: I64, lt: I64) -> Cols:
    """Decode the packets whose link-layer frames start at ``pos`` and whose captured bytes end at ``end``.

    ``wire_end`` is where the frame would end had nothing been cut (for IP lengths of 0, as TSO/BIG TCP
    captures write). ``lt`` is each packet's link type.
    """
    return decode_at(buf, pos, end, wire_end, lt, 0)


def decode_at(buf: U8, pos: I64, end: I64, wire_end: I64, lt: I64, depth: int) -> Cols:
    """:func:`decode` for frames found ``depth`` tunnels deep (tunnels deeper than MAX_DEPTH are not opened)."""
    n = pos.shape[0]
    out = Cols(n, unset=_ASSIGNED)
    # One gather at the frame start covers Ethernet, an IPv6 header and TCP up to its flags; deeper or
    # shifted headers (tags, options, extension headers) are gathered again where they are.
    w0 = gather(buf, pos, _FRAME_WINDOW)
    link = _link(buf, w0, pos, end, lt)
    etype, l3 = link.etype, link.l3
    out.etype, out.vlan, out.olabel = etype, link.vlan, link.label
    out.okind = np.where(link.label >= 0, OUTER_MPLS, OUTER_NONE).astype(np.uint8)
    avail = end - l3
    w = _window(buf, w0, pos, l3 - pos, 40)
    ver = w[:, 0] >> 4
    is4 = etype == ETHERTYPE_IPV4
    is6 = etype == ETHERTYPE_IPV6
    # IPv4, computed for every packet and kept where the frame is IPv4 (cheaper than subsetting).
    ihl = (w[:, 0] & 15).astype(np.int64) * 4
    ok4 = is4 & (avail >= 20) & (ver == 4) & (ihl >= 20)
    total = _u16(w, 2)
    length = np.where(total == 0, wire_end - l3, total)  # 0: segmentation offload / BIG TCP
    short4 = ok4 & (length < ihl)
    ok4 &= ~short4
    bad4 = is4 & ~ok4
    ok6 = is6 & (avail >= 40) & (ver == 6)
    bad6 = is6 & ~ok6
    flow = ok4 | ok6
    mapped = np.uint64(0xFFFF << 32)
    out.src_lo = _u32(w, 12).astype(np.uint64) | mapped
    out.dst_lo = _u32(w, 16).astype(np.uint64) | mapped
    out.proto = w[:, 9].copy()
    flags = _u16(w, 6)
    first = (flags & 0x1FFF) == 0
    is_frag = ok4 & ((flags & 0x3FFF) != 0)  # more fragments, or an offset
    if is_frag.any():  # rare: the defaults (not a fragment) stand for every other packet
        out.frag_id = np.where(is_frag, _u16(w, 4), -1)
        out.frag_off = np.where(is_frag, (flags & 0x1FFF) * 8, 0)
        out.frag_more = is_frag & ((flags & 0x2000) != 0)
        out.frag_len = np.where(is_frag, length - ihl, 0)
    at = l3 + ihl  # where the transport header (or a later fragment's data) starts
    readable = at <= end
    deep = np.zeros(n, np.bool_)
    if ok6.any():
        plen = _u16(w, 4)
        length = np.where(ok6, np.where(plen == 0, wire_end - l3, plen + 40), length)
        i6 = np.flatnonzero(ok6)
        out.src_hi[i6], out.src_lo[i6] = _u64(w[i6], 8), _u64(w[i6], 16)
        out.dst_hi[i6], out.dst_lo[i6] = _u64(w[i6], 24), _u64(w[i6], 32)
        x = _ipv6_ext(buf, w[i6, 6].astype(np.int64), l3[i6] + 40, end[i6])
        out.proto[i6] = x.nh
        at[i6], first[i6], readable[i6], deep[i6] = x.at, x.first, x.readable, x.deep
        f6 = i6[x.frag_id >= 0]
        fx = x.frag_id >= 0
        out.frag_id[f6], out.frag_off[f6], out.frag_more[f6] = x.frag_id[fx], x.frag_off[fx], x.frag_more[fx]
        # From the declared payload length: a fragment never takes the offload reading of a length of 0.
        out.frag_len[f6] = l3[f6] + 40 + plen[f6] - x.frag_start[fx]
    flow &= ~deep
    out.kind = np.where(flow, KIND_FLOW, np.where((link.bad > 0) | bad4 | bad6 | deep, KIND_BAD, KIND_SKIP))
    out.kind = out.kind.astype(np.uint8)
    out.why = np.where(bad4, np.where(short4, 3, 2), np.where(bad6, 4, np.where(deep, 9, link.bad))).astype(np.uint8)
    out.length = np.where(flow, length, 0)
    ip_end = l3 + out.length
    out.ip_end = ip_end
    # Non-first fragments carry no transport header: their payload starts right after the IP header(s).
    has_l4 = flow & first & readable
    out.trunc = flow & first & ~readable
    t = _window(buf, w0, pos, at - pos, 14)
    proto = out.proto.astype(np.int64)
    ported = has_l4 & _any_of(proto, _PORTED)
    avail4 = end - at
    has_ports = ported & (avail4 >= 4)
    out.trunc |= ported & ~has_ports
    out.sport = np.where(has_ports, _u16(t, 0), -1)
    out.dport = np.where(has_ports, _u16(t, 2), -1)
    tcp = has_l4 & (proto == 6)
    flags_ok = tcp & (avail4 >= 14)
    out.syn = flags_ok & ((t[:, 13] & 0x12) == 0x02)
    hdr = np.where(flags_ok, np.maximum((t[:, 12] >> 4).astype(np.int64) * 4, 20), 20) * tcp
    udp = has_l4 & _any_of(proto, (17, 136))
    hdr += 8 * (udp | (has_l4 & _any_of(proto, (1, 58))))  # udp, udp-lite; icmp/icmpv6: type..rest
    hdr += 12 * (has_l4 & (proto == 132))
    out.pay_off = at + hdr
    out.wire_pay = np.where(flow, np.maximum(ip_end - out.pay_off, 0), 0)
    # A first fragment's sample stands for the whole datagram: UDP says how long its payload is.
    out.pay_len = out.wire_pay.copy()
    head_frag = np.flatnonzero(udp & out.frag_more & (avail4 >= 8))
    if head_frag.shape[0]:
        out.pay_len[head_frag] = np.maximum(_u16(t[head_frag], 4) - 8, out.wire_pay[head_frag])
    macsec = etype == ETHERTYPE_MACSEC
    if macsec.any():
        _macsec(buf, np.flatnonzero(macsec), pos, l3, end, wire_end, out)
    # Later fragments are never sampled: their bytes are the middle of a datagram, not the head of a payload.
    later = out.frag_off > 0
    cap = np.minimum(end, out.ip_end) - out.pay_off
    out.pay_cap = np.where((out.kind == KIND_FLOW) & ~later, np.clip(cap, 0, out.pay_len), 0)
    out.check_set()
    if depth < MAX_DEPTH:
        overlays(buf, end, out, depth, decode_at)
        gre(buf, end, out, depth, decode_at)
        l2tp(buf, end, out, depth, decode_at)
        at_nsh = etype == ETHERTYPE_NSH
        if at_nsh.any():
            nsh(buf, np.flatnonzero(at_nsh), l3, end, wire_end, out, depth, decode_at)
    return out


@dataclass(frozen=True)
class _Ext:
    """What walking the IPv6 extension headers found (arrays over the IPv6 packets)."""

    nh: I64  # the transport protocol
    at: I64  # where its header starts
    first: Mask  # not a later fragment
    readable: Mask  # the headers walked were captured
    deep: Mask  # more extension headers than _MAX_EXT: the transport protocol is not known
    frag_id: I64  # fragment header's identification, -1 where none
    frag_off: I64
    frag_more: Mask
    frag_start: I64  # where the fragmentable part starts (just after the fragment header)


def _ipv6_ext(buf: U8, nh: I64, at: I64, end: I64) -> _Ext:
    """Walk up to _MAX_EXT IPv6 extension headers (looping over only the packets that still have one)."""
    m = nh.shape[0]
    first = np.ones(m, np.bool_)
    readable = np.ones(m, np.bool_)
    fid = np.full(m, -1, np.int64)
    foff = np.zeros(m, np.int64)
    fmore = np.zeros(m, np.bool_)
    fstart = np.zeros(m, np.int64)
    for _ in range(_MAX_EXT):
        ext = np.flatnonzero(_any_of(nh, _IPV6_EXT) & readable & first)
        if not ext.shape[0]:
            break
        fits = at[ext] + 8 <= end[ext]
        readable[ext[~fits]] = False
        ext = ext[fits]
        e = gather(buf, at[ext], 8)
        frag = nh[ext] == 44
        fx = ext[frag]
        ef = e[frag]
        foff[fx] = _u16(ef, 2) & 0xFFF8
        fmore[fx] = (ef[:, 3] & 1) == 1
        fid[fx] = _u32(ef, 4)
        fstart[fx] = at[fx] + 8
        first[fx] = foff[fx] == 0
        at[ext] += np.where(frag, 8, (e[:, 1].astype(np.int64) + 1) * 8)
        nh[ext] = e[:, 0]
    deep = _any_of(nh, _IPV6_EXT) & readable & first & (at + 8 <= end)
    return _Ext(nh=nh, at=at, first=first, readable=readable & (at <= end), deep=deep, frag_id=fid,
                frag_off=foff, frag_more=fmore, frag_start=fstart)  # fmt: skip


def _macsec(buf: U8, idx: I64, pos: I64, l3: I64, end: I64, wire_end: I64, out: Cols) -> None:
    """An 802.1AE frame is an L2 flow between MAC addresses; its SecTAG and payload are the sample."""
    if not idx.shape[0]:
        return
    w = gather(buf, pos[idx], 12)
    ok = l3[idx] <= end[idx]
    idx, w = idx[ok], w[ok]
    mac = np.zeros((idx.shape[0], 8), np.uint8)
    mac[:, 2:] = w[:, 6:12]
    out.src_lo[idx] = mac.view(">u8").ravel()
    mac[:, 2:] = w[:, 0:6]
    out.dst_lo[idx] = mac.view(">u8").ravel()
    out.kind[idx] = KIND_FLOW
    out.proto[idx] = 0
    out.length[idx] = wire_end[idx] - l3[idx]
    out.pay_off[idx] = l3[idx]
    out.pay_len[idx] = out.wire_pay[idx] = wire_end[idx] - l3[idx]
    out.ip_end[idx] = wire_end[idx]


__all__ = [
    "BAD_REASONS",
    "KIND_BAD",
    "KIND_FLOW",
    "KIND_SKIP",
    "MAX_DEPTH",
    "OUTER_NAMES",
    "OUTER_NONE",
    "OUTER_NSH",
    "Cols",
    "decode",
    "decode_at",
]
