"""Shared plumbing of the text and datagram flow readers (Zeek, Hubble, VPC, NetFlow/IPFIX).

Everything here is columnar: files are read in large blocks, lines are located with numpy, and
values are converted with Arrow compute kernels. Python only ever loops over *distinct* values
(addresses) or over the few lines that turned out to be bad.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from ringfence.observe.arrow_kernels import pc
from ringfence.observe.flows.interface import FlowSourceError, ProgressFn
from ringfence.observe.schema import TS

#: Warnings kept per file; the rest are only counted (a hostile file must not flood the terminal).
MAX_WARNINGS: Final = 20
#: Bytes read per block: large enough for the Arrow parsers to be efficient, small enough to bound memory.
#: Memory per block is a few int64 arrays per *line*, so a block of nothing but newlines (4 Mi lines)
#: costs ~200 MB at most; 16 MiB blocks cost 1.1 GB on a file of empty lines.
BLOCK_SIZE: Final = 4 << 20
#: The longest line a text flow log may have. Real Zeek/VPC/Hubble lines are under a few KiB; a
#: longer one is skipped with a warning while being read through, never held in memory whole.
MAX_LINE_BYTES: Final = 1 << 20

#: IP protocol numbers by the names flow logs use.
PROTO_NUMBERS: Final[dict[str, int]] = {
    "icmp": 1,
    "igmp": 2,
    "tcp": 6,
    "udp": 17,
    "gre": 47,
    "esp": 50,
    "ah": 51,
    "icmp6": 58,
    "icmpv6": 58,
    "ipv6-icmp": 58,
    "sctp": 132,
}


class WarningLog:
    """Collects per-file warnings, keeping the first :data:`MAX_WARNINGS` and counting the rest."""

    def __init__(self) -> None:
        self._kept: list[str] = []
        self._dropped = 0

    def add(self, message: str) -> None:
        """Record one warning."""
        if len(self._kept) < MAX_WARNINGS:
            self._kept.append(message)
        else:
            self._dropped += 1

    def freeze(self) -> tuple[str, ...]:
        """The kept warnings, plus one line counting those not shown."""
        if self._dropped:
            return (*self._kept, f"... and {self._dropped} more warnings not shown")
        return tuple(self._kept)


def warn_if_empty(path: Path, records: int, warnings: WarningLog) -> None:
    """Say so when a file held no flow records: an empty result must not read like a clean one."""
    if records == 0:
        warnings.add(f"{path}: no flow records in this file (an empty result is not evidence of clean traffic)")


def os_error(path: Path, exc: OSError) -> FlowSourceError:
    """Translate an OS error on ``path`` into the family's error."""
    return FlowSourceError(str(path), f"cannot read: {exc.strerror or exc}")


def read_head(path: Path, size: int = 4096) -> bytes:
    """The first ``size`` bytes of ``path`` (for sniffing), as a :class:`FlowSourceError` on failure."""
    try:
        with path.open("rb") as fh:
            return fh.read(size)
    except OSError as exc:
        raise os_error(path, exc) from exc


def iter_line_blocks(
    path: Path,
    *,
    progress: ProgressFn | None = None,
    block_size: int = BLOCK_SIZE,
    warnings: WarningLog | None = None,
    max_line: int = MAX_LINE_BYTES,
) -> Iterator[tuple[int, bytes]]:
    """Yield ``(number of the block's first line, block)``; every block but the last ends with ``\\n``.

    A line longer than ``max_line`` is never held whole: it is read through and dropped, with a
    warning naming its line (or, without ``warnings``, a :class:`FlowSourceError`), so memory stays
    bounded by ``block_size + max_line`` whatever the file holds. A file whose lines end in CR alone
    is refused at once: every record would otherwise be one huge "line".
    """
    try:
        total = path.stat().st_size
        with path.open("rb") as fh:
            done = 0
            line_no = 1
            carry = b""
            skipping = False  # inside an over-long line: drop bytes until its newline
            first = True
            while True:
                chunk = fh.read(block_size)
                done += len(chunk)
                if progress is not None:
                    progress(done, total)
                if first and chunk:
                    _refuse_cr_only(path, chunk)
                    first = False
                if not chunk:
                    if carry and not skipping:
                        yield line_no, carry
                    return
                if skipping:
                    nl = chunk.find(b"\n")
                    if nl < 0:
                        continue
                    chunk = chunk[nl + 1 :]
                    skipping = False
                    line_no += 1
                buf = carry + chunk if carry else chunk
                cut = buf.rfind(b"\n") + 1
                if cut == 0:
                    if len(buf) > max_line:
                        _long_line(path, line_no, max_line, warnings)
                        carry, skipping = b"", True
                    else:
                        carry = buf
                    continue
                block, carry = buf[:cut], buf[cut:]
                yield line_no, block
                line_no += block.count(b"\n")
                if len(carry) > max_line:
                    _long_line(path, line_no, max_line, warnings)
                    carry, skipping = b"", True
    except OSError as exc:
        raise os_error(path, exc) from exc


def _long_line(path: Path, line_no: int, max_line: int, warnings: WarningLog | None) -> None:
    message = f"longer than {max_line} bytes: not a record (skipped without reading it into memory)"
    if warnings is None:
        raise FlowSourceError(f"{path}:{line_no}", message)
    warnings.add(f"{path}:{line_no}: {message}")


def _refuse_cr_only(path: Path, head: bytes) -> None:
    """CR-only line endings (classic Mac) would make the whole file one line: say so, briefly."""
    window = head[: 1 << 16]
    if b"\n" not in window and window.count(b"\r") >= 2:
        raise FlowSourceError(
            f"{path}:1",
            "lines end in CR alone; flow logs end lines in LF (or CRLF)",
            hint="convert the line endings, e.g. `tr '\\r' '\\n' < IN > OUT`",
        )


def invalid_utf8_rows(
    buf: bytes, starts: npt.NDArray[np.int64], ends: npt.NDArray[np.int64], keep: npt.NDArray[np.bool_]
) -> npt.NDArray[np.bool_]:
    """Mask of kept lines that are not valid UTF-8 (so one bad byte costs one line, not the file).

    The usual block is checked by one decode in C. A bad byte is located from the decoder's offset
    and the scan resumes after its line; past a few bad lines the rest is checked line by line, so a
    block full of bad bytes stays linear.
    """
    bad = np.zeros(starts.size, dtype=bool)
    if not keep.any():
        return bad
    view = memoryview(buf)
    pos = 0
    for _ in range(16):
        try:
            str(view[pos:], "utf-8")
            return bad & keep
        except UnicodeDecodeError as exc:
            at = pos + exc.start
            row = int(np.searchsorted(starts, at, side="right")) - 1
            bad[row] = True
            pos = int(starts[row + 1]) if row + 1 < starts.size else len(buf)
            if pos >= len(buf):
                return bad & keep
    first = int(np.searchsorted(starts, pos, side="left"))
    for row in range(first, starts.size):
        if keep[row]:
            try:
                str(view[int(starts[row]) : int(ends[row])], "utf-8")
            except UnicodeDecodeError:
                bad[row] = True
    return bad & keep


def line_spans(buf: bytes) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Start and end offsets (end excludes ``\\n`` and a trailing ``\\r``) of every line in ``buf``."""
    arr = np.frombuffer(buf, dtype=np.uint8)
    nl = np.flatnonzero(arr == 0x0A)  # intp: int64 here, no copy
    if arr.size and arr[-1] != 0x0A:
        nl = np.append(nl, arr.size)
    if not nl.size:
        empty = np.zeros(0, np.int64)
        return empty, empty
    starts = np.empty(nl.size, np.int64)
    starts[0] = 0
    np.add(nl[:-1], 1, out=starts[1:])
    ends = nl.astype(np.int64, copy=True)
    # CRLF: find the CRs that sit right before a newline with one pass over the bytes (cheap), then
    # map them to their lines; no gather over every line (4 Mi empty lines cost seconds that way).
    crlf = np.flatnonzero((arr[:-1] == 0x0D) & (arr[1:] == 0x0A)) + 1
    if crlf.size:
        ends[np.searchsorted(nl, crlf)] -= 1
    if arr.size and arr[-1] == 0x0D and nl[-1] == arr.size:
        ends[-1] -= 1  # a last line without newline that ends in CR
    return starts, ends


def count_per_line(
    buf: bytes, starts: npt.NDArray[np.int64], ends: npt.NDArray[np.int64], byte: int
) -> npt.NDArray[np.int64]:
    """How often ``byte`` occurs in each line (vectorised with a prefix sum)."""
    arr = np.frombuffer(buf, dtype=np.uint8)
    # Positions of the byte, then two binary searches per line: no per-byte prefix sum to hold.
    pos = np.flatnonzero(arr == byte)
    return np.asarray(np.searchsorted(pos, ends) - np.searchsorted(pos, starts), dtype=np.int64)


def join_lines(buf: bytes, starts: npt.NDArray[np.int64], keep: npt.NDArray[np.bool_]) -> bytes:
    """The kept lines of ``buf`` (``starts`` from :func:`line_spans`), newline-terminated.

    Works on runs of consecutive kept lines, so the usual block (all lines kept but a header or
    a few bad ones) costs one slice per run, not a pass over every byte.
    """
    if not keep.any():
        return b""
    stops = np.append(starts[1:], len(buf))  # a line runs to the next line's start: its break comes along
    edges = np.flatnonzero(np.diff(np.concatenate(([False], keep, [False])).astype(np.int8)))
    run_starts, run_ends = edges[0::2], edges[1::2] - 1
    view = memoryview(buf)
    out = b"".join(view[int(starts[a]) : int(stops[b])] for a, b in zip(run_starts, run_ends, strict=True))
    return out if out.endswith(b"\n") else out + b"\n"


def canonical_ips(col: pa.Array | pa.ChunkedArray) -> tuple[pa.Array, npt.NDArray[np.bool_]]:
    """Canonical text form of IP addresses and a mask of the valid ones (Python only per distinct value)."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    arr = arr.cast(pa.string())
    enc = pc.dictionary_encode(arr)
    dictionary = enc.dictionary.to_pylist()
    canon: list[str | None] = []
    for text in dictionary:
        try:
            ip = ipaddress.ip_address(text.strip())
        except ValueError:
            canon.append(None)
            continue
        # A dual-stack socket logs IPv4 peers as ::ffff:a.b.c.d: the same host as the policy's IPv4 node.
        mapped4 = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
        canon.append(str(mapped4 if mapped4 is not None else ip))
    mapped = pa.DictionaryArray.from_arrays(enc.indices, pa.array(canon, pa.string())).cast(pa.string())
    valid = np.asarray(mapped.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    return mapped, valid


def parse_uint(col: pa.Array, limit: int) -> tuple[pa.Array, npt.NDArray[np.bool_]]:
    """Decimal text → int64 (null where unset), and a mask of values that are present but not valid.

    Values must be plain decimal digits and at most ``limit``; anything else is flagged, not guessed.
    """
    text = col.cast(pa.string())
    try:
        # Fast path: every present value is a plain integer (the usual, well-formed file).
        fast = text.cast(pa.int64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        fast = None
    if fast is not None and not pc.any(pc.match_substring(text, "+")).as_py():
        good = pc.and_(pc.greater_equal(fast, 0), pc.less_equal(fast, limit))
        out = pc.if_else(good, fast, pa.scalar(None, pa.int64()))
        bad = pc.invert(pc.fill_null(good, True))
        return out, np.asarray(bad.to_numpy(zero_copy_only=False), dtype=bool)
    text = pc.utf8_trim_whitespace(text)
    ok = pc.match_substring_regex(text, r"^[0-9]{1,19}$")
    present = pc.is_valid(text)
    clean = pc.if_else(ok, text, None)
    values = clean.cast(pa.decimal128(20, 0)).cast(pa.float64())  # 19 digits may exceed int64
    in_range = pc.less_equal(values, float(limit))
    good = pc.and_kleene(ok, in_range)
    out = pc.if_else(good, clean, None).cast(pa.int64())
    bad = pc.and_(present, pc.invert(pc.fill_null(good, False)))
    return out, np.asarray(bad.to_numpy(zero_copy_only=False), dtype=bool)


def epoch_seconds_to_ts(col: pa.Array) -> tuple[pa.Array, npt.NDArray[np.bool_]]:
    """Epoch seconds as text or float (``1521911721.255387``) → UTC timestamps; mask of unparsable ones.

    Text is converted exactly (integer and fraction separately): a float64 cannot hold nanoseconds
    since 1970, so floats (JSON) are rounded to the microsecond Zeek writes.
    """
    if pa.types.is_floating(col.type) or pa.types.is_integer(col.type):
        secs = col.cast(pa.float64())
        secs = pc.if_else(pc.and_(pc.greater_equal(secs, 0.0), pc.less(secs, 1e12)), secs, None)
        micros = pc.round(pc.multiply(secs, 1e6)).cast(pa.int64())
        bad = np.asarray(pc.and_(pc.is_valid(col), pc.is_null(micros)).to_numpy(zero_copy_only=False), dtype=bool)
        return pc.multiply(micros, 1000).cast(TS), bad
    text = pc.utf8_trim_whitespace(col.cast(pa.string()))
    ok = pc.match_substring_regex(text, r"^[0-9]{1,12}(\.[0-9]{0,9})?$")
    good = pc.if_else(ok, text, None)
    parts = pc.split_pattern(good, ".")
    whole = pc.list_element(parts, 0).cast(pa.int64())
    frac_text = pc.utf8_rpad(pc.fill_null(_second(parts), ""), 9, "0")
    frac = frac_text.cast(pa.int64())
    nanos = pc.add(pc.multiply(whole, 1_000_000_000), frac)
    bad = np.asarray(
        pc.and_(pc.is_valid(text), pc.invert(pc.fill_null(ok, False))).to_numpy(zero_copy_only=False), dtype=bool
    )
    return nanos.cast(TS), bad


def _second(parts: pa.Array) -> pa.Array:
    """The second element of each list, null where there is none."""
    has_two = pc.greater_equal(pc.fill_null(pc.list_value_length(parts), 0), 2)
    padded = pc.if_else(has_two, parts, pa.scalar(["", ""], pa.list_(pa.string())))
    return pc.if_else(has_two, pc.list_element(padded, 1), pa.scalar(None, pa.string()))


def iso_to_ts(col: pa.Array) -> tuple[pa.Array, npt.NDArray[np.bool_]]:
    """ISO 8601 text (``2021-06-16T16:52:13.136834446Z``; naive text is taken as UTC) → timestamps."""
    text = pc.utf8_trim_whitespace(col.cast(pa.string()))
    zoned = pc.match_substring_regex(text, r"(Z|[+-][0-9]{2}:?[0-9]{2})$")
    ok = pc.match_substring_regex(
        text, r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?(Z|[+-][0-9]{2}:?[0-9]{2})?$"
    )
    fixed = pc.if_else(
        pc.and_(ok, pc.invert(pc.fill_null(zoned, False))), pc.binary_join_element_wise(text, "Z", ""), text
    )
    values = pc.if_else(ok, fixed, None)
    try:
        out = values.cast(TS)
    except pa.ArrowInvalid:
        # A syntactically plausible but impossible date (month 13): convert one by one to find which.
        cells = values.to_pylist()
        conv: list[pa.Scalar | None] = []
        for cell in cells:
            try:
                conv.append(None if cell is None else pa.scalar(cell).cast(TS))
            except pa.ArrowInvalid:
                conv.append(None)
        out = pa.array([None if c is None else c.value for c in conv], pa.int64()).cast(TS)
    bad = pc.and_(pc.is_valid(text), pc.is_null(out))
    return out, np.asarray(bad.to_numpy(zero_copy_only=False), dtype=bool)


def proto_numbers(names: pa.Array, v6: pa.Array | None = None) -> tuple[pa.Array, npt.NDArray[np.bool_]]:
    """Protocol names (``tcp``) or numbers (``6``) → uint8 protocol numbers; mask of unknown ones.

    ``v6`` (bool per row) turns a plain ``icmp`` into ICMPv6 (58): Zeek writes ``icmp`` for both.
    """
    text = pc.utf8_lower(pc.utf8_trim_whitespace(names.cast(pa.string())))
    numeric, bad_num = parse_uint(text, 255)
    keys = pa.array(list(PROTO_NUMBERS), pa.string())
    vals = pa.array(list(PROTO_NUMBERS.values()), pa.int64())
    idx = pc.index_in(text, value_set=keys)
    by_name = pc.take(vals, idx)
    out = pc.coalesce(numeric, by_name)
    if v6 is not None:
        out = pc.if_else(pc.and_(pc.equal(out, 1), pc.fill_null(v6, False)), 58, out)
    bad = np.asarray(pc.and_(pc.is_valid(text), pc.is_null(out)).to_numpy(zero_copy_only=False), dtype=bool)
    return out.cast(pa.uint8(), safe=False), bad


def describe_lines(first_line: int, rows: npt.NDArray[np.int64]) -> str:
    """``line 12`` or ``lines 12, 15, 19 …`` for warnings."""
    nums = [str(first_line + int(r)) for r in rows[:5]]
    more = " …" if rows.size > 5 else ""
    return ("line " if rows.size == 1 else "lines ") + ", ".join(nums) + more


__all__ = [
    "BLOCK_SIZE",
    "MAX_LINE_BYTES",
    "MAX_WARNINGS",
    "PROTO_NUMBERS",
    "WarningLog",
    "canonical_ips",
    "count_per_line",
    "describe_lines",
    "epoch_seconds_to_ts",
    "invalid_utf8_rows",
    "iso_to_ts",
    "iter_line_blocks",
    "join_lines",
    "line_spans",
    "os_error",
    "parse_uint",
    "proto_numbers",
    "read_head",
    "warn_if_empty",
]
