"""What an analytical engine is to ringfence: a place to register tables and run one SQL text.

The analysis (classification, the matrix check, the breakdowns, discovery's aggregation) is written
once, as SQL in DuckDB's dialect, in :mod:`ringfence.analyze`. An engine registers Arrow tables and
Parquet datasets under names and runs that SQL: DuckDB as it is, Spark after sqlglot has transpiled
it to Spark SQL. No analysis module knows which engine runs it — so there are never two hand-kept
copies of a query to drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

import pyarrow as pa

from ringfence.errors import RingfenceError


class AnalyzeError(RingfenceError):
    """The analytical engine failed (bad SQL input, out of memory, unreadable Parquet, no Java)."""


class EngineKind(StrEnum):
    """The engines ringfence can run its analysis on."""

    DUCKDB = "duckdb"
    SPARK = "spark"


#: Spark master when ``--engine spark`` names none: two local cores, what CI has.
DEFAULT_SPARK_MASTER = "local[2]"


@dataclass(frozen=True)
class EngineSpec:
    """Which engine, and for Spark where its master is (``local[N]``, ``spark://host:7077``, ``yarn``).

    ``memory_limit`` (bytes) and ``spill_dir`` bound a DuckDB connection (``--memory-limit``,
    ``--spill-dir``), and a local Spark's driver heap and ``spark.local.dir`` (see
    :mod:`ringfence.analyze.engine.spark`); None takes the defaults of :mod:`ringfence.analyze.engine.limits`.
    """

    kind: EngineKind = EngineKind.DUCKDB
    master: str | None = None
    memory_limit: int | None = None
    spill_dir: str | None = None

    @classmethod
    def parse(cls, text: str) -> EngineSpec:
        """``duckdb``, ``spark`` or ``spark=MASTER-URL`` (what ``--engine`` takes)."""
        name, sep, master = text.strip().partition("=")
        try:
            kind = EngineKind(name.strip().lower())
        except ValueError:
            raise AnalyzeError(
                f"unknown engine {name!r}", hint="use --engine duckdb, spark or spark=MASTER-URL (e.g. spark=local[4])"
            ) from None
        if sep and kind is EngineKind.DUCKDB:
            raise AnalyzeError("the duckdb engine takes no master URL", hint="use --engine duckdb")
        if sep and not master.strip():
            raise AnalyzeError("empty Spark master URL", hint="e.g. --engine spark=local[4] or spark=spark://host:7077")
        return cls(kind, master.strip() or None if kind is EngineKind.SPARK else None)

    def describe(self) -> str:
        """``duckdb`` or ``spark=MASTER``."""
        if self.kind is EngineKind.SPARK:
            return f"spark={self.master or DEFAULT_SPARK_MASTER}"
        return str(self.kind.value)


class Engine(Protocol):
    """One open engine session. SQL given to :meth:`query` is DuckDB's dialect (the one definition)."""

    @property
    def spec(self) -> EngineSpec:
        """Which engine this is."""
        ...

    def register(self, name: str, table: pa.Table) -> None:
        """Make an Arrow table visible to SQL as ``name``."""
        ...

    def register_parquet(self, name: str, path: str) -> None:
        """Make a Parquet file, directory (hive-partitioned, e.g. ``day=…/hour=…``) or glob visible as ``name``."""
        ...

    def column_names(self, name: str) -> tuple[str, ...]:
        """The columns of a registered table."""
        ...

    def any_present(self, name: str, columns: tuple[str, ...]) -> bool:
        """Whether any row of ``name`` has a non-null value in one of ``columns`` (all present in it)."""
        ...

    def query(self, sql: str) -> pa.Table:
        """Run ``sql`` and return the result as an Arrow table, in the order the SQL asks for."""
        ...

    def close(self) -> None:
        """Release what this session holds."""
        ...


__all__ = ["DEFAULT_SPARK_MASTER", "AnalyzeError", "Engine", "EngineKind", "EngineSpec"]
