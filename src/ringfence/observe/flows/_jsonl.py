"""JSON-lines reading with Arrow's JSON reader, falling back line by line only where a block fails.

The fast path parses a whole block (megabytes of lines) against an explicit schema that names only
the fields a reader uses; unknown fields are ignored. When a block fails (a truncated line, a field
of the wrong type, a line that is not an object) that block alone is re-read one line at a time, so
the bad lines can be skipped with a warning naming them and the rest kept.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson

from ringfence.observe.flows._common import WarningLog, iter_line_blocks, join_lines, line_spans
from ringfence.observe.flows.interface import FlowSourceError, ProgressFn

_MIN_BLOCK = 1 << 20


def _parse(data: bytes, schema: pa.Schema) -> pa.Table:
    return pajson.read_json(
        io.BytesIO(data),
        read_options=pajson.ReadOptions(use_threads=True, block_size=max(_MIN_BLOCK, len(data) + 1)),
        parse_options=pajson.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"),
    )


def _short(exc: Exception) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:160]


def iter_json_records(
    path: Path, schema: pa.Schema, warnings: WarningLog, progress: ProgressFn | None = None
) -> Iterator[tuple[pa.Table, npt.NDArray[np.int64], int]]:
    """Yield ``(table, line number of each row, records consumed)`` per block of ``path``."""
    for first_line, block in iter_line_blocks(path, progress=progress):
        starts, ends = line_spans(block)
        arr = np.frombuffer(block, dtype=np.uint8)
        nonempty = ends > starts
        first_byte = np.zeros(starts.size, dtype=np.uint8)
        first_byte[nonempty] = arr[starts[nonempty]]
        blank = ~nonempty | (
            nonempty & np.isin(first_byte, np.frombuffer(b" \t\r", dtype=np.uint8)) & _all_space(arr, starts, ends)
        )
        is_obj = first_byte == ord("{")
        not_obj = np.flatnonzero(~blank & ~is_obj)
        for row in not_obj[:3].tolist():
            warnings.add(f"{path}:{first_line + row}: skipped, not a JSON object")
        if not_obj.size > 3:
            warnings.add(f"{path}: {not_obj.size - 3} more lines in this block skipped, not JSON objects")
        rows = np.flatnonzero(is_obj)
        consumed = int((~blank).sum())
        if rows.size == 0:
            continue
        data = join_lines(block, starts, is_obj)
        try:
            table = _parse(data, schema)
            if table.num_rows != rows.size:
                raise pa.ArrowInvalid("line count and record count differ")
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            table, rows = _line_by_line(block, starts, ends, rows, schema, first_line, path, warnings)
        yield table, rows.astype(np.int64) + first_line, consumed


def _all_space(
    arr: npt.NDArray[np.uint8], starts: npt.NDArray[np.int64], ends: npt.NDArray[np.int64]
) -> npt.NDArray[np.bool_]:
    solid = np.flatnonzero((arr != 0x20) & (arr != 0x09) & (arr != 0x0D))
    return np.asarray(np.searchsorted(solid, ends) == np.searchsorted(solid, starts), dtype=bool)


def _line_by_line(
    block: bytes,
    starts: npt.NDArray[np.int64],
    ends: npt.NDArray[np.int64],
    rows: npt.NDArray[np.int64],
    schema: pa.Schema,
    first_line: int,
    path: Path,
    warnings: WarningLog,
) -> tuple[pa.Table, npt.NDArray[np.int64]]:
    good: list[int] = []
    for row in rows.tolist():
        line = block[starts[row] : ends[row]]
        try:
            one = _parse(line + b"\n", schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            warnings.add(f"{path}:{first_line + row}: skipped, {_short(exc)}")
            continue
        if one.num_rows != 1:
            warnings.add(f"{path}:{first_line + row}: skipped, not exactly one JSON object")
            continue
        good.append(row)
    kept = np.asarray(good, dtype=np.int64)
    if kept.size == 0:
        return schema.empty_table(), kept
    mask = np.zeros(starts.size, dtype=bool)
    mask[kept] = True
    try:
        return _parse(join_lines(block, starts, mask), schema), kept
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise FlowSourceError(f"{path}:{first_line + int(kept[0])}", f"cannot parse JSON lines: {_short(exc)}") from exc


def field(table: pa.Table, dotted: str) -> pa.Array:
    """The column at ``a.b.c`` of nested structs (null where any level is missing), as one array."""
    parts = dotted.split(".")
    col = table.column(parts[0]).combine_chunks()
    for part in parts[1:]:
        col = pc.struct_field(col, part)  # pushes the parent's nulls down, unlike StructArray.field
    return col


__all__ = ["field", "iter_json_records"]
