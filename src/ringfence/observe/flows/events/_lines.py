"""Text logs, one event a line, parsed by one regular expression per block (Arrow's RE2, in C).

A block of lines becomes one Arrow string array (the block's bytes, offsets at the line starts: no
copy per line), and ``extract_regex`` pulls the named groups out of every line at once. Lines that
match nothing are skipped with a warning naming them, unless they match the log's known chatter
(start-up banners, summaries). Memory stays bounded by the block size plus the longest line.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from ringfence.observe.flows._common import (
    WarningLog,
    describe_lines,
    invalid_utf8_rows,
    iter_line_blocks,
    line_spans,
)


def _block_lines(block: bytes) -> tuple[pa.Array, npt.NDArray[np.bool_]]:
    """Every line of ``block`` as text (CR/LF trimmed, null where not UTF-8), and the blank-line mask."""
    starts, ends = line_spans(block)
    offsets = np.append(starts, len(block)).astype(np.int64)
    raw = pa.Array.from_buffers(pa.large_binary(), starts.size, [None, pa.py_buffer(offsets.tobytes()),
                                                                 pa.py_buffer(block)])
    blank = ends <= starts
    bad = invalid_utf8_rows(block, starts, ends, ~blank)
    text = pc.if_else(pa.array(bad), pa.scalar(None, pa.large_binary()), raw).cast(pa.large_string())
    return pc.utf8_rtrim(text, "\r\n").cast(pa.string()), blank


def iter_matches(
    path: Path, pattern: str, warnings: WarningLog, *, what: str, chatter: str | None = None
) -> Iterator[tuple[pa.Table, npt.NDArray[np.int64], int]]:
    """Yield ``(named groups of each matching line, their line numbers, non-blank lines)`` per block."""
    for first_line, block in iter_line_blocks(path, warnings=warnings):
        lines, blank = _block_lines(block)
        not_text = np.asarray(pc.is_null(lines).to_numpy(zero_copy_only=False), bool) & ~blank
        if not_text.any():
            warnings.add(f"{path}: {int(not_text.sum())} line(s) skipped, "
                         f"{describe_lines(first_line, np.flatnonzero(not_text))}: not UTF-8 text")
        groups = pc.extract_regex(lines, pattern)
        matched = np.asarray(pc.is_valid(groups).to_numpy(zero_copy_only=False), bool)
        other = ~matched & ~blank & ~not_text
        if chatter is not None and other.any():
            known = pc.fill_null(pc.match_substring_regex(lines, chatter), False)
            other &= ~np.asarray(known.to_numpy(zero_copy_only=False), bool)
        rows = np.flatnonzero(other)
        if rows.size:
            warnings.add(f"{path}: {rows.size} line(s) skipped, {describe_lines(first_line, rows)}: not {what}")
        keep = np.flatnonzero(matched)
        if keep.size == 0:
            yield pa.table({}), keep.astype(np.int64), int((~blank).sum())
            continue
        taken = pc.take(groups, pa.array(keep))
        table = pa.Table.from_arrays([taken.field(i) for i in range(taken.type.num_fields)],
                                     names=[taken.type.field(i).name for i in range(taken.type.num_fields)])
        yield table, keep.astype(np.int64) + first_line, int((~blank).sum())


__all__ = ["iter_matches"]
