"""The embedded engine (default): DuckDB, and the one place that translates its exceptions.

Everything per-flow in :mod:`ringfence.analyze` is SQL over Arrow tables (or Parquet datasets) that
runs here unchanged — the SQL is written in DuckDB's dialect. DuckDB streams Parquet and spills
aggregates and sorts to disk; every connection is opened with a memory limit and its own spill directory
(:mod:`ringfence.analyze.engine.limits`), so memory stays bounded on inputs larger than the machine's.
"""

from __future__ import annotations

import os
from pathlib import Path

import duckdb
import pyarrow as pa

from ringfence.analyze.engine.interface import AnalyzeError, EngineKind, EngineSpec
from ringfence.analyze.engine.limits import SpillDir, duckdb_size, memory_limit, threads_for
from ringfence.errors import InputError


def _threads() -> int:
    # RINGFENCE_THREADS lets a benchmark or a CI job pin the engine; default: DuckDB's own choice.
    raw = os.environ.get("RINGFENCE_THREADS", "")
    return int(raw) if raw.isdigit() and int(raw) > 0 else 0


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def parquet_glob(path: str | Path) -> str:
    """What to read for ``path``: a Parquet file, a directory of them (any depth: hive partitions such as
    ``day=2026-12-01/hour=10/``), a glob, or an object-store URL (``s3://…``)."""
    text = str(path)
    if "://" in text:
        return text  # object store: the engine's own reader resolves it
    p = Path(text)
    if p.is_dir():
        return str(p / "**" / "*.parquet")
    if not any(ch in text for ch in "*?[") and not p.exists():
        raise InputError(text, "no such flow file", hint="give a Parquet file written with the ringfence flow schema")
    return text


class DuckEngine:
    """An in-memory DuckDB connection, bounded in memory and spilling to its own directory (see
    :class:`~ringfence.analyze.engine.interface.Engine`)."""

    def __init__(self, spec: EngineSpec | None = None) -> None:
        self._spec = spec or EngineSpec(EngineKind.DUCKDB)
        self._parquet: dict[str, str] = {}
        limit = memory_limit(self._spec.memory_limit)
        self._spill = SpillDir(self._spec.spill_dir)
        #: The memory limit this connection runs under (bytes).
        self.memory_limit = limit
        try:
            # Set at connect, before anything is allocated: a limit set later applies to a pool already in use.
            self._con = duckdb.connect(
                database=":memory:",
                config={
                    "memory_limit": duckdb_size(limit),
                    "temp_directory": str(self._spill.path),
                },
            )
            # DuckDB draws a progress bar on stdout for a query over ~2 s; stdout carries ringfence's
            # machine output (JSON, YAML), so the bar would corrupt it. (A session option, not a config one.)
            self._con.execute("SET enable_progress_bar = false")
            # Never fetch an extension from the network behind the user's back (s3:// needs httpfs
            # installed beforehand); an assurance tool talks to nothing it was not told to.
            self._con.execute("SET autoinstall_known_extensions = false")
            # the cores this process may run on (a container's or taskset's share), not the machine's
            threads = threads_for(limit, _threads() or len(os.sched_getaffinity(0)))
            self._con.execute(f"SET threads = {threads}")
        except duckdb.Error as exc:
            self._spill.remove()
            raise AnalyzeError(f"cannot start the analytical engine: {exc}") from exc

    @property
    def spill_dir(self) -> Path:
        """Where this connection spills (removed when it closes)."""
        return self._spill.path

    @property
    def spec(self) -> EngineSpec:
        """Which engine this is."""
        return self._spec

    def register(self, name: str, table: pa.Table) -> None:
        """Make an Arrow table visible to SQL as ``name`` (zero copy)."""
        try:
            self._con.register(name, table)
        except duckdb.Error as exc:
            raise AnalyzeError(f"cannot register table {name}: {exc}") from exc

    def register_parquet(self, name: str, path: str) -> None:
        """A view over a Parquet file, directory (hive partitions become columns) or glob."""
        glob = parquet_glob(path)
        self._execute(
            f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM read_parquet({_quoted(glob)}, hive_partitioning = true)",
            path,
        )
        self._parquet[name] = glob

    def column_names(self, name: str) -> tuple[str, ...]:
        """The columns of a registered table or view."""
        table = self.query(f"DESCRIBE SELECT * FROM {name}")
        return tuple(table.column("column_name").to_pylist())

    def any_present(self, name: str, columns: tuple[str, ...]) -> bool:
        """Non-null anywhere in ``columns``? For Parquet, read from the footers' null counts when every
        column chunk has them (no scan of the data)."""
        glob = self._parquet.get(name)
        if glob is not None:
            wanted = ", ".join(_quoted(c) for c in columns)
            meta = self.query(
                f"""SELECT count(*) AS chunks, count(stats_null_count) AS with_stats,
                           coalesce(sum(num_values - stats_null_count), 0) AS present
                    FROM parquet_metadata({_quoted(glob)}) WHERE path_in_schema IN ({wanted})"""
            ).to_pylist()[0]
            if meta["chunks"] and meta["with_stats"] == meta["chunks"]:
                return bool(meta["present"])
        counts = " + ".join(f'count("{c}")' for c in columns)
        return bool(self.query(f"SELECT {counts} AS n FROM {name}").column("n")[0].as_py())

    def query(self, sql: str) -> pa.Table:
        """Run ``sql`` and return the result as an Arrow table."""
        try:
            return self._con.sql(sql).to_arrow_table()
        except duckdb.IOException as exc:
            raise AnalyzeError(f"cannot read flow input: {exc}", hint="check the path and that it is Parquet") from exc
        except duckdb.OutOfMemoryException as exc:
            raise AnalyzeError(
                f"the analytical engine ran out of memory under its limit of {duckdb_size(self.memory_limit)}: {exc}",
                hint="raise --memory-limit (or RINGFENCE_DUCKDB_MEMORY), or set RINGFENCE_THREADS=1: "
                "each thread holds its own buffers",
            ) from exc
        except duckdb.Error as exc:
            raise AnalyzeError(f"flow analysis failed: {exc}") from exc

    def close(self) -> None:
        """Close the connection and remove its spill directory."""
        try:
            self._con.close()
        finally:
            self._spill.remove()

    def _execute(self, sql: str, path: str) -> None:
        try:
            self._con.execute(sql)
        except duckdb.Error as exc:
            raise InputError(path, f"cannot read as Parquet: {exc}", hint="give Parquet with the flow schema") from exc


__all__ = ["DuckEngine", "parquet_glob"]
