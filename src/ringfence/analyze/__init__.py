"""Join facts with intent in DuckDB or Spark (one SQL): classify flows, the observed vs. approved matrix, breakdowns."""

from ringfence.analyze.classify import FlowInput, classify
from ringfence.analyze.engine import AnalyzeError, EngineKind, EngineSpec
from ringfence.analyze.matrix import (
    BREAKDOWN_SCHEMA,
    MATRIX_SCHEMA,
    communication_matrix,
    group_flows,
    protection_breakdown,
)
from ringfence.analyze.plan import Plan, compile_plan, rule_range
from ringfence.analyze.ports import Segments

__all__ = [
    "BREAKDOWN_SCHEMA",
    "MATRIX_SCHEMA",
    "AnalyzeError",
    "EngineKind",
    "EngineSpec",
    "FlowInput",
    "Plan",
    "Segments",
    "classify",
    "communication_matrix",
    "compile_plan",
    "group_flows",
    "protection_breakdown",
    "rule_range",
]
