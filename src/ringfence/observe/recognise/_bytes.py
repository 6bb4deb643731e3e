"""Shared vectorised byte helpers and the labelling state the framing recognisers write into."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

HEAD: Final = 64
U8 = npt.NDArray[np.uint8]
#: dtype of a sampled packet's label code (:class:`.labels.Label`: more than 127 codes, so not int8).
LABEL_DTYPE: Final = np.int16
I64 = npt.NDArray[np.int64]
Bool = npt.NDArray[np.bool_]
#: Leading columns kept transposed (contiguous per column) for cheap candidate tests over all rows.
N_COLS: Final = 20


@dataclass(frozen=True)
class Packets:
    """Sampled packets with their flow's header facts broadcast to every row (all arrays length m)."""

    head: U8  # (m, 64)
    cols: U8  # (N_COLS, m): head[:, :N_COLS] transposed
    length: I64  # full L4 payload length
    valid: I64  # bytes of the head that are real payload: min(length, 64)
    flow: I64
    forward: Bool
    proto: npt.NDArray[np.uint8]
    ethertype: npt.NDArray[np.uint16]
    sport: npt.NDArray[np.int32]
    dport: npt.NDArray[np.int32]

    @property
    def m(self) -> int:
        """Number of sampled packets."""
        return int(self.length.shape[0])

    def subset(self, rows: I64) -> Packets:
        """The packets at ``rows`` (a gather of every column)."""
        return Packets(
            head=self.head[rows],
            cols=np.ascontiguousarray(self.cols[:, rows]),
            length=self.length[rows],
            valid=self.valid[rows],
            flow=self.flow[rows],
            forward=self.forward[rows],
            proto=self.proto[rows],
            ethertype=self.ethertype[rows],
            sport=self.sport[rows],
            dport=self.dport[rows],
        )

    def port(self, number: int) -> Bool:
        """Rows whose flow has ``number`` as either port."""
        return np.asarray((self.sport == number) | (self.dport == number))


class Labeller:
    """Per-row label and body region; the first recogniser to claim a row wins (priority order)."""

    def __init__(self, m: int) -> None:
        self.label = np.zeros(m, dtype=LABEL_DTYPE)
        self.body_start = np.full(m, -1, dtype=np.int64)
        self.body_stop = np.zeros(m, dtype=np.int64)

    @property
    def free(self) -> Bool:
        """Rows no recogniser has claimed yet."""
        return np.asarray(self.label == 0)

    def assign(self, idx: I64, codes: npt.NDArray[np.int64], start: I64 | None = None, stop: I64 | None = None) -> None:
        """Label rows ``idx`` with ``codes`` (0 leaves a row free); optionally mark a body region to check."""
        keep = (codes > 0) & (self.label[idx] == 0)
        rows = idx[keep]
        self.label[rows] = codes[keep]
        if start is not None and stop is not None:
            self.body_start[rows] = start[keep]
            self.body_stop[rows] = stop[keep]


def select(p: Packets, out: Labeller, cand: Bool) -> tuple[I64, U8, I64, I64]:
    """The candidate rows no recogniser has claimed yet: (their indices, heads, payload lengths, bytes in head)."""
    idx = np.flatnonzero(cand & out.free)
    return idx, p.head[idx], p.length[idx], p.valid[idx]


def narrow(p: Packets, out: Labeller, first: Bool) -> tuple[I64, U8]:
    """The free rows that pass a cheap, selective first test, and their leading columns ``(N_COLS, k)``: the
    further tests then run on those rows only, not on every sampled packet."""
    idx = np.flatnonzero(first & out.free)
    return idx, p.cols[:, idx]


def take(p: Packets, idx: I64) -> tuple[I64, U8, I64, I64]:
    """Rows ``idx`` as :func:`select` gives them: (indices, heads, payload lengths, bytes in head)."""
    return idx, p.head[idx], p.length[idx], p.valid[idx]


def on_ports(p: Packets, idx: I64, ports: tuple[int, ...]) -> Bool:
    """Rows ``idx`` whose flow has any of ``ports`` at either end."""
    found = np.zeros(idx.size, dtype=np.bool_)
    for number in ports:
        found |= (p.sport[idx] == number) | (p.dport[idx] == number)
    return found


def match_at(s: U8, pos: I64, pattern: bytes, *, fold: bool = False) -> Bool:
    """Rows whose bytes at a per-row position are ``pattern`` (ASCII case folded where ``fold``); bytes outside the
    head read as 0 (see :func:`at`)."""
    found = np.ones(s.shape[0], dtype=np.bool_)
    for k, byte in enumerate(pattern):
        got = at(s, pos + k)
        found &= ((got | 0x20) if fold else got) == byte
    return found


def table(values: tuple[int, ...] | list[int] | range) -> Bool:
    """A 256-entry lookup: which byte values are in ``values`` (index it with a column of bytes)."""
    return np.asarray(np.isin(np.arange(256), list(values)))


def be16(s: U8, i: int) -> I64:
    """Big-endian 16-bit field at byte ``i`` of every row."""
    return (s[:, i].astype(np.int64) << 8) | s[:, i + 1]


def be32(s: U8, i: int) -> I64:
    """Big-endian 32-bit field at byte ``i`` of every row."""
    return (be16(s, i) << 16) | be16(s, i + 2)


def le(s: U8, i: int, n: int) -> I64:
    """Little-endian ``n``-byte (n <= 7) field at byte ``i`` of every row."""
    out = np.zeros(s.shape[0], dtype=np.int64)
    for j in range(n):
        out |= s[:, i + j].astype(np.int64) << (8 * j)
    return out


def at(s: U8, pos: I64) -> I64:
    """The byte at a per-row position (positions outside the head read as 0; check ``valid`` first)."""
    rows = np.arange(s.shape[0])
    inside = (pos >= 0) & (pos < HEAD)
    return np.where(inside, s[rows, np.clip(pos, 0, HEAD - 1)], 0).astype(np.int64)


def be16_at(s: U8, pos: I64) -> I64:
    """Big-endian 16-bit field at a per-row position."""
    return (at(s, pos) << 8) | at(s, pos + 1)


def be32_at(s: U8, pos: I64) -> I64:
    """Big-endian 32-bit field at a per-row position."""
    return (be16_at(s, pos) << 16) | be16_at(s, pos + 2)


def codes(mask: Bool, label: int) -> I64:
    """``label`` where ``mask`` holds, 0 (no label) elsewhere: the codes :meth:`Labeller.assign` takes."""
    return np.where(mask, label, 0).astype(np.int64)


def prefix(s: U8, offset: int, pattern: bytes) -> Bool:
    """Rows whose bytes at ``offset`` equal ``pattern``."""
    want = np.frombuffer(pattern, dtype=np.uint8)
    return np.asarray(np.all(s[:, offset : offset + len(pattern)] == want, axis=1))


def printable(s: U8) -> Bool:
    """Per byte: printable ASCII, tab, CR or LF."""
    return np.asarray(((s - 0x20) < 0x5F) | (s == 0x0A) | (s == 0x0D) | (s == 0x09))


def count_in(mask: Bool, start: I64, stop: I64) -> I64:
    """Per row: how many of ``mask[i, start[i]:stop[i]]`` are true."""
    col = np.arange(HEAD)
    inside = (col >= start[:, None]) & (col < stop[:, None])
    return np.asarray((mask & inside).sum(axis=1), dtype=np.int64)


def is_digit(x: I64 | U8) -> Bool:
    """Per value: an ASCII digit."""
    return np.asarray((x >= 0x30) & (x <= 0x39))


__all__ = [
    "HEAD",
    "N_COLS",
    "Bool",
    "I64",
    "U8",
    "Labeller",
    "Packets",
    "at",
    "be16",
    "be16_at",
    "be32",
    "be32_at",
    "codes",
    "count_in",
    "is_digit",
    "le",
    "match_at",
    "narrow",
    "on_ports",
    "prefix",
    "printable",
    "select",
    "table",
    "take",
]
