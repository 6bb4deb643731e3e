"""Benchmark facts (``ringfence bench compare --json -o cmp.json``): the budget gate's answer per layer.

The performance side of the verdict: bus bandwidth and p99 latency of a candidate (a protection
layer on) against its unencrypted baseline, with the budget fixed before enabling.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import AwareDatetime

from ringfence.facts.interface import Loaded, Strict, parse

BENCH_FORMAT = "ringfence-bench-compare/1"
HINT = "write it with: ringfence bench compare BASELINE CANDIDATE --policy POLICY --json -o cmp.json"
Gate = Literal["pass", "fail", "inconclusive"]


class IntervalModel(Strict):
    """A point estimate and its confidence interval."""

    estimate: float
    low: float
    high: float


class MetricModel(Strict):
    """One metric at one size."""

    metric: Literal["busbw", "p99"]
    baseline: float | None
    candidate: float | None
    ratio: IntervalModel | None
    change_pct: IntervalModel | None
    limit_pct: float
    verdict: Gate
    reason: str


class SizeModel(Strict):
    """Both metrics at one message size."""

    size: int
    verdict: Gate
    busbw: MetricModel
    p99: MetricModel


class ArmModel(Strict):
    """One arm of the comparison."""

    label: str
    repeats: int


class BenchDoc(Strict):
    """A comparison as ``bench compare --json`` writes it."""

    format: Literal["ringfence-bench-compare/1"]
    taken: AwareDatetime
    verdict: Gate
    reasons: list[str]
    config_hash: str
    baseline: ArmModel
    candidate: ArmModel
    budget: dict[str, Any]
    method: str
    sizes: list[SizeModel]


def load(path: str | Path, data: bytes | None = None) -> Loaded:
    """One comparison (plain JSON values) and when it was made;
    ``data``: the file's bytes, if already read."""
    doc = parse(path, BenchDoc, "benchmark comparison", HINT, fmt=BENCH_FORMAT, data=data)
    return Loaded("bench", str(path), doc.model_dump(mode="json"), doc.taken)


__all__ = ["BENCH_FORMAT", "BenchDoc", "load"]
