"""Recognisers for the network's own control plane: first-hop redundancy (HSRP, VRRP), routing (BGP, OSPF, and
BFD, which tears a BGP session down when it says the path failed) and multicast (IGMP, PIM).

A cluster's gateway address is held by HSRP or VRRP (keepalived in front of a Kubernetes API, for one), and
its routes are often BGP (Calico between nodes, BGP unnumbered in a leaf-spine fabric): whoever can forge these
messages takes the traffic. None of them encrypts; what they authenticate with is what the verdict says.
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
    be16,
    be32,
    narrow,
    on_ports,
    select,
    table,
    take,
)
from ringfence.observe.recognise.labels import Label

_TCP: Final = 6
_UDP: Final = 17
_VRRP_PROTO: Final = 112
_OSPF_PROTO: Final = 89
_IGMP_PROTO: Final = 2
_PIM_PROTO: Final = 103
#: IGMP types (RFC 1112, 2236, 3376): membership query, v1/v2 reports, leave (8 bytes each; a v3 query is at
#: least 12), and the v3 report (8 bytes, then its group records).
_IGMP_FIXED: Final = (0x12, 0x16, 0x17)
_IGMP_QUERY: Final = 0x11
_IGMP_V3_REPORT: Final = 0x22
#: PIMv2 message types (RFC 7761 §4.9, RFC 3973 State Refresh, RFC 5015 DF election): 0-10.
_PIM_TYPES: Final = 10
_PIM_REGISTER: Final = 1
#: Bytes of the OSPFv2 and OSPFv3 packet headers (RFC 2328 A.3.1, RFC 5340 A.3.1).
_OSPF2_HEADER: Final = 24
_OSPF3_HEADER: Final = 16
HSRP_PORT: Final = 1985
#: HSRP v0/v1 states (RFC 2281 §5): initial, learn, listen, speak, standby, active.
_HSRP_STATES: Final = table([0, 1, 2, 4, 8, 16])
_HSRP_DEFAULT_AUTH: Final = b"cisco\x00\x00\x00"
#: BGP message types (RFC 4271 §4.1, RFC 2918): OPEN, UPDATE, NOTIFICATION, KEEPALIVE, ROUTE-REFRESH.
_BGP_TYPES: Final = table([1, 2, 3, 4, 5])
_BGP_HEADER: Final = 19
#: Largest BGP message: 4096 bytes, or 65535 with extended messages (RFC 8654).
_BGP_MAX: Final = 65535


def hsrp(p: Packets, out: Labeller) -> None:
    """HSRP on UDP 1985. Version 0 (RFC 2281 §5, HSRPv1): op code hello/coup/resign, a defined state,
    reserved zero, 8 bytes of authentication data in clear and the virtual address: exactly 20 bytes.
    Version 2 (Cisco): a group-state TLV (type 1, length 40, version 2) followed by a text (type 3) or an
    MD5 (type 4) authentication TLV."""
    c = p.cols
    udp = (p.proto == _UDP) & p.port(HSRP_PORT)
    idx, s, length, v = select(p, out, udp & (((c[0] == 0) & (p.length == 20)) | ((c[0] == 1) & (c[1] == 40))))
    if idx.size == 0:
        return
    v1 = (s[:, 0] == 0) & (s[:, 1] <= 2) & _HSRP_STATES[s[:, 2]] & (s[:, 7] == 0) & (s[:, 4] >= s[:, 3])
    default = np.frombuffer(_HSRP_DEFAULT_AUTH, np.uint8)
    v2 = (s[:, 0] == 1) & (s[:, 1] == 40) & (s[:, 2] == 2) & (s[:, 3] <= 2) & (length >= 42)
    auth_type = np.where(v >= 44, s[:, 42], 0)  # the TLV after the group state's 2 + 40 bytes
    text2 = v2 & (auth_type == 3) & (s[:, 43] == 8) & (length >= 52)
    # the password: bytes 8-15 of a v0/v1 hello, the 8 bytes of a v2 text TLV (where the head holds them)
    cisco = np.where(v1, np.all(s[:, 8:16] == default, axis=1), (v >= 52) & np.all(s[:, 44:52] == default, axis=1))
    codes = np.select(
        [(v1 | text2) & cisco, v1 | text2, v2 & (auth_type == 4), v2 & (auth_type != 3)],
        [Label.HSRP_DEFAULT, Label.HSRP_TEXT, Label.HSRP_MD5, Label.HSRP_NOAUTH],
        0,
    )
    out.assign(idx, codes.astype(np.int64))


def vrrp(p: Packets, out: Labeller) -> None:
    """VRRP (IP protocol 112). Version 2 (RFC 3768 §5): type 1, VRID 1-255, the address count, an
    authentication type 0 (none) or 1 (a text password in clear), then the addresses and 8 bytes of
    authentication data: exactly 16 + 4 x count bytes. Version 3 (RFC 5798 §5): no authentication, 8 + 4 or
    16 bytes per address."""
    c = p.cols
    cand = (p.proto == _VRRP_PROTO) & np.isin(c[0], [0x21, 0x31]) & (c[1] >= 1) & (c[3] >= 1)
    idx, s, length, _ = select(p, out, cand & (p.length >= 12))
    if idx.size == 0:
        return
    count = s[:, 3].astype(np.int64)
    v2 = (s[:, 0] == 0x21) & (length == 16 + 4 * count) & (s[:, 4] <= 1)
    v3 = (s[:, 0] == 0x31) & ((length == 8 + 4 * count) | (length == 8 + 16 * count)) & ((s[:, 4] & 0xF0) == 0)
    codes = np.select([v2 & (s[:, 4] == 1), v2, v3], [Label.VRRP_TEXT, Label.VRRP_NOAUTH, Label.VRRP_NOAUTH], 0)
    out.assign(idx, codes.astype(np.int64))


#: BFD control packets' UDP ports: single hop (RFC 5881), multihop (RFC 5883), micro-BFD on LAG members (RFC 7130).
BFD_PORTS: Final = (3784, 4784, 6784)
_BFD_HEADER: Final = 24
#: Authentication section lengths (RFC 5880 §4.2-4.4): simple password 3 + 1..16, keyed/meticulous MD5 24,
#: keyed/meticulous SHA1 28.
_BFD_SIMPLE: Final = 1
_BFD_MD5: Final = (2, 3)
_BFD_SHA1: Final = (4, 5)


def bfd(p: Packets, out: Labeller) -> None:
    """BFD control packets (RFC 5880 §4.1) on their UDP ports: version 1, a defined diagnostic (0-8), the M bit
    clear, a non-zero detect multiplier and My Discriminator, and a Length equal to the datagram's — 24 bytes, or
    24 and the authentication section the A bit announces: a simple password (in clear), or keyed MD5/SHA1."""
    idx, c = narrow(p, out, p.cols[3] == p.length)  # Length, one byte: the datagram's
    keep = on_ports(p, idx, BFD_PORTS) & (p.proto[idx] == _UDP) & (c[2] > 0)
    keep &= ((c[0] >> 5) == 1) & ((c[0] & 0x1F) <= 8) & ((c[1] & 1) == 0)
    idx, s, length, v = take(p, idx[keep & (p.length[idx] >= _BFD_HEADER)])
    if idx.size == 0:
        return
    ok = be32(s, 4) != 0
    auth = (s[:, 1] & 0x04) != 0
    kind, size = s[:, 24], s[:, 25].astype(np.int64)
    ok &= ~auth | ((v >= 26) & (size == length - _BFD_HEADER))
    simple = auth & (kind == _BFD_SIMPLE) & (size >= 4) & (size <= 19)
    keyed = auth & ((np.isin(kind, _BFD_MD5) & (size == 24)) | (np.isin(kind, _BFD_SHA1) & (size == 28)))
    codes = np.select(
        [~auth & (length == _BFD_HEADER), simple, keyed], [Label.BFD_NOAUTH, Label.BFD_SIMPLE, Label.BFD_KEYED], 0
    )
    out.assign(idx, np.where(ok, codes, 0).astype(np.int64))


def ospf(p: Packets, out: Labeller) -> None:
    """OSPF (IP protocol 89). Version 2 (RFC 2328 A.3.1): type 1-5, a packet length of at least 24 that the
    datagram holds (an LLS block or the cryptographic digest may follow it), AuType 0 (null), 1 (a simple
    password) or 2 (cryptographic: zero, key id, digest length 16-64, sequence). Version 3 (RFC 5340 A.3.1):
    type 1-5, length >= 16, reserved zero; it authenticates with IPsec (then the flow is AH or ESP) or a
    trailer after the packet (RFC 7166)."""
    c = p.cols
    cand = (p.proto == _OSPF_PROTO) & np.isin(c[0], [2, 3]) & ((c[1] - 1) <= 4)
    idx, s, length, v = select(p, out, cand & (p.length >= _OSPF3_HEADER))
    if idx.size == 0:
        return
    size = be16(s, 2)
    v2 = (s[:, 0] == 2) & (size >= _OSPF2_HEADER) & (size <= length) & (v >= _OSPF2_HEADER)
    autype = be16(s, 14)
    digest = s[:, 19]
    crypto = v2 & (autype == 2) & (be16(s, 16) == 0) & (digest >= 16) & (digest <= 64) & (size + digest <= length)
    v3 = (s[:, 0] == 3) & (size >= _OSPF3_HEADER) & (size <= length) & (s[:, 15] == 0)
    codes = np.select(
        [crypto, v2 & (autype == 1), v2 & (autype == 0), v3],
        [Label.OSPF_CRYPTO, Label.OSPF_SIMPLE, Label.OSPF_NULL, Label.OSPF3],
        0,
    )
    out.assign(idx, codes.astype(np.int64))


def _checksum_ok(s: U8, size: I64) -> Bool:
    """The Internet checksum (RFC 1071) over each row's first ``size`` bytes (all in the head) is valid."""
    inside = np.arange(HEAD)[None, :] < size[:, None]
    b = np.where(inside, s, 0).astype(np.int64)
    total = ((b[:, 0::2] << 8) | b[:, 1::2]).sum(axis=1)
    for _ in range(2):
        total = (total & 0xFFFF) + (total >> 16)
    return np.asarray(total == 0xFFFF)


def igmp(p: Packets, out: Labeller) -> None:
    """IGMP (IP protocol 2): a query (8 bytes for v1/v2, 12 or more for v3), a v1/v2 report or leave
    (exactly 8 bytes) or a v3 report (8 bytes and its group records), whole in the head with a valid checksum
    over the message (RFC 2236 §2.3, RFC 3376 §4)."""
    c = p.cols
    cand = (p.proto == _IGMP_PROTO) & np.isin(c[0], [_IGMP_QUERY, _IGMP_V3_REPORT, *_IGMP_FIXED])
    idx, s, length, v = select(p, out, cand & (p.length >= 8) & (p.length <= HEAD))
    if idx.size == 0:
        return
    kind = s[:, 0]
    shape = np.where(np.isin(kind, _IGMP_FIXED), length == 8, np.where(kind == _IGMP_QUERY, (length == 8) |
                     (length >= 12), length >= 8))  # fmt: skip
    ok = shape & (v == length) & _checksum_ok(s, length)
    out.assign(idx, np.where(ok, Label.IGMP, 0).astype(np.int64))


def pim(p: Packets, out: Labeller) -> None:
    """PIMv2 (IP protocol 103, RFC 7761 §4.9.1): version 2, a type 0-10, and a valid checksum — over the whole
    message, which must then be in the head, except for a Register, whose checksum covers its 8-byte header."""
    c = p.cols
    cand = (p.proto == _PIM_PROTO) & ((c[0] >> 4) == 2) & ((c[0] & 0x0F) <= _PIM_TYPES)
    idx, s, length, v = select(p, out, cand & (p.length >= 4))
    if idx.size == 0:
        return
    register = (s[:, 0] & 0x0F) == _PIM_REGISTER
    covered = np.where(register, 8, length)
    ok = (covered <= v) & (length >= covered) & _checksum_ok(s, np.minimum(covered, HEAD))
    out.assign(idx, np.where(ok, Label.PIM, 0).astype(np.int64))


def bgp(p: Packets, out: Labeller) -> None:
    """BGP-4 on TCP (RFC 4271 §4.1): the 16-byte marker of all ones, a length of at least 19 (exactly 19 for
    a KEEPALIVE, 29 or more for an OPEN) and a message type 1-5."""
    c = p.cols
    cand = (p.proto == _TCP) & (c[0] == 0xFF) & (c[15] == 0xFF) & (p.length >= _BGP_HEADER)
    idx, s, _, v = select(p, out, cand)
    if idx.size == 0:
        return
    length, kind = be16(s, 16), s[:, 18]
    ok = (v >= _BGP_HEADER) & np.all(s[:, :16] == 0xFF, axis=1) & _BGP_TYPES[kind]
    ok &= (length >= _BGP_HEADER) & (length <= _BGP_MAX)
    ok &= np.where(kind == 4, length == _BGP_HEADER, True) & np.where(kind == 1, length >= 29, True)
    out.assign(idx, np.where(ok, Label.BGP, 0).astype(np.int64))


__all__ = ["BFD_PORTS", "HSRP_PORT", "bfd", "bgp", "hsrp", "igmp", "ospf", "pim", "vrrp"]
