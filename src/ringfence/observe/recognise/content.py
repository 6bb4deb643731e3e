"""What the bytes of a payload region look like: zeros, text, float tensors, or their entropy.

Everything works on a (k, 64) matrix of payload heads at once, with a per-row region
``[start, stop)``: the whole head for unframed packets, the part after a protocol header for a
body check (TLS record body, ESP payload, gloo tensor data, RDMA payload).

Per-byte facts (printable? zero? plausible float high byte?) are computed once per byte and packed
into one 64-bit word per row (bit c = column c), so every count below — per region, per word
alignment — is a mask and a popcount on (k,) vectors instead of another pass over the matrix.

Float tensors are recognised by their exponents: in real weights, activations and gradients almost
every value lies between 2^-30 and 2^10, so the high byte of almost every float32/bf16 word falls in
a narrow band (about 16 % of all byte values), and the fp16 exponent of values near 1 in a band of
9 of 32. Random or encrypted bytes hit such a band by chance only: with >= 90 % of the words required,
a chance match on a full 64-byte head is below 1e-9 per packet (below 1e-6 for the shortest regions
checked, 12 float32 or 16 bf16 words).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from ringfence.observe.recognise.labels import Kind

_HEAD: Final = 64
U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]


# Per-byte predicates are written as SIMD comparisons on wrapped uint8 arithmetic rather than
# 256-entry table look-ups: a gather costs ten times a comparison over a (k, 64) matrix.
def _printable(head: npt.NDArray[np.uint8]) -> npt.NDArray[np.bool_]:
    return np.asarray(((head - 0x20) < 0x5F) | (head == 0x0A) | (head == 0x0D) | (head == 0x09))


def _hb_plausible(low7: npt.NDArray[np.uint8]) -> npt.NDArray[np.bool_]:
    # High byte of a float32 / bf16 word (sign | top 7 exponent bits) for 2^-30 <= |x| < 2^10.
    return np.asarray((low7 - 48) <= 20)


def _f16_plausible(head: npt.NDArray[np.uint8]) -> npt.NDArray[np.bool_]:
    # High byte of an fp16 word (sign | 5 exponent bits | 2 mantissa bits) for 2^-6 <= |x| < 4.
    return np.asarray((((head >> 2) & 0x1F) - 9) <= 8)


# Bits of the columns holding the high byte of a little-endian word, per alignment residue.
_RESIDUE4: Final = [np.uint64(sum(1 << c for c in range(_HEAD) if c % 4 == r)) for r in range(4)]
_RESIDUE2: Final = [np.uint64(sum(1 << c for c in range(_HEAD) if c % 2 == r)) for r in range(2)]
# Increment of sum(c * log2 c) when a run of equal bytes grows to length c (index c = 1..64).
_RUN_STEP: Final = np.array(
    [0.0] + [c * math.log2(c) - (c - 1) * math.log2(max(c - 1, 1)) for c in range(1, _HEAD + 1)]
)


def _expected_random_entropy(n: int) -> float:
    """Mean plug-in byte entropy (bits/byte) of ``n`` uniformly random bytes, computed exactly."""
    if n <= 1:
        return 0.0
    p = 1.0 / 256
    acc = sum(math.comb(n, k) * p**k * (1 - p) ** (n - k) * k * math.log2(k) for k in range(2, n + 1))
    return math.log2(n) - 256 * acc / n


#: Expected entropy of random bytes for every region length 0..64 (ciphertext sits right on it).
RANDOM_ENTROPY: Final = np.array([_expected_random_entropy(n) for n in range(_HEAD + 1)])
#: This far below random: not cipher output. Random 64-byte heads have sd ≈ 0.08 bits/byte.
LOW_MARGIN: Final = 1.0
#: Within this much of random: looks like ciphertext (or compressed data, or random).
HIGH_MARGIN: Final = 0.4
#: Regions shorter than this are too short to judge.
MIN_BYTES: Final = 16
#: ... except a whole line of text: at least this many printable bytes ending in LF (a cipher ends 8 bytes so
#: with odds of about 4 in a million), as memcached's ``get k\r\n`` or the RFB banner ``RFB 003.008\n``.
MIN_LINE: Final = 8
_MIN_WORDS32: Final = 12
_MIN_WORDS16: Final = 16
_CHUNK: Final = 8192


@dataclass(frozen=True)
class Content:
    """Per analysed row: its :class:`Kind`, byte entropy (bits/byte; NaN if not computed), region length."""

    kind: npt.NDArray[np.int8]
    entropy: npt.NDArray[np.float64]
    nbytes: I64


def _bits(plane: npt.NDArray[np.bool_]) -> U64:
    """One uint64 per row with bit c set where ``plane[:, c]``."""
    packed = np.packbits(plane, axis=1, bitorder="little")
    return np.ascontiguousarray(packed).view("<u8")[:, 0].astype(np.uint64)


def _below(x: I64) -> U64:
    """Bits 0..x-1 set (x in 0..64; a shift by 64 gives 0 in numpy, and 0 - 1 wraps to all ones)."""
    return (np.left_shift(np.uint64(1), x.astype(np.uint64)) - np.uint64(1)).astype(np.uint64)


def _count(x: U64) -> I64:
    return np.bitwise_count(x).astype(np.int64)


def _float_ok(
    plausible: U64, zero: U64, region: U64, residues: list[np.uint64], min_words: int, percent: int = 90
) -> npt.NDArray[np.bool_]:
    """Rows where, for some word alignment, >= ``percent`` % of words are plausible floats or exact zeros
    and at least half are plausible non-zero floats."""
    ok = np.zeros(plausible.shape[0], dtype=np.bool_)
    for residue in residues:
        words = region & residue
        total = _count(words)
        good = _count(plausible & words)
        zeros = _count(zero & words)
        ok |= (total >= min_words) & ((good + zeros) * 100 >= total * percent) & (good * 2 >= total)
    return ok


def entropy(head: npt.NDArray[np.uint8], start: I64, stop: I64) -> npt.NDArray[np.float64]:
    """Plug-in byte entropy (bits/byte) of ``head[i, start[i]:stop[i]]`` for every row i."""
    k = head.shape[0]
    ordered: npt.NDArray[np.uint16]
    if bool(np.all(start == 0) and np.all(stop == _HEAD)):
        ordered = np.sort(head, axis=1, kind="stable").astype(np.uint16)  # radix sort on the 8-bit values
    else:
        col = np.arange(_HEAD, dtype=np.int64)
        outside = (col < start[:, None]) | (col >= stop[:, None])
        values = head.astype(np.uint16) | (outside.astype(np.uint16) << 8)  # outside bytes sort last
        ordered = np.sort(values, axis=1, kind="stable")
    # Walk the sorted columns once: a byte that extends a run of equal values from length c-1 to c
    # adds c*log2(c) - (c-1)*log2(c-1) to sum(c * log2 c); bytes from outside the region add nothing.
    columns = np.ascontiguousarray(ordered.T)
    inside = columns < 256
    acc = np.where(inside[0], _RUN_STEP[1], 0.0)
    run_start = np.zeros(k, dtype=np.intp)
    for j in range(1, _HEAD):
        run_start[columns[j] != columns[j - 1]] = j
        acc += _RUN_STEP[j + 1 - run_start] * inside[j]
    n = np.maximum(stop - start, 1).astype(np.float64)
    return np.asarray(np.log2(n) - acc / n)


def analyse(head: npt.NDArray[np.uint8], start: I64, stop: I64, *, with_entropy: npt.NDArray[np.bool_]) -> Content:
    """Classify the region ``[start, stop)`` of every row of ``head`` (shape (k, 64)).

    Entropy (and with it LOW/MID/HIGH) is computed only for rows flagged in ``with_entropy``
    that are not already zero, text or a tensor; other undecided rows get kind MID and NaN entropy.
    """
    # Chunks of a few thousand rows keep every temporary in cache (and out of fresh mmap pages).
    parts = [
        _analyse(head[i : i + _CHUNK], start[i : i + _CHUNK], stop[i : i + _CHUNK], with_entropy[i : i + _CHUNK])
        for i in range(0, head.shape[0], _CHUNK)
    ]
    if not parts:
        return Content(np.zeros(0, np.int8), np.zeros(0), np.zeros(0, np.int64))
    return Content(
        kind=np.concatenate([p.kind for p in parts]),
        entropy=np.concatenate([p.entropy for p in parts]),
        nbytes=np.concatenate([p.nbytes for p in parts]),
    )


def _analyse(head: npt.NDArray[np.uint8], start: I64, stop: I64, with_entropy: npt.NDArray[np.bool_]) -> Content:
    k = head.shape[0]
    start = np.clip(start, 0, _HEAD).astype(np.int64)
    stop = np.clip(stop, start, _HEAD).astype(np.int64)
    nbytes = stop - start
    region = _below(stop) & ~_below(start)
    hi32 = _below(stop) & ~_below(np.minimum(start + 3, _HEAD))
    hi16 = _below(stop) & ~_below(np.minimum(start + 1, _HEAD))

    printable = _count(_bits(_printable(head)) & region)
    zero_bytes = _bits(head == 0)
    zeros = _count(zero_bytes & region)
    plausible = _bits(_hb_plausible(np.asarray(head & 0x7F, dtype=np.uint8)))
    f16 = _bits(_f16_plausible(head))
    # Exact zero words (bit c: bytes c-1 .. c-3 below it are zero too): real tensors hold zeros,
    # random bytes almost never do, so zeros may fill the 10 % the exponent test leaves open.
    zero16 = zero_bytes & (zero_bytes << np.uint64(1))
    zero32 = zero16 & (zero16 << np.uint64(2))

    last = head[np.arange(k), np.clip(stop - 1, 0, _HEAD - 1)]
    line = (nbytes >= MIN_LINE) & (printable == nbytes) & (last == 0x0A)
    kind = np.select(
        [
            (nbytes < MIN_BYTES) & ~line,
            zeros == nbytes,
            printable * 20 >= nbytes * 19,
            # bf16 before float32: bf16 pairs also pass the float32 test (their high halves are bf16 values)
            _float_ok(plausible, zero16, hi16, _RESIDUE2, _MIN_WORDS16),
            _float_ok(plausible, zero32, hi32, _RESIDUE4, _MIN_WORDS32),
            # fp16's band is wider (28 % of byte values), so it must hold for 95 % of the words
            _float_ok(f16, zero16, hi16, _RESIDUE2, _MIN_WORDS16, percent=95),
        ],
        [Kind.SHORT, Kind.ZERO, Kind.TEXT, Kind.BF16, Kind.F32, Kind.F16],
        default=Kind.MID,
    ).astype(np.int8)
    ent = np.full(k, np.nan)
    todo = np.flatnonzero(with_entropy & (kind == Kind.MID))
    if todo.size:
        e = entropy(head[todo], start[todo], stop[todo])
        ent[todo] = e
        expected = RANDOM_ENTROPY[nbytes[todo]]
        kind[todo] = np.select(
            [e < expected - LOW_MARGIN, e < expected - HIGH_MARGIN], [Kind.LOW, Kind.MID], default=Kind.HIGH
        )
    return Content(kind=kind, entropy=ent, nbytes=nbytes)


__all__ = ["HIGH_MARGIN", "LOW_MARGIN", "MIN_BYTES", "RANDOM_ENTROPY", "Content", "analyse", "entropy"]
