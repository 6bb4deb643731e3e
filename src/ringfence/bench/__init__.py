"""The all-reduce benchmark: measure (torch.distributed across nodes), import (nccl-tests), gate.

busbw = algbw · 2(n−1)/n as nccl-tests defines it; p50/p99 by nearest rank over iterations whose
time is the slowest rank's. Runs with equal configuration hashes are the same test; the gate
(:func:`compare_runs`) answers pass, fail or inconclusive. See ``docs/benchmark.md``.
"""

from ringfence.bench.compare import (
    Comparison,
    GateBudget,
    GateVerdict,
    NotComparable,
    SizeComparison,
    compare_runs,
)
from ringfence.bench.driver import DEFAULT_SIZES, BenchError, BenchSpec, Progress, RankSpec, run_allreduce
from ringfence.bench.nccl_tests import NcclTestsError, NcclTestsReport, import_nccl_tests
from ringfence.bench.plot import comparison_charts, svg_chart
from ringfence.bench.run import LABEL_FIELDS, BenchConfig, BenchRun, Repeat, SizeResult, load_run, save_run
from ringfence.bench.stats import algbw_gbps, busbw_factor, busbw_gbps, nearest_rank

__all__ = [
    "DEFAULT_SIZES",
    "LABEL_FIELDS",
    "BenchConfig",
    "BenchError",
    "BenchRun",
    "BenchSpec",
    "Comparison",
    "GateBudget",
    "GateVerdict",
    "NcclTestsError",
    "NcclTestsReport",
    "NotComparable",
    "Progress",
    "RankSpec",
    "Repeat",
    "SizeComparison",
    "SizeResult",
    "algbw_gbps",
    "busbw_factor",
    "busbw_gbps",
    "compare_runs",
    "comparison_charts",
    "import_nccl_tests",
    "load_run",
    "nearest_rank",
    "run_allreduce",
    "save_run",
    "svg_chart",
]
