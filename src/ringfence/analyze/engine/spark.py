"""Apache Spark as the analytical engine, for flow datasets beyond one machine — and the one place
that translates Spark's (and sqlglot's) exceptions.

The analysis SQL is DuckDB's dialect; sqlglot transpiles it to Spark SQL here, so the query Spark
runs is the same definition DuckDB runs (``//`` becomes ``DIV``, ``regexp_matches`` ``RLIKE``,
``string_agg`` ``LISTAGG`` …). Everything is an equality join or a CASE tree — address and port
ranges were compiled to integer classes and segments — so Spark needs no range-join optimisation
(a Databricks feature, not open-source Spark's).

A Spark session is expensive to start (a JVM: seconds to tens of seconds), so one session per master
is kept for the process; each :class:`SparkEngine` drops the views it created when it closes.

*Memory.* ``--memory-limit`` (else ``RINGFENCE_DUCKDB_MEMORY``, else half the machine, as for DuckDB) becomes
``spark.driver.memory``, the JVM's heap, which in ``local[N]`` mode is the executor too; on a cluster master it
sizes the driver only when given (the executors' memory is the cluster's own configuration). ``--spill-dir``
(else the variable, else the temporary directory) holds a fresh ``ringfence-spark-*`` directory as
``spark.local.dir`` in local mode, where Spark spills shuffles and sorts; it goes when the session stops. The heap
is fixed when the JVM starts, and PySpark keeps one JVM per process: a later session asking for another heap is
refused, never silently run under the first one's.
"""

from __future__ import annotations

import os
import shutil
from typing import Any

import pyarrow as pa
import sqlglot
import sqlglot.errors

from ringfence.analyze.engine.duck import parquet_glob
from ringfence.analyze.engine.interface import DEFAULT_SPARK_MASTER, AnalyzeError, EngineKind, EngineSpec
from ringfence.analyze.engine.limits import SpillDir, memory_limit
from ringfence.errors import EnvironmentProblem, InputError

_sessions: dict[str, Any] = {}
_spills: dict[str, SpillDir] = {}
#: the driver heap the process's JVM was started with (PySpark keeps one JVM per process)
_jvm_heap: list[str] = []


def _spark_errors() -> tuple[type[BaseException], ...]:
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    return PySparkException, Py4JError


def stop_sessions() -> None:
    """Stop every Spark session this process started (its JVM goes with it).

    Sessions are kept for the life of the process so that one assessment pays the JVM start once; a
    long-lived caller (a test run, a service) that is done with Spark calls this to give back the JVM's
    memory and cores.
    """
    while _sessions:
        master, session = _sessions.popitem()
        session.stop()
        spill = _spills.pop(master, None)
        if spill is not None:
            spill.remove()


def _is_local(master: str) -> bool:
    return master == "local" or master.startswith("local[")


def driver_heap(spec: EngineSpec) -> str | None:
    """``spark.driver.memory`` for ``spec`` (``512m``): the memory limit in local mode (the driver is the
    executor), on a cluster only when one was given; None leaves Spark's own setting."""
    master = spec.master or DEFAULT_SPARK_MASTER
    if not _is_local(master) and spec.memory_limit is None:
        return None
    return f"{max(1, memory_limit(spec.memory_limit) // 2**20)}m"


def _session(spec: EngineSpec) -> Any:
    master = spec.master or DEFAULT_SPARK_MASTER
    heap = driver_heap(spec)
    if heap is not None and _jvm_heap and _jvm_heap[0] != heap:
        raise AnalyzeError(
            f"this process's Spark JVM runs with a {_jvm_heap[0]} driver heap; {heap} was asked for, and a JVM's "
            "heap is fixed when it starts",
            hint="run the analysis in a fresh process with the memory limit you want",
        )
    if master in _sessions:
        return _sessions[master]
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise EnvironmentProblem(
            "the Spark engine needs Java 17 or newer, and none is installed",
            hint="run `make sysdeps` (installs openjdk-17-jre-headless) or set JAVA_HOME",
        )
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise EnvironmentProblem("the Spark engine needs pyspark", hint="run `make install`") from exc
    partitions = os.environ.get("RINGFENCE_SPARK_PARTITIONS", "8")
    failures: tuple[type[BaseException], ...] = (*_spark_errors(), RuntimeError)
    spill = SpillDir(spec.spill_dir, engine="spark") if _is_local(master) else None
    builder = SparkSession.builder
    if heap is not None:
        builder = builder.config("spark.driver.memory", heap)
    if spill is not None:
        builder = builder.config("spark.local.dir", str(spill.path))
    try:
        session = (
            builder.master(master)
            .appName("ringfence")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")  # no progress bars on stdout: it carries data
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.sql.shuffle.partitions", partitions)
            .config("spark.sql.execution.arrow.pyspark.enabled", "true")
            # Flow files carry nanosecond timestamps, which Spark cannot represent: read them as int64.
            .config("spark.sql.legacy.parquet.nanosAsLong", "true")
            .getOrCreate()
        )
        session.sparkContext.setLogLevel("ERROR")
    except failures as exc:
        if spill is not None:
            spill.remove()
        raise AnalyzeError(f"cannot start Spark at {master}: {exc}", hint="check the master URL and Java") from exc
    _sessions[master] = session
    if spill is not None:
        _spills[master] = spill
    if not _jvm_heap:
        _jvm_heap.append(str(session.sparkContext.getConf().get("spark.driver.memory", heap or "1g")))
    return session


def _spark_type(t: pa.DataType) -> pa.DataType:
    # Spark has no unsigned integers, no nanosecond timestamps, no dictionary columns.
    if pa.types.is_dictionary(t):
        return _spark_type(t.value_type)
    widen = {pa.uint8(): pa.int16(), pa.uint16(): pa.int32(), pa.uint32(): pa.int64(), pa.uint64(): pa.int64()}
    if t in widen:
        return widen[t]
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", tz=t.tz)
    if pa.types.is_large_string(t):
        return pa.string()
    return t


def to_spark_sql(sql: str) -> str:
    """The DuckDB-dialect analysis SQL as Spark SQL."""
    try:
        out = sqlglot.transpile(sql, read="duckdb", write="spark")
    except sqlglot.errors.SqlglotError as exc:
        raise AnalyzeError(f"cannot translate the analysis to Spark SQL: {exc}") from exc
    if len(out) != 1:
        raise AnalyzeError("the analysis SQL must be one statement")
    return out[0]


class SparkEngine:
    """A Spark SQL session (see :class:`~ringfence.analyze.engine.interface.Engine`)."""

    def __init__(self, spec: EngineSpec | None = None) -> None:
        self._spec = spec or EngineSpec(EngineKind.SPARK)
        self._spark = _session(self._spec)
        self._views: list[str] = []

    @property
    def spec(self) -> EngineSpec:
        """Which engine this is."""
        return self._spec

    def register(self, name: str, table: pa.Table) -> None:
        """Make an Arrow table a temporary view (copied to the JVM)."""
        schema = pa.schema([pa.field(f.name, _spark_type(f.type), f.nullable) for f in table.schema])
        try:
            frame = self._spark.createDataFrame(table.cast(schema))
            frame.createOrReplaceTempView(name)
        except (*_spark_errors(), pa.ArrowException) as exc:
            raise AnalyzeError(f"cannot register table {name} in Spark: {exc}") from exc
        self._views.append(name)

    def register_parquet(self, name: str, path: str) -> None:
        """A view over a Parquet file, directory (partition directories become columns) or glob."""
        target = parquet_glob(path)
        if target.endswith("/**/*.parquet"):
            target = target.removesuffix("/**/*.parquet")  # Spark discovers hive partitions itself
        try:
            self._spark.read.parquet(target).createOrReplaceTempView(name)
        except _spark_errors() as exc:
            raise InputError(path, f"Spark cannot read it as Parquet: {exc}") from exc
        self._views.append(name)

    def column_names(self, name: str) -> tuple[str, ...]:
        """The columns of a registered view."""
        try:
            return tuple(self._spark.table(name).columns)
        except _spark_errors() as exc:
            raise AnalyzeError(f"no table {name} in Spark: {exc}") from exc

    def any_present(self, name: str, columns: tuple[str, ...]) -> bool:
        """Non-null anywhere in ``columns``? (Stops at the first such row.)"""
        cond = " OR ".join(f'"{c}" IS NOT NULL' for c in columns)
        return bool(self.query(f"SELECT 1 AS one FROM {name} WHERE {cond} LIMIT 1").num_rows > 0)

    def query(self, sql: str) -> pa.Table:
        """Transpile ``sql`` to Spark SQL, run it, collect the result as Arrow."""
        text = to_spark_sql(sql)
        try:
            result: pa.Table = self._spark.sql(text).toArrow()
        except _spark_errors() as exc:
            raise AnalyzeError(f"flow analysis failed on Spark: {exc}") from exc
        return result

    def close(self) -> None:
        """Drop this session's views; the Spark session stays up for the next analysis."""
        for name in self._views:
            self._spark.catalog.dropTempView(name)
        self._views.clear()


__all__ = ["SparkEngine", "driver_heap", "stop_sessions", "to_spark_sql"]
