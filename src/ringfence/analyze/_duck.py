"""The one place that talks to DuckDB and translates its exceptions into :class:`AnalyzeError`.

Everything per-flow in :mod:`ringfence.analyze` is SQL over Arrow tables (or Parquet files) run on an
embedded DuckDB connection; nothing else in ringfence imports ``duckdb``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from ringfence.errors import InputError, RingfenceError


class AnalyzeError(RingfenceError):
    """The analytical engine failed (bad SQL input, out of memory, unreadable Parquet)."""


def _threads() -> int:
    # RINGFENCE_THREADS lets a benchmark or a CI job pin the engine; default: DuckDB's own choice.
    raw = os.environ.get("RINGFENCE_THREADS", "")
    return int(raw) if raw.isdigit() and int(raw) > 0 else 0


@contextmanager
def session(tables: Mapping[str, pa.Table] | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
    """An in-memory DuckDB connection with ``tables`` registered under their names; closed on exit."""
    try:
        con = duckdb.connect(database=":memory:")
        threads = _threads()
        if threads:
            con.execute(f"SET threads = {threads}")
        for name, table in (tables or {}).items():
            con.register(name, table)
    except duckdb.Error as exc:
        raise AnalyzeError(f"cannot start the analytical engine: {exc}") from exc
    try:
        yield con
    finally:
        con.close()


def register(con: duckdb.DuckDBPyConnection, name: str, table: pa.Table) -> None:
    """Make an Arrow table visible to SQL as ``name`` (zero copy)."""
    try:
        con.register(name, table)
    except duckdb.Error as exc:
        raise AnalyzeError(f"cannot register table {name}: {exc}") from exc


def query(con: duckdb.DuckDBPyConnection, sql: str, params: Mapping[str, Any] | None = None) -> pa.Table:
    """Run ``sql`` and return the result as an Arrow table."""
    try:
        rel = con.sql(sql, params=dict(params) if params else None)
        return rel.to_arrow_table()
    except duckdb.IOException as exc:
        raise AnalyzeError(f"cannot read flow input: {exc}", hint="check the path and that it is Parquet") from exc
    except duckdb.OutOfMemoryException as exc:
        raise AnalyzeError(
            f"the analytical engine ran out of memory: {exc}", hint="set RINGFENCE_THREADS=1 or split the input"
        ) from exc
    except duckdb.Error as exc:
        raise AnalyzeError(f"flow analysis failed: {exc}") from exc


def columns(con: duckdb.DuckDBPyConnection, source_sql: str) -> dict[str, str]:
    """Column name → DuckDB type of a source expression (``read_parquet(...)``, a table name)."""
    table = query(con, f"DESCRIBE SELECT * FROM {source_sql}")
    return dict(zip(table.column("column_name").to_pylist(), table.column("column_type").to_pylist(), strict=True))


def parquet_source(path: str | Path) -> str:
    """A SQL table expression reading ``path`` (a Parquet file, a directory of them, or a glob)."""
    p = Path(path)
    text = str(p)
    if p.is_dir():
        text = str(p / "**" / "*.parquet")
    elif not any(ch in text for ch in "*?[") and not p.exists():
        raise InputError(str(p), "no such flow file", hint="give a Parquet file written with the ringfence flow schema")
    return "read_parquet('" + text.replace("'", "''") + "')"


__all__ = ["AnalyzeError", "columns", "parquet_source", "query", "register", "session"]
