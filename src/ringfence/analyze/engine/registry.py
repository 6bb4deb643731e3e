"""The engines, by kind — registered here explicitly, and opened as context managers.

Spark's module (and pyspark, and a JVM) is imported only when a Spark engine is asked for, so the
default DuckDB path and the CLI start-up never pay for it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

import pyarrow as pa

from ringfence.analyze.engine.duck import DuckEngine
from ringfence.analyze.engine.interface import Engine, EngineKind, EngineSpec


def _spark(spec: EngineSpec) -> Engine:
    from ringfence.analyze.engine.spark import SparkEngine

    return SparkEngine(spec)


#: Engine kind → constructor.
ENGINES: dict[EngineKind, Callable[[EngineSpec], Engine]] = {
    EngineKind.DUCKDB: DuckEngine,
    EngineKind.SPARK: _spark,
}


@contextmanager
def session(tables: Mapping[str, pa.Table] | None = None, engine: EngineSpec | None = None) -> Iterator[Engine]:
    """An engine session (DuckDB unless ``engine`` says otherwise) with ``tables`` registered; closed on exit."""
    spec = engine or EngineSpec()
    opened = ENGINES[spec.kind](spec)
    try:
        for name, table in (tables or {}).items():
            opened.register(name, table)
        yield opened
    finally:
        opened.close()


__all__ = ["ENGINES", "session"]
