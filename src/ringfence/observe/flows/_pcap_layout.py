"""What the packet decoders share: link-type and encapsulation codes, reasons, byte readers, the batch columns.

Kept apart from the decoders so that the link/IP/transport decoder (:mod:`._pcap_decode`) and the tunnel
decoders (:mod:`._pcap_tunnels`) can both use them without importing each other.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]
Mask = npt.NDArray[np.bool_]

# Link types (www.tcpdump.org/linktypes.html) and three of our own for decoding tunnel payloads.
LT_NULL: Final = 0
LT_ETHERNET: Final = 1
LT_PPP: Final = 9
LT_RAW_12: Final = 12
LT_RAW_14: Final = 14
LT_PPP_HDLC: Final = 50
LT_PPP_ETHER: Final = 51
LT_C_HDLC: Final = 104
LT_LOOP: Final = 108
LT_RAW: Final = 101
LT_SLL: Final = 113
LT_IPV4: Final = 228
LT_IPV6: Final = 229
LT_PPP_WITH_DIR: Final = 204
LT_IPOIB: Final = 242
LT_SLL2: Final = 276
LT_ERF: Final = 197  # Endace ERF: InfiniBand records are read by the RDMA gatherer, they make no IP flow
LT_INFINIBAND: Final = 247  # native InfiniBand (LRH first): likewise
LT_MPLS: Final = -1  # starts with an MPLS label stack (MPLS over UDP or GRE)
LT_NSH: Final = -3  # starts with a Network Service Header (GRE or VXLAN-GPE payload)
LT_NONE: Final = -2  # not a payload we decode

ETHERTYPE_NSH: Final = 0x894F

# Outer encapsulations recorded in the ``outer`` column.
OUTER_NONE: Final = 0
OUTER_VXLAN: Final = 1
OUTER_GENEVE: Final = 2
OUTER_MPLS_UDP: Final = 3
OUTER_MPLS: Final = 4
OUTER_NSH: Final = 5
OUTER_GRE: Final = 6
OUTER_PPTP: Final = 7  # enhanced GRE (version 1), RFC 2637
OUTER_ERSPAN: Final = 8
OUTER_VXLAN_GPE: Final = 9
OUTER_L2TP: Final = 10  # L2TPv2 over UDP, RFC 2661
OUTER_NAMES: Final = {OUTER_VXLAN: "vxlan", OUTER_GENEVE: "geneve", OUTER_MPLS_UDP: "mpls-over-udp",
                      OUTER_MPLS: "mpls", OUTER_NSH: "nsh", OUTER_GRE: "gre", OUTER_PPTP: "pptp-gre",
                      OUTER_ERSPAN: "erspan", OUTER_VXLAN_GPE: "vxlan-gpe", OUTER_L2TP: "l2tp"}  # fmt: skip
#: What the ``ovni`` number of each outer kind is, as printed after the outer addresses.
OUTER_ID_WORDS: Final = {OUTER_VXLAN: "vni", OUTER_GENEVE: "vni", OUTER_VXLAN_GPE: "vni", OUTER_GRE: "key",
                         OUTER_PPTP: "call", OUTER_ERSPAN: "session"}  # fmt: skip

# Kinds of decoded packet.
KIND_SKIP: Final = 0  # not IP (ARP, LLDP, …): no flow
KIND_FLOW: Final = 1
KIND_BAD: Final = 2  # undecodable: counted in a warning
KIND_HELD: Final = 3  # a later IP fragment held back until its first fragment says which flow it is in

#: Reasons a packet is undecodable (code → words).
BAD_REASONS: Final = {
    1: "frame shorter than its link-layer header",
    2: "IPv4 header truncated or invalid (version or header length)",
    3: "IPv4 total length smaller than its header",
    4: "IPv6 header truncated or invalid version",
    5: "unsupported link type",
    6: "VLAN, Cisco MetaData or MPLS header truncated or invalid",
    7: "byte-stuffed PPP frame (HDLC escapes) not decoded",
    8: "PPPoE or NSH header truncated or invalid",
    9: "more IPv6 extension headers than the decoder follows (8)",
}


def _be(w: U8, col: int, width: int, dtype: str) -> I64 | None:
    """The field as a strided view of ``w`` in its big-endian dtype (no per-byte shifts), where numpy allows it."""
    part = w[:, col : col + width]
    if part.shape[1] != width or part.strides[1] != 1:
        return None
    out: I64 = part.view(dtype)[:, 0].astype(np.int64)
    return out


def u16(w: U8, col: int) -> I64:
    """Big-endian 16-bit field at column ``col`` of every row."""
    fast = _be(w, col, 2, ">u2")
    return fast if fast is not None else (w[:, col].astype(np.int64) << 8) | w[:, col + 1]


def u32(w: U8, col: int) -> I64:
    """Big-endian 32-bit field at column ``col`` of every row."""
    fast = _be(w, col, 4, ">u4")
    return fast if fast is not None else (u16(w, col) << 16) | u16(w, col + 2)


def u64(w: U8, col: int) -> npt.NDArray[np.uint64]:
    """Big-endian 64-bit field at column ``col`` of every row."""
    return np.ascontiguousarray(w[:, col : col + 8]).view(">u8").ravel().astype(np.uint64)


def any_of(values: I64, choices: tuple[int, ...]) -> Mask:
    """``np.isin`` for a handful of choices, without its sort."""
    m: Mask = values == choices[0]
    for c in choices[1:]:
        m |= values == c
    return m


#: What an unset field of :class:`Cols` holds until it is assigned: no rows, so any use of it fails loudly.
_UNSET: Final = np.zeros(0, np.int64)


#: Every field of :class:`Cols`: (dtype, default).
_FIELDS: Final[dict[str, tuple[type[np.generic], int]]] = {
    "kind": (np.uint8, 0),
    "why": (np.uint8, 0),
    "etype": (np.int64, 0),
    "proto": (np.uint8, 0),
    "src_hi": (np.uint64, 0),
    "src_lo": (np.uint64, 0),
    "dst_hi": (np.uint64, 0),
    "dst_lo": (np.uint64, 0),
    "sport": (np.int64, -1),
    "dport": (np.int64, -1),
    "length": (np.int64, 0),
    "pay_off": (np.int64, 0),
    "pay_len": (np.int64, 0),
    "pay_cap": (np.int64, 0),
    "wire_pay": (np.int64, 0),
    "ip_end": (np.int64, 0),
    "syn": (np.bool_, 0),
    "trunc": (np.bool_, 0),
    "cut": (np.bool_, 0),
    "frag_id": (np.int64, -1),
    "frag_off": (np.int64, 0),
    "frag_len": (np.int64, 0),
    "frag_more": (np.bool_, 0),
    "vlan": (np.int64, -1),
    "pkey": (np.int64, -1),
    "okind": (np.uint8, 0),
    "ovni": (np.int64, -1),
    "olabel": (np.int64, -1),
    "osrc_hi": (np.uint64, 0),
    "osrc_lo": (np.uint64, 0),
    "odst_hi": (np.uint64, 0),
    "odst_lo": (np.uint64, 0),
}


class Cols:
    """Decoded fields of a batch of packets (one entry per packet; meaningful where ``kind`` is KIND_FLOW)."""

    kind: npt.NDArray[np.uint8]
    why: npt.NDArray[np.uint8]  # reason code where kind is KIND_BAD
    etype: npt.NDArray[np.int64]  # the frame's network-layer ethertype
    proto: npt.NDArray[np.uint8]
    src_hi: npt.NDArray[np.uint64]
    src_lo: npt.NDArray[np.uint64]
    dst_hi: npt.NDArray[np.uint64]
    dst_lo: npt.NDArray[np.uint64]
    sport: npt.NDArray[np.int64]
    dport: npt.NDArray[np.int64]
    length: npt.NDArray[np.int64]  # IP length (frame length after the MAC header for L2 flows)
    pay_off: npt.NDArray[np.int64]  # where the L4 payload starts in the buffer
    pay_len: npt.NDArray[np.int64]  # L4 payload bytes on the wire (of the whole datagram, see frag_*)
    pay_cap: npt.NDArray[np.int64]  # of which captured in this packet
    wire_pay: npt.NDArray[np.int64]  # L4 payload bytes this packet itself carries
    ip_end: npt.NDArray[np.int64]  # where the IP datagram (this fragment) ends in the buffer
    syn: npt.NDArray[np.bool_]  # TCP SYN without ACK
    trunc: npt.NDArray[np.bool_]  # transport header not readable: a flow without ports
    cut: npt.NDArray[np.bool_]  # a tunnel whose inner headers are cut short or invalid: outer kept
    frag_id: npt.NDArray[np.int64]  # IP identification of a fragment (-1: not a fragment)
    frag_off: npt.NDArray[np.int64]  # byte offset of the fragment's data in its datagram
    frag_len: npt.NDArray[np.int64]  # bytes of datagram data the fragment carries
    frag_more: npt.NDArray[np.bool_]  # more fragments follow
    vlan: npt.NDArray[np.int64]
    pkey: npt.NDArray[np.int64]  # InfiniBand P_Key of a RoCEv2 packet's BTH (-1: none)
    okind: npt.NDArray[np.uint8]
    ovni: npt.NDArray[np.int64]
    olabel: npt.NDArray[np.int64]
    osrc_hi: npt.NDArray[np.uint64]
    osrc_lo: npt.NDArray[np.uint64]
    odst_hi: npt.NDArray[np.uint64]
    odst_lo: npt.NDArray[np.uint64]

    def __init__(self, n: int, *, unset: frozenset[str] = frozenset()) -> None:
        """``n`` packets with every field at its default; the fields named in ``unset`` are left to the caller,
        which must assign each of them whole (see :meth:`check_set`): zeroing them would be wasted work."""
        for name, (dtype, default) in _FIELDS.items():
            if name in unset:
                setattr(self, name, _UNSET)
            elif default:
                setattr(self, name, np.full(n, default, dtype))
            else:
                setattr(self, name, np.zeros(n, dtype))

    def check_set(self) -> None:
        """Raise if a field left unset at construction was never assigned (a decoder bug, not bad input)."""
        missing = [name for name, arr in vars(self).items() if arr is _UNSET]
        if missing:
            raise RuntimeError(f"decoded columns left unset: {', '.join(sorted(missing))}")

    def put(self, sel: I64, other: Cols) -> None:
        """Overwrite the rows ``sel`` with ``other``'s rows (same order)."""
        for name, arr in vars(self).items():
            arr[sel] = getattr(other, name)

    @staticmethod
    def concat(parts: list[Cols]) -> Cols:
        """The rows of ``parts``, in order, as one batch."""
        out = Cols(0)
        for name in vars(out):
            setattr(out, name, np.concatenate([getattr(p, name) for p in parts]))
        return out

    def take(self, sel: I64) -> Cols:
        """The rows ``sel`` as a new batch."""
        out = Cols(0)
        for name, arr in vars(self).items():
            setattr(out, name, arr[sel])
        return out


__all__ = [
    "BAD_REASONS",
    "ETHERTYPE_NSH",
    "KIND_BAD",
    "KIND_FLOW",
    "KIND_HELD",
    "KIND_SKIP",
    "OUTER_ID_WORDS",
    "OUTER_L2TP",
    "OUTER_NAMES",
    "OUTER_NONE",
    "Cols",
    "any_of",
    "u16",
    "u32",
    "u64",
]
