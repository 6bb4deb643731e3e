"""Where the analysis runs: DuckDB (embedded, default) or Apache Spark — one SQL definition for both."""

from ringfence.analyze.engine.interface import DEFAULT_SPARK_MASTER, AnalyzeError, Engine, EngineKind, EngineSpec
from ringfence.analyze.engine.registry import ENGINES, session

__all__ = ["DEFAULT_SPARK_MASTER", "ENGINES", "AnalyzeError", "Engine", "EngineKind", "EngineSpec", "session"]
