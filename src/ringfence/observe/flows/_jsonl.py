"""JSON-lines reading with Arrow's JSON reader, falling back line by line only where a block fails.

The fast path parses a whole block (megabytes of lines) against an explicit schema that names only
the fields a reader uses; unknown fields are ignored. When a block fails (a truncated line, a field
of the wrong type, a line that is not an object) that block alone is re-read one line at a time, so
the bad lines can be skipped with a warning naming them and the rest kept.

That re-read must stay cheap on a hostile file (a million lines of ``{"id.orig_h": 1}``): each line
is checked with the standard JSON parser and a type check against the schema in Python (a few
microseconds a line), and the survivors are parsed by Arrow together; should Arrow still refuse
some, the survivors are bisected, so only the few bad lines cost separate parses.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson

from ringfence.observe.flows._common import (
    WarningLog,
    describe_lines,
    invalid_utf8_rows,
    iter_line_blocks,
    join_lines,
    line_spans,
)
from ringfence.observe.flows.interface import ProgressFn

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
    for first_line, block in iter_line_blocks(path, progress=progress, warnings=warnings):
        starts, ends = line_spans(block)
        arr = np.frombuffer(block, dtype=np.uint8)
        nonempty = ends > starts
        first_byte = np.zeros(starts.size, dtype=np.uint8)
        first_byte[nonempty] = arr[starts[nonempty]]
        blank = ~nonempty | (
            nonempty & np.isin(first_byte, np.frombuffer(b" \t\r", dtype=np.uint8)) & _all_space(arr, starts, ends)
        )
        is_obj = first_byte == ord("{")
        # Arrow's JSON reader passes invalid UTF-8 inside strings through; it would surface later as a
        # decode error far from its line. Checked here, so one bad byte costs its line, named.
        not_text = invalid_utf8_rows(block, starts, ends, is_obj)
        if not_text.any():
            warnings.add(
                f"{path}: {int(not_text.sum())} line(s) skipped, "
                f"{describe_lines(first_line, np.flatnonzero(not_text))}: not UTF-8 text"
            )
            is_obj &= ~not_text
        not_obj = np.flatnonzero(~blank & ~is_obj & ~not_text)  # bad UTF-8 is reported above, not again
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
    refused: dict[str, list[int]] = {}
    types = {f.name: f.type for f in schema}
    begin, stop = starts.tolist(), ends.tolist()  # Python ints: numpy scalar indexing costs µs a line
    for row in rows.tolist():
        problem = _line_problem(block[begin[row] : stop[row]], types)
        if problem is None:
            good.append(row)
        else:
            refused.setdefault(problem, []).append(row)
    for problem, bad_rows in refused.items():
        # The first few by name, the rest in one warning: a hostile block must not cost a message a line.
        for row in bad_rows[:3]:
            warnings.add(f"{path}:{first_line + row}: skipped, {problem}")
        if len(bad_rows) > 3:
            rest = np.asarray(bad_rows[3:], dtype=np.int64)
            warnings.add(f"{path}: {rest.size} more line(s) skipped, {describe_lines(first_line, rest)}: {problem}")
    kept = np.asarray(good, dtype=np.int64)
    tables, kept = _bisect(block, starts, ends, kept, schema, first_line, path, warnings)
    if kept.size == 0:
        return schema.empty_table(), kept
    return pa.concat_tables(tables).combine_chunks(), kept


def _bisect(
    block: bytes,
    starts: npt.NDArray[np.int64],
    ends: npt.NDArray[np.int64],
    rows: npt.NDArray[np.int64],
    schema: pa.Schema,
    first_line: int,
    path: Path,
    warnings: WarningLog,
) -> tuple[list[pa.Table], npt.NDArray[np.int64]]:
    """Parse ``rows`` together; where Arrow refuses, halve and retry, down to the single bad lines."""
    if rows.size == 0:
        return [], rows
    mask = np.zeros(starts.size, dtype=bool)
    mask[rows] = True
    try:
        table = _parse(join_lines(block, starts, mask), schema)
        if table.num_rows == rows.size:
            return [table], rows
        reason = "not exactly one JSON object"
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        reason = _short(exc)
    if rows.size == 1:
        warnings.add(f"{path}:{first_line + int(rows[0])}: skipped, {reason}")
        return [], rows[:0]
    half = rows.size // 2
    left, lrows = _bisect(block, starts, ends, rows[:half], schema, first_line, path, warnings)
    right, rrows = _bisect(block, starts, ends, rows[half:], schema, first_line, path, warnings)
    return left + right, np.concatenate((lrows, rrows))


def _line_problem(line: bytes, types: dict[str, pa.DataType]) -> str | None:
    """Why Arrow would refuse this line against the schema's ``types``, or None if it looks acceptable."""
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return "not JSON"
    if not isinstance(obj, dict):
        return "not a JSON object"
    for key, value in obj.items():
        typ = types.get(key)
        if typ is not None and not _conforms(value, typ):
            return f"field {key[:40]!r} is not of type {typ}"
    return None


def _conforms(value: Any, typ: pa.DataType, depth: int = 0) -> bool:
    """Whether a decoded JSON value fits an Arrow type the way Arrow's JSON reader converts it."""
    if value is None:
        return True
    if depth > 32:
        return False
    if pa.types.is_string(typ):
        return isinstance(value, str)
    if pa.types.is_boolean(typ):
        return isinstance(value, bool)
    if pa.types.is_integer(typ):
        return isinstance(value, int) and not isinstance(value, bool) and -(2**63) <= value < 2**63
    if pa.types.is_floating(typ):
        return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if pa.types.is_list(typ):
        return isinstance(value, list) and all(_conforms(v, typ.value_type, depth + 1) for v in value)
    if pa.types.is_struct(typ):
        if not isinstance(value, dict):
            return False
        return all(_conforms(value.get(typ.field(i).name), typ.field(i).type, depth + 1) for i in range(typ.num_fields))
    return True  # other types: Arrow decides, and the bisection catches a refusal


def field(table: pa.Table, dotted: str) -> pa.Array:
    """The column at ``a.b.c`` of nested structs (null where any level is missing), as one array."""
    parts = dotted.split(".")
    col = table.column(parts[0]).combine_chunks()
    for part in parts[1:]:
        col = pc.struct_field(col, part)  # pushes the parent's nulls down, unlike StructArray.field
    return col


__all__ = ["field", "iter_json_records"]
