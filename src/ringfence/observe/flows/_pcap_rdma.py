"""RDMA transport headers (InfiniBand BTH and RETH) of a decoded batch, gathered in bulk in the flow reader's pass.

Where a BTH is found: RoCEv2 is UDP to port 4791 (the *destination* port: the source port is flow entropy, and
a sender using port 69 must not turn its packets into TFTP), the BTH first in the UDP payload; native
InfiniBand (LINKTYPE_INFINIBAND, 247) starts with the LRH; Endace ERF (LINKTYPE_ERF, 197) records of ERF type 21
carry the same after a 16-byte ERF header and its extension headers. After the LRH comes the BTH (LNH 2) or a
GRH and then the BTH (LNH 3). Which extended headers follow the BTH, and so where a RETH is, comes from the
opcode (IBTA vol. 1, table 38 and section 9.2): RETH on RDMA WRITE First, WRITE Only (with immediate) and READ
Request; AtomicETH (which also names a virtual address and an rkey) on Compare&Swap and Fetch&Add; the RD and
XRC transports put their own headers first.

Only the packets that are RDMA are touched (three vector compares per batch find them); their fields are read
from one fixed window per packet and a second gather where the RETH sits. A BTH or RETH cut short by the capture
is counted, never read past the packet's captured bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from ringfence.observe.flows._pcap_layout import I64, KIND_FLOW, LT_ERF, LT_INFINIBAND, U8, Cols, u16, u32, u64
from ringfence.observe.flows._pcap_walk import gather

ROCE_PORT: Final = 4791
_ERF_INFINIBAND: Final = 21
_ERF_HEADER: Final = 16
_MAX_ERF_EXT: Final = 8

#: Address families of an RDMA endpoint.
FAM_IPV4: Final = 0
FAM_IPV6: Final = 1
FAM_LID: Final = 2  # a local identifier (no GRH): the subnet's 16-bit address
FAM_GID: Final = 3  # a GRH's global identifier (IPv6-formatted)

BTH_LEN: Final = 12
RETH_LEN: Final = 16
_WINDOW: Final = 40  # BTH + the largest prefix before a RETH (RDETH + DETH) + RETH


def _tables() -> tuple[I64, I64, npt.NDArray[np.bool_]]:
    """Per opcode: where the RETH (or AtomicETH) starts after the BTH (-1: none), where the payload starts after
    the BTH (-1: opcode not known), and whether the packet is a request (it carries the requester's PSN)."""
    reth = np.full(256, -1, np.int64)
    hdr = np.full(256, -1, np.int64)
    request = np.zeros(256, np.bool_)
    # Operation (low 5 bits) → (extended header bytes after any transport prefix, RETH/AtomicETH at 0?, request?)
    ops: dict[int, tuple[int, bool, bool]] = {
        0x00: (0, False, True), 0x01: (0, False, True), 0x02: (0, False, True), 0x03: (4, False, True),
        0x04: (0, False, True), 0x05: (4, False, True),  # SEND First/Middle/Last/Last+Imm/Only/Only+Imm
        0x06: (16, True, True), 0x07: (0, False, True), 0x08: (0, False, True), 0x09: (4, False, True),
        0x0A: (16, True, True), 0x0B: (20, True, True),  # RDMA WRITE First/Middle/Last/Last+Imm/Only/Only+Imm
        0x0C: (16, True, True),  # RDMA READ Request
        0x0D: (4, False, False), 0x0E: (0, False, False), 0x0F: (4, False, False), 0x10: (4, False, False),
        0x11: (4, False, False), 0x12: (12, False, False),  # READ responses (AETH), Acknowledge, Atomic Ack
        0x13: (28, True, True), 0x14: (28, True, True),  # Compare&Swap, Fetch&Add (AtomicETH: VA, R_Key, …)
        0x16: (4, False, True), 0x17: (4, False, True),  # SEND Last/Only with Invalidate (IETH)
    }  # fmt: skip
    # Transport (high 3 bits) → bytes of its own headers before the extended ones (request, response).
    transports = {0: (0, 0), 1: (0, 0), 2: (12, 4), 3: (8, 8), 5: (4, 0)}  # RC, UC, RD, UD, XRC
    for t, (pre_req, pre_resp) in transports.items():
        for op, (ext, has_reth, is_req) in ops.items():
            code = (t << 5) | op
            pre = pre_req if is_req else pre_resp
            hdr[code] = BTH_LEN + pre + ext
            if has_reth:
                reth[code] = BTH_LEN + pre
            request[code] = is_req
    hdr[0x81] = BTH_LEN + 16  # RoCEv2 CNP: 16 reserved bytes, no payload
    return reth, hdr, request


RETH_AT, PAYLOAD_AT, IS_REQUEST = _tables()


@dataclass(frozen=True)
class RdmaRows:
    """The RDMA packets of one batch (arrays of equal length; ``row`` indexes the batch)."""

    row: I64
    fam: I64
    src_hi: npt.NDArray[np.uint64]
    src_lo: npt.NDArray[np.uint64]
    dst_hi: npt.NDArray[np.uint64]
    dst_lo: npt.NDArray[np.uint64]
    sport: I64  # -1 for native InfiniBand
    dport: I64
    bth_ok: npt.NDArray[np.bool_]  # the whole BTH was captured
    opcode: I64
    pkey: I64
    dest_qp: I64
    psn: I64
    reth_ok: npt.NDArray[np.bool_]  # the opcode has a RETH/AtomicETH and it was captured whole
    reth_cut: npt.NDArray[np.bool_]  # the opcode has one, but the capture cut it short
    va: npt.NDArray[np.uint64]
    rkey: I64
    dma_len: I64
    pay_at: I64  # where the RDMA payload starts in the buffer
    pay_cap: I64  # payload bytes captured (ICRC and pad excluded)

    @property
    def n(self) -> int:
        """Number of RDMA packets."""
        return int(self.row.shape[0])


def _erf_lrh(buf: U8, pos: I64, end: I64) -> tuple[I64, npt.NDArray[np.bool_]]:
    """Where the LRH of each ERF record starts, and whether the record is an InfiniBand one (type 21)."""
    at = pos + _ERF_HEADER
    head = gather(buf, pos, _ERF_HEADER)
    kind = head[:, 8].astype(np.int64)
    ok = ((kind & 0x7F) == _ERF_INFINIBAND) & (at <= end)
    more = ok & ((kind & 0x80) != 0)  # extension headers follow, 8 bytes each, chained by their top bit
    for _ in range(_MAX_ERF_EXT):
        idx = np.flatnonzero(more)
        if not idx.shape[0]:
            break
        fits = at[idx] + 8 <= end[idx]
        ok[idx[~fits]] = more[idx[~fits]] = False
        idx = idx[fits]
        ext = gather(buf, at[idx], 1)[:, 0]
        at[idx] += 8
        more[idx] = (ext & 0x80) != 0
    ok &= ~more  # deeper than we follow: not read
    return at, ok


def _native(buf: U8, lrh: I64, end: I64) -> tuple[I64, I64, I64, I64, I64, I64, I64, npt.NDArray[np.bool_]]:
    """(BTH offset, family, src hi/lo, dst hi/lo, packet end) of native InfiniBand packets starting at ``lrh``."""
    w = gather(buf, lrh, 48)
    lnh = (w[:, 1] & 3).astype(np.int64)
    grh = lnh == 3
    ok = ((lnh == 2) | grh) & (lrh + 8 <= end)
    bth = lrh + np.where(grh, 48, 8)
    fam = np.where(grh, FAM_GID, FAM_LID)
    src_hi = np.where(grh, u64(w, 16), 0).astype(np.uint64)
    src_lo = np.where(grh, u64(w, 24), u16(w, 6).astype(np.uint64)).astype(np.uint64)
    dst_hi = np.where(grh, u64(w, 32), 0).astype(np.uint64)
    dst_lo = np.where(grh, u64(w, 40), u16(w, 2).astype(np.uint64)).astype(np.uint64)
    # PktLen counts 4-byte words from the LRH through the ICRC (the VCRC after it is not counted).
    pkt_end = lrh + (u16(w, 4) & 0x7FF) * 4
    return bth, fam, src_hi, src_lo, dst_hi, dst_lo, pkt_end, ok  # type: ignore[return-value]


def set_pkey(buf: U8, cols: Cols, end: I64) -> None:
    """Only the P_Key of each RoCEv2 packet's BTH into ``cols.pkey`` (what a flows-only read needs)."""
    roce = (cols.kind == KIND_FLOW) & (cols.dport == ROCE_PORT) & (cols.proto == 17)
    if not roce.any():
        return
    r = np.flatnonzero(roce)
    r = r[cols.pay_off[r] + BTH_LEN <= np.minimum(end[r], cols.ip_end[r])]
    cols.pkey[r] = u16(gather(buf, cols.pay_off[r], 4), 2)


def extract(buf: U8, cols: Cols, pos: I64, end: I64, lt: I64) -> RdmaRows | None:
    """The RDMA packets of a decoded batch (None when there are none); sets ``cols.pkey`` of RoCEv2 flow packets.

    ``pos`` and ``end`` bound each packet's captured bytes, ``lt`` is its link type.
    """
    roce = (cols.kind == KIND_FLOW) & (cols.dport == ROCE_PORT) & (cols.proto == 17)
    ib = lt == LT_INFINIBAND
    erf = lt == LT_ERF
    if not (roce.any() or ib.any() or erf.any()):
        return None
    r = np.flatnonzero(roce)
    fam_r = np.where(cols.etype[r] == 0x86DD, FAM_IPV6, FAM_IPV4)
    limit_r = np.minimum(end[r], cols.ip_end[r])
    parts: list[tuple[npt.NDArray[np.generic], ...]] = [
        (r, cols.pay_off[r], fam_r, cols.src_hi[r], cols.src_lo[r], cols.dst_hi[r], cols.dst_lo[r],
         cols.sport[r], cols.dport[r], limit_r, cols.ip_end[r])
    ]  # fmt: skip
    native = np.flatnonzero(ib | erf)
    if native.shape[0]:
        lrh = pos[native].copy()
        ok = np.ones(native.shape[0], np.bool_)
        at_erf = erf[native]
        if at_erf.any():
            e = np.flatnonzero(at_erf)
            lrh[e], ok[e] = _erf_lrh(buf, pos[native][e], end[native][e])
        bth, fam, sh, sl, dh, dl, pkt_end, ok_lrh = _native(buf, lrh, end[native])
        keep = ok & ok_lrh
        native, bth, fam, sh, sl, dh, dl, pkt_end = (
            native[keep], bth[keep], fam[keep], sh[keep], sl[keep], dh[keep], dl[keep], pkt_end[keep],
        )
        none = np.full(native.shape[0], -1, np.int64)
        parts.append((native, bth, fam, sh, sl, dh, dl, none, none, end[native], pkt_end))
    cat = [np.concatenate(x) for x in zip(*parts, strict=True)]
    row, bth, fam, sport, dport, limit, wire_end = (cat[i].astype(np.int64) for i in (0, 1, 2, 7, 8, 9, 10))
    src_hi, src_lo, dst_hi, dst_lo = (cat[i].astype(np.uint64) for i in (3, 4, 5, 6))
    if not row.shape[0]:
        return None
    w = gather(buf, bth, BTH_LEN)
    bth_ok = bth + BTH_LEN <= limit
    opcode = np.where(bth_ok, w[:, 0], -1).astype(np.int64)
    code = np.clip(opcode, 0, 255)
    pad = ((w[:, 1] >> 4) & 3).astype(np.int64)
    pkey = u16(w, 2)
    dest_qp = u32(w, 4) & 0xFFFFFF
    psn = u32(w, 8) & 0xFFFFFF
    reth_at = np.where(bth_ok, RETH_AT[code], -1)
    has_reth = reth_at >= 0
    reth_ok = has_reth & (bth + reth_at + RETH_LEN <= limit)
    reth_cut = has_reth & ~reth_ok
    va = np.zeros(row.shape[0], np.uint64)
    rkey = np.full(row.shape[0], -1, np.int64)
    dma_len = np.full(row.shape[0], -1, np.int64)
    at = np.flatnonzero(reth_ok)
    if at.shape[0]:
        x = gather(buf, bth[at] + reth_at[at], RETH_LEN)
        va[at], rkey[at], dma_len[at] = u64(x, 0), u32(x, 8), u32(x, 12)
    pay_rel = PAYLOAD_AT[code]
    pay_at = bth + np.maximum(pay_rel, 0)
    # The payload ends before the pad bytes and the 4-byte ICRC; what was captured of it ends at ``limit``.
    pay_end = np.minimum(wire_end - 4 - pad, limit)
    pay_cap = np.where(bth_ok & (pay_rel >= 0), np.maximum(pay_end - pay_at, 0), 0)
    roce_rows = row[: r.shape[0]][bth_ok[: r.shape[0]]]
    cols.pkey[roce_rows] = pkey[: r.shape[0]][bth_ok[: r.shape[0]]]
    return RdmaRows(row=row, fam=fam, src_hi=src_hi, src_lo=src_lo, dst_hi=dst_hi, dst_lo=dst_lo, sport=sport,
                    dport=dport,
                    bth_ok=bth_ok, opcode=opcode, pkey=np.where(bth_ok, pkey, -1),
                    dest_qp=np.where(bth_ok, dest_qp, -1), psn=np.where(bth_ok, psn, -1), reth_ok=reth_ok,
                    reth_cut=reth_cut, va=va, rkey=rkey, dma_len=dma_len, pay_at=pay_at, pay_cap=pay_cap)  # fmt: skip


__all__ = [
    "FAM_GID",
    "FAM_IPV4",
    "FAM_IPV6",
    "FAM_LID",
    "IS_REQUEST",
    "LT_ERF",
    "LT_INFINIBAND",
    "PAYLOAD_AT",
    "RETH_AT",
    "ROCE_PORT",
    "RdmaRows",
    "extract",
    "set_pkey",
]
