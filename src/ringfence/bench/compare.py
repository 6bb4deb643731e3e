"""The comparison gate: is the candidate inside the performance budget of the baseline?

Per message size that matters, the gate compares the *median over repeats* of bus bandwidth and
of p99 latency, and puts a confidence interval on each ratio with a two-level bootstrap: resample
the repeats, and — for bandwidth — within each resampled repeat its iterations (when per-iteration
times exist), then take the medians again. That interval carries both run-to-run noise (the
dominant kind on shared machines) and within-run noise. p99 is resampled over repeats only. The
decision never rounds noise into a pass:

- ``pass`` — the whole interval of the loss (growth) is within the budget;
- ``fail`` — the whole interval is beyond it;
- ``inconclusive`` — the interval straddles the limit: the noise is wider than the budget; rerun
  with more repeats. Also when fewer repeats than the budget's ``min_repeats`` were taken (a
  would-be pass is not trusted), when a metric was not measured, or the baseline itself is broken.

A candidate that returns wrong sums fails whatever its speed. Runs whose configuration hashes
differ are not compared at all (:class:`NotComparable`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np

from ringfence.bench.run import BenchRun, SizeResult, config_differences
from ringfence.bench.stats import busbw_factor, median
from ringfence.errors import InputError, RingfenceError
from ringfence.policy import Budget

__all__ = [
    "DEFAULT_MIN_SIZE",
    "Comparison",
    "GateBudget",
    "GateVerdict",
    "Interval",
    "MetricCheck",
    "NotComparable",
    "SizeComparison",
    "compare_runs",
    "decide",
    "human_size",
    "worst",
]

#: Without sizes named by the policy, sizes below this are left out: they are latency-bound and
#: their printed busbw (nccl-tests rounds to 0.01 GB/s) carries no information.
DEFAULT_MIN_SIZE = 1 << 20


class GateVerdict(StrEnum):
    """The three answers of the gate."""

    PASS = "pass"
    FAIL = "fail"
    INCONCLUSIVE = "inconclusive"


class NotComparable(RingfenceError):
    """The two runs are not the same test (their configuration hashes differ)."""


@dataclass(frozen=True)
class GateBudget:
    """The performance budget, fixed before the candidate exists."""

    busbw_loss_pct: float = 5.0
    p99_growth_pct: float = 25.0
    sizes: tuple[int, ...] = ()  # empty: every size ≥ DEFAULT_MIN_SIZE
    min_repeats: int = 3
    confidence: float = 0.95
    resamples: int = 2000
    seed: int = 20240917  # fixed: the same runs always give the same answer

    @classmethod
    def from_policy(cls, budget: Budget, **overrides: Any) -> GateBudget:
        """The policy's budget (``budget:`` in ringfence.yaml), with optional overrides."""
        base = cls(busbw_loss_pct=budget.busbw_loss_pct, p99_growth_pct=budget.p99_growth_pct,
                   sizes=tuple(budget.sizes), min_repeats=budget.min_repeats)
        return cls(**{**base.to_dict(), **overrides})

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (for evidence)."""
        return {"busbw_loss_pct": self.busbw_loss_pct, "p99_growth_pct": self.p99_growth_pct,
                "sizes": list(self.sizes), "min_repeats": self.min_repeats, "confidence": self.confidence,
                "resamples": self.resamples, "seed": self.seed}


@dataclass(frozen=True)
class Interval:
    """A point estimate and its confidence interval."""

    estimate: float
    low: float
    high: float

    def to_dict(self) -> dict[str, float]:
        """JSON-able form."""
        return {"estimate": self.estimate, "low": self.low, "high": self.high}


@dataclass(frozen=True)
class MetricCheck:
    """One metric at one size: medians, their ratio, the change in % and the verdict."""

    metric: str  # "busbw" or "p99"
    baseline: float | None  # median over repeats (GB/s or µs)
    candidate: float | None
    ratio: Interval | None  # candidate / baseline
    change_pct: Interval | None  # busbw: loss = (1 − ratio)·100; p99: growth = (ratio − 1)·100
    limit_pct: float
    verdict: GateVerdict
    reason: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {"metric": self.metric, "baseline": self.baseline, "candidate": self.candidate,
                "ratio": self.ratio.to_dict() if self.ratio else None,
                "change_pct": self.change_pct.to_dict() if self.change_pct else None,
                "limit_pct": self.limit_pct, "verdict": self.verdict.value, "reason": self.reason}


@dataclass(frozen=True)
class SizeComparison:
    """Both metrics at one message size."""

    size: int
    busbw: MetricCheck
    p99: MetricCheck
    verdict: GateVerdict


@dataclass(frozen=True)
class Comparison:
    """The gate's answer, with the numbers behind it."""

    verdict: GateVerdict
    reasons: tuple[str, ...]  # why, in numbers; the first is the headline
    sizes: tuple[SizeComparison, ...]
    budget: GateBudget
    config_hash: str
    baseline_label: str
    candidate_label: str
    baseline_repeats: int
    candidate_repeats: int
    method: str = field(default="median over repeats; two-level bootstrap CI (repeats, then iterations)")
    load: tuple[dict[str, Any], ...] = ()  # the paired gate's host load beside each pair (bench.paired)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (for ``--output`` and the evidence store)."""
        return {
            "verdict": self.verdict.value,
            "reasons": list(self.reasons),
            "config_hash": self.config_hash,
            "baseline": {"label": self.baseline_label, "repeats": self.baseline_repeats},
            "candidate": {"label": self.candidate_label, "repeats": self.candidate_repeats},
            "budget": self.budget.to_dict(),
            "method": self.method,
            **({"load": list(self.load)} if self.load else {}),
            "sizes": [{"size": s.size, "verdict": s.verdict.value, "busbw": s.busbw.to_dict(), "p99": s.p99.to_dict()}
                      for s in self.sizes],
        }

    def summary(self) -> str:
        """A text table for the terminal."""
        conf = round(self.budget.confidence * 100)
        lines = [
            f"verdict: {self.verdict.value.upper()} — {self.reasons[0]}",
            f"baseline {self.baseline_label} ({self.baseline_repeats} repeats) vs candidate {self.candidate_label} "
            f"({self.candidate_repeats} repeats); same test {self.config_hash[:19]}…",
            f"budget: busbw loss ≤ {self.budget.busbw_loss_pct:g} %, p99 growth ≤ {self.budget.p99_growth_pct:g} %; "
            f"{conf} % intervals",
            f"{'size':>9}  {'busbw base':>10}  {'cand':>8}  {'loss % [CI]':<24}  {'p99 base µs':>11}  {'cand':>9}  "
            f"{'growth % [CI]':<26}  verdict",
        ]
        lines.extend(
            f"{human_size(s.size):>9}  {_fmt(s.busbw.baseline, 10, 3)}  {_fmt(s.busbw.candidate, 8, 3)}  "
            f"{_ci(s.busbw.change_pct):<24}  {_fmt(s.p99.baseline, 11, 0)}  {_fmt(s.p99.candidate, 9, 0)}  "
            f"{_ci(s.p99.change_pct):<26}  {s.verdict.value}"
            for s in self.sizes
        )
        lines.extend(f"- {r}" for r in self.reasons[1:])
        return "\n".join(lines)


def human_size(n: int) -> str:
    """``1048576`` → ``1 MiB``."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def _fmt(v: float | None, width: int, digits: int) -> str:
    return f"{'—':>{width}}" if v is None else f"{v:>{width}.{digits}f}"


def _ci(iv: Interval | None) -> str:
    return "—" if iv is None else f"{iv.estimate:.1f} [{iv.low:.1f}, {iv.high:.1f}]"


# --- the bootstrap --------------------------------------------------------------------------------


def _side_samples(results: Sequence[SizeResult], world: int, rng: np.random.Generator,
                  resamples: int) -> tuple[np.ndarray, np.ndarray | None]:
    """Bootstrap distributions of (median busbw, median p99) over repeats for one side."""
    k = len(results)
    pick = rng.integers(0, k, size=(resamples, k))
    iters = [len(r.times_us) for r in results]
    if all(n > 0 for n in iters) and len(set(iters)) == 1:
        m = iters[0]
        times = np.array([r.times_us for r in results], dtype=np.float64)  # (k, m)
        inner = rng.integers(0, m, size=(resamples, k, m))
        drawn = times[pick[:, :, None], inner]  # (R, k, m)
        size = results[0].size
        busbw = size / drawn.mean(axis=2) / 1e3 * busbw_factor(world)  # bytes/µs/1e3 = GB/s
        med_bw = np.median(busbw, axis=1)
    else:
        med_bw = np.median(np.array([r.busbw for r in results], dtype=np.float64)[pick], axis=1)
    # p99 is resampled over repeats only: re-drawing iterations would mostly lose the tail it is about
    # (the p99 of 20 iterations is their maximum, which a resample misses 36 % of the time).
    p99s = [r.p99_us for r in results]
    if any(p is None for p in p99s):
        return med_bw, None
    return med_bw, np.median(np.array(p99s, dtype=np.float64)[pick], axis=1)


def _interval(point: float, dist: np.ndarray, confidence: float) -> Interval:
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(dist, [alpha, 1.0 - alpha])
    # The percentile interval of a skewed ratio can miss the point estimate with few repeats.
    return Interval(point, min(float(lo), point), max(float(hi), point))


def decide(change: Interval, limit: float, metric: str, size: int, conf: int) -> tuple[GateVerdict, str]:
    """The verdict of one change interval against its limit, with the reason in numbers."""
    what = "busbw loss" if metric == "busbw" else "p99 growth"
    text = (f"{what} {change.estimate:.1f} % ({conf} % CI {change.low:.1f} – {change.high:.1f} %) "
            f"at {human_size(size)}")
    if change.high <= limit:
        return GateVerdict.PASS, f"{text} is within the {limit:g} % budget"
    if change.low > limit:
        return GateVerdict.FAIL, f"{text} exceeds the {limit:g} % budget"
    return GateVerdict.INCONCLUSIVE, f"{text} straddles the {limit:g} % budget: noise wider than the budget, rerun"


def _check_size(size: int, base: Sequence[SizeResult], cand: Sequence[SizeResult], world: int,
                budget: GateBudget, rng: np.random.Generator) -> SizeComparison:
    conf = round(budget.confidence * 100)
    b_bw, b_p99 = _side_samples(base, world, rng, budget.resamples)
    c_bw, c_p99 = _side_samples(cand, world, rng, budget.resamples)
    mb, mc = median([r.busbw for r in base]), median([r.busbw for r in cand])
    if mb <= 0:
        bw = MetricCheck("busbw", mb, mc, None, None, budget.busbw_loss_pct, GateVerdict.INCONCLUSIVE,
                         f"baseline busbw is 0 at {human_size(size)}: nothing to compare against")
    else:
        ratio = _interval(mc / mb, c_bw / np.maximum(b_bw, 1e-300), budget.confidence)
        loss = Interval((1 - ratio.estimate) * 100, (1 - ratio.high) * 100, (1 - ratio.low) * 100)
        verdict, reason = decide(loss, budget.busbw_loss_pct, "busbw", size, conf)
        bw = MetricCheck("busbw", mb, mc, ratio, loss, budget.busbw_loss_pct, verdict, reason)
    bp, cp = [r.p99_us for r in base], [r.p99_us for r in cand]
    if b_p99 is None or c_p99 is None or any(p is None for p in (*bp, *cp)):
        p99 = MetricCheck("p99", None, None, None, None, budget.p99_growth_pct, GateVerdict.INCONCLUSIVE,
                          f"p99 latency not measured at {human_size(size)} (nccl-tests without per-iteration "
                          f"timing -I?): p99 growth cannot be bounded")
    else:
        pb = median([p for p in bp if p is not None])
        pc = median([p for p in cp if p is not None])
        ratio = _interval(pc / pb, c_p99 / np.maximum(b_p99, 1e-300), budget.confidence)
        growth = Interval((ratio.estimate - 1) * 100, (ratio.low - 1) * 100, (ratio.high - 1) * 100)
        verdict, reason = decide(growth, budget.p99_growth_pct, "p99", size, conf)
        p99 = MetricCheck("p99", pb, pc, ratio, growth, budget.p99_growth_pct, verdict, reason)
    return SizeComparison(size, bw, p99, worst([bw.verdict, p99.verdict]))


def worst(verdicts: Sequence[GateVerdict]) -> GateVerdict:
    """fail over inconclusive over pass (nothing to judge is inconclusive)."""
    if GateVerdict.FAIL in verdicts:
        return GateVerdict.FAIL
    if GateVerdict.INCONCLUSIVE in verdicts or not verdicts:
        return GateVerdict.INCONCLUSIVE
    return GateVerdict.PASS


def _label(run: BenchRun) -> str:
    return f"{run.config.backend}/{run.config.layer}"


def compare_runs(baseline: BenchRun, candidate: BenchRun, budget: GateBudget | None = None) -> Comparison:
    """Judge ``candidate`` against ``baseline`` under ``budget`` (see the module docstring)."""
    budget = budget or GateBudget()
    if baseline.config_hash != candidate.config_hash:
        diff = "; ".join(config_differences(baseline.config, candidate.config))
        raise NotComparable(
            f"the runs are not the same test ({diff})",
            hint="measure both with the same sizes, dtype, nodes, iterations and software; only backend, "
                 "layer and interfaces may differ",
        )
    common = [s for s in baseline.config.sizes if s in candidate.config.sizes]
    if budget.sizes:
        missing = [human_size(s) for s in budget.sizes if s not in common]
        if missing:
            raise InputError("budget.sizes", f"the runs have no results for {', '.join(missing)}")
        sizes = list(budget.sizes)
    else:
        sizes = [s for s in common if s >= DEFAULT_MIN_SIZE] or common
    rng = np.random.default_rng(budget.seed)
    world = baseline.config.world_size
    rows: list[SizeComparison] = []
    for s in sizes:
        base, cand = baseline.per_repeat(s), candidate.per_repeat(s)
        if not base or not cand:
            raise InputError("run", f"a run has no result for {human_size(s)}")
        rows.append(_check_size(s, base, cand, world, budget, rng))

    reasons: list[str] = []
    verdict = worst([r.verdict for r in rows])
    c_wrong, b_wrong = candidate.wrong_total(), baseline.wrong_total()
    if c_wrong:
        verdict = GateVerdict.FAIL
        reasons.append(f"the candidate returned {c_wrong} wrong elements: it corrupts the all-reduce")
    if b_wrong and verdict is not GateVerdict.FAIL:
        verdict = GateVerdict.INCONCLUSIVE
        reasons.append(f"the baseline itself returned {b_wrong} wrong elements: fix it before judging a candidate")
    fails = [c for r in rows for c in (r.busbw, r.p99) if c.verdict is GateVerdict.FAIL]
    unsure = [c for r in rows for c in (r.busbw, r.p99) if c.verdict is GateVerdict.INCONCLUSIVE]
    # Lead with the largest bandwidth loss (the budget's first term), then p99 growth.
    fails.sort(key=lambda c: (c.metric != "busbw", -(c.change_pct.low if c.change_pct else 0.0)))
    reasons += [c.reason for c in fails] + [c.reason for c in unsure if c.change_pct is not None]
    unmeasured = [c for c in unsure if c.change_pct is None]
    if len(unmeasured) == 1:
        reasons.append(unmeasured[0].reason)
    elif unmeasured:
        names = sorted({c.metric for c in unmeasured})
        reasons.append(f"{' and '.join(names)} not measured at {len(unmeasured)} size(s), e.g. "
                       f"{unmeasured[0].reason}")
    if max(len(baseline.repeats), len(candidate.repeats)) == 1 and not any(
            r.times_us for run in (baseline, candidate) for rep in run.repeats for r in rep.results):
        reasons.append("single repeats without per-iteration times: the intervals carry no noise estimate")
    few = min(len(baseline.repeats), len(candidate.repeats))
    if few < budget.min_repeats:
        note = (f"only {few} repeat(s) on one side; the budget asks for {budget.min_repeats}: "
                f"run more repeats (bench allreduce --repeats, or --append)")
        if verdict is GateVerdict.PASS:
            verdict = GateVerdict.INCONCLUSIVE
            reasons.insert(0, note)
        else:
            reasons.append(note)
    if verdict is GateVerdict.PASS:
        worst_bw = max(rows, key=lambda r: r.busbw.change_pct.high if r.busbw.change_pct else 0.0)
        reasons.insert(0, f"inside the budget at all {len(rows)} sizes; worst: {worst_bw.busbw.reason}")
    return Comparison(
        verdict=verdict, reasons=tuple(reasons), sizes=tuple(rows), budget=budget,
        config_hash=baseline.config_hash, baseline_label=_label(baseline), candidate_label=_label(candidate),
        baseline_repeats=len(baseline.repeats), candidate_repeats=len(candidate.repeats),
    )
