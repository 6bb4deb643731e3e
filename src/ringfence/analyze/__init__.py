"""Join facts with intent in DuckDB: classify flows, the observed vs. approved matrix, breakdowns."""

from ringfence.analyze._duck import AnalyzeError
from ringfence.analyze.classify import FlowInput, classify
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
