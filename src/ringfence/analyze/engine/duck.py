"""The embedded engine (default): DuckDB, and the one place that translates its exceptions.

Everything per-flow in :mod:`ringfence.analyze` is SQL over Arrow tables (or Parquet datasets) that
runs here unchanged — the SQL is written in DuckDB's dialect. DuckDB streams Parquet and spills
aggregates and sorts to disk; every database is opened with a memory limit and its own spill directory
(:mod:`ringfence.analyze.engine.limits`), so memory stays bounded on inputs larger than the machine's.

A session is a fresh connection to an in-memory database that the process keeps for sessions with the
same limits (:func:`close_databases` ends them; the CLI calls it after every verb, and it runs at exit):
opening a DuckDB database costs ~15–20 ms and closing it ~10 ms, a connection to an open one ~0.2 ms,
and an analysis a library caller runs per time window should not pay the former each time. Nothing of
one session reaches the next: registered tables and views are the connection's own (temporary views),
and no session changes a global setting.
"""

from __future__ import annotations

import atexit
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa

from ringfence.analyze.engine.interface import AnalyzeError, EngineKind, EngineSpec
from ringfence.analyze.engine.limits import SPILL_ENV, SpillDir, duckdb_size, memory_limit, threads_for
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


@dataclass(frozen=True)
class _Database:
    """One in-memory DuckDB database with its limits and spill directory, shared by this process's sessions."""

    root: duckdb.DuckDBPyConnection
    spill: SpillDir
    limit: int


_DATABASES: dict[tuple[int, int, str, int], _Database] = {}
_LOCK = threading.Lock()
_AT_EXIT: list[bool] = []


def _open_database(limit: int, spill_parent: str | None, threads: int) -> _Database:
    spill = SpillDir(spill_parent)
    try:
        # Set at connect, before anything is allocated: a limit set later applies to a pool already in use.
        root = duckdb.connect(
            database=":memory:",
            config={"memory_limit": duckdb_size(limit), "temp_directory": str(spill.path)},
        )
        # Never fetch an extension from the network behind the user's back (s3:// needs httpfs
        # installed beforehand); an assurance tool talks to nothing it was not told to. (Global settings,
        # made here once: a session's connection inherits them and never changes them.)
        root.execute("SET autoinstall_known_extensions = false")
        root.execute(f"SET threads = {threads}")
    except duckdb.Error as exc:
        spill.remove()
        raise AnalyzeError(f"cannot start the analytical engine: {exc}") from exc
    return _Database(root, spill, limit)


def _database(spec: EngineSpec) -> _Database:
    """This process's database for ``spec``'s limits, opened on first use."""
    limit = memory_limit(spec.memory_limit)
    # the cores this process may run on (a container's or taskset's share), not the machine's
    threads = threads_for(limit, _threads() or len(os.sched_getaffinity(0)))
    # the parent as SpillDir resolves it, so a changed variable gets a database of its own
    parent = spec.spill_dir or os.environ.get(SPILL_ENV, "").strip() or ""
    key = (os.getpid(), limit, parent, threads)  # a forked child opens its own: DuckDB's state is not fork-safe
    with _LOCK:
        db = _DATABASES.get(key)
        if db is None:
            db = _DATABASES[key] = _open_database(limit, parent or None, threads)
            if not _AT_EXIT:
                atexit.register(close_databases)
                _AT_EXIT.append(True)
        return db


def _discard(db: _Database) -> None:
    """Close ``db`` and remove its spill directory (idempotent)."""
    try:
        db.root.close()
    finally:
        db.spill.remove()


def close_databases() -> None:
    """Close every database this process opened for sessions and remove their spill directories.

    Sessions still open on them fail from here on; the CLI calls this after its verb, when none is.
    """
    with _LOCK:
        mine = [k for k in _DATABASES if k[0] == os.getpid()]
        dbs = [_DATABASES.pop(k) for k in mine]
    for db in dbs:
        _discard(db)


def _invalidate(db: _Database) -> None:
    """Drop ``db`` after a fatal or internal error: DuckDB refuses every later query on it, and the next
    session must get a database that works, not inherit that state."""
    with _LOCK:
        for key in [k for k, v in _DATABASES.items() if v is db]:
            del _DATABASES[key]
    _discard(db)


class DuckEngine:
    """A connection to this process's in-memory DuckDB database for the spec's limits, bounded in memory and
    spilling to the database's own directory (see :class:`~ringfence.analyze.engine.interface.Engine`)."""

    def __init__(self, spec: EngineSpec | None = None) -> None:
        self._spec = spec or EngineSpec(EngineKind.DUCKDB)
        self._parquet: dict[str, str] = {}
        self._db = _database(self._spec)
        #: The memory limit this connection runs under (bytes).
        self.memory_limit = self._db.limit
        try:
            self._con = self._db.root.cursor()
            # DuckDB draws a progress bar on stdout for a query over ~2 s; stdout carries ringfence's
            # machine output (JSON, YAML), so the bar would corrupt it. (A session option, not a config one.)
            self._con.execute("SET enable_progress_bar = false")
        except duckdb.Error as exc:
            raise AnalyzeError(f"cannot start the analytical engine: {exc}") from exc

    @property
    def spill_dir(self) -> Path:
        """Where this connection spills (its database's directory, removed by :func:`close_databases`)."""
        return self._db.spill.path

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
            # temporary: the connection's own, so no later session on the database sees it
            f"CREATE OR REPLACE TEMP VIEW {name} AS "
            f"SELECT * FROM read_parquet({_quoted(glob)}, hive_partitioning = true)",
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
        except (duckdb.FatalException, duckdb.InternalException) as exc:
            _invalidate(self._db)
            raise AnalyzeError(f"flow analysis failed: {exc}") from exc
        except duckdb.Error as exc:
            raise AnalyzeError(f"flow analysis failed: {exc}") from exc

    def close(self) -> None:
        """Close the connection: its tables and views go with it (the database stays for the next session)."""
        self._con.close()

    def _execute(self, sql: str, path: str) -> None:
        try:
            self._con.execute(sql)
        except duckdb.Error as exc:
            raise InputError(path, f"cannot read as Parquet: {exc}", hint="give Parquet with the flow schema") from exc


__all__ = ["DuckEngine", "close_databases", "parquet_glob"]
