"""The paired gate: baseline and candidate repeats interleaved on the same pair, judged by paired differences.

Run one after the other, a baseline and a candidate see different machines when the load moves
between them, and the move reads as a regression (or hides one). Interleaved (A B | B A | A B …:
each pair adjacent in time, the order alternating so a steady drift cancels), the two arms of a pair
share the machine's state, and the gate judges the **paired log-ratios** d_i = log(cand_i / base_i):

- estimate: the median of d_i over pairs;
- interval: a two-level bootstrap (resample pairs, and within each pair each arm's iterations when
  per-iteration times exist) of that median — for busbw and for p99 alike: a p99 of a few
  iterations is their slowest one, and its sampling error is part of the interval;
- load: the ambient CPU busy share a (:mod:`ringfence.bench.load`) beside each arm bounds how much
  of d_i the load could explain. For a CPU-bound collective the worst case is a throughput in
  proportion to the free CPU, so a pair whose arms saw a_A and a_B may be off by up to
  e_i = |log((1 − a_B)/(1 − a_A))| — or, on a saturated host where busy reads 100 % throughout, by the
  ratio of the CPU shares the run queue leaves (:attr:`~ringfence.bench.load.RepeatLoad.share`),
  whichever is larger. The interval's ends are taken over d_i − e_i and d_i + e_i (the
  median of shifted values is bounded by the shifted medians), so a load move only ever *widens*
  the interval: it can turn an answer into ``inconclusive``, never into a ``fail`` or a ``pass``.

When the load-free interval would have decided but the widened one does not, the reason says that
the load moved more than the budget can resolve and what to rerun.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ringfence.bench.compare import (
    Comparison,
    GateBudget,
    GateVerdict,
    Interval,
    MetricCheck,
    NotComparable,
    SizeComparison,
    decide,
    human_size,
    worst,
)
from ringfence.bench.load import RepeatLoad
from ringfence.bench.run import BenchRun, SizeResult, config_differences
from ringfence.bench.stats import busbw_factor, median
from ringfence.errors import InputError

__all__ = ["METHOD", "PairLoad", "compare_paired", "load_slack"]

METHOD = ("paired: baseline and candidate repeats interleaved (AB|BA…); median of paired log-ratios; "
          "two-level bootstrap CI (pairs, then iterations), widened by the ambient-load move within each pair")

#: Ambient busy shares are clipped here: a fully busy host would make the bound infinite.
_MAX_AMBIENT = 0.95


@dataclass(frozen=True)
class PairLoad:
    """The host load beside both arms of one pair (one :class:`RepeatLoad` per node and arm)."""

    order: str  # "AB": baseline first; "BA": candidate first
    baseline: tuple[RepeatLoad, ...]
    candidate: tuple[RepeatLoad, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {"order": self.order, "baseline": [x.to_dict() for x in self.baseline],
                "candidate": [x.to_dict() for x in self.candidate], "slack": load_slack(self)}


def load_slack(pair: PairLoad) -> float | None:
    """e_i: the largest log-ratio the load move between the arms could explain (None: not observed).

    Two readings of the same move, the larger counts: the ambient busy share (an idle host that got a
    hog) and the run queue's expected CPU share (a saturated host, where busy stays at 100 %).
    """
    base = {x.node: x for x in pair.baseline}
    cand = {x.node: x for x in pair.candidate}
    most: float | None = None
    for node in base.keys() & cand.keys():
        a, b = base[node], cand[node]
        if a.ambient is None or b.ambient is None:
            return None
        e = abs(math.log((1 - min(b.ambient, _MAX_AMBIENT)) / (1 - min(a.ambient, _MAX_AMBIENT))))
        if a.share is not None and b.share is not None:
            e = max(e, abs(math.log(b.share / a.share)))
        most = e if most is None else max(most, e)
    return most


def _iteration_draws(results: Sequence[SizeResult], pick: np.ndarray, rng: np.random.Generator) -> np.ndarray | None:
    """Each picked pair's arm, its iterations resampled: shape (R, n, m); None unless every arm recorded m."""
    iters = [len(r.times_us) for r in results]
    if not all(k > 0 for k in iters) or len(set(iters)) != 1:
        return None
    times = np.array([r.times_us for r in results], dtype=np.float64)  # (n, m)
    inner = rng.integers(0, iters[0], size=(*pick.shape, iters[0]))
    return np.asarray(times[pick[:, :, None], inner])


def _busbw_draws(results: Sequence[SizeResult], pick: np.ndarray, world: int,
                 rng: np.random.Generator) -> np.ndarray:
    """busbw of each picked pair's arm, its iterations resampled when they were recorded: shape (R, n)."""
    drawn = _iteration_draws(results, pick, rng)
    if drawn is not None:
        return np.asarray(results[0].size / drawn.mean(axis=2) / 1e3 * busbw_factor(world))
    flat: np.ndarray = np.array([r.busbw for r in results], dtype=np.float64)[pick]
    return flat


def _p99_draws(results: Sequence[SizeResult], pick: np.ndarray, rng: np.random.Generator) -> np.ndarray | None:
    """p99 of each picked pair's arm over its iterations resampled: shape (R, n); None if none were recorded.

    A p99 of a few iterations is their slowest one: without this level of the bootstrap one slow
    iteration in each candidate arm (a tunnel's handshake, a scheduler hiccup) reads as a certain
    regression of the layer, although another run of the same arm would not have had it.
    """
    drawn = _iteration_draws(results, pick, rng)
    if drawn is None:
        return None
    rank = max(math.ceil(round(0.99 * drawn.shape[2], 9)), 1) - 1  # nearest rank, as stats.nearest_rank
    return np.asarray(np.partition(drawn, rank, axis=2)[:, :, rank])


def _ends(point: float, plain: np.ndarray, low: np.ndarray, high: np.ndarray,
          confidence: float) -> tuple[Interval, Interval]:
    """(load-free, load-widened) intervals of the median log-ratio."""
    alpha = (1.0 - confidence) / 2.0
    p_lo, p_hi = np.quantile(plain, [alpha, 1.0 - alpha])
    w_lo, w_hi = float(np.quantile(low, alpha)), float(np.quantile(high, 1.0 - alpha))
    free = Interval(point, min(float(p_lo), point), max(float(p_hi), point))
    return free, Interval(point, min(w_lo, free.low), max(w_hi, free.high))


def _metric(metric: str, size: int, d_draws: np.ndarray, point: float, slack: np.ndarray, pick: np.ndarray,
            limit: float, budget: GateBudget, base_med: float, cand_med: float) -> tuple[MetricCheck, bool]:
    """One metric's check; the flag says the load widening (not the noise) made it inconclusive."""
    conf = round(budget.confidence * 100)
    e = slack[pick]
    free, wide = _ends(point, np.median(d_draws, axis=1), np.median(d_draws - e, axis=1),
                       np.median(d_draws + e, axis=1), budget.confidence)
    ratio = Interval(math.exp(wide.estimate), math.exp(wide.low), math.exp(wide.high))

    def change(iv: Interval) -> Interval:
        lo, mid, hi = math.exp(iv.low), math.exp(iv.estimate), math.exp(iv.high)
        if metric == "busbw":
            return Interval((1 - mid) * 100, (1 - hi) * 100, (1 - lo) * 100)
        return Interval((mid - 1) * 100, (lo - 1) * 100, (hi - 1) * 100)

    verdict, reason = decide(change(wide), limit, metric, size, conf)
    free_verdict, _ = decide(change(free), limit, metric, size, conf)
    by_load = verdict is GateVerdict.INCONCLUSIVE and free_verdict is not GateVerdict.INCONCLUSIVE
    if by_load:
        f = change(free)
        reason = (f"{reason.split(' straddles')[0]} straddles the {limit:g} % budget only because the host load "
                  f"moved within the pairs (without it: {f.low:.1f} – {f.high:.1f} %, {free_verdict.value})")
    return MetricCheck(metric, base_med, cand_med, ratio, change(wide), limit, verdict, reason), by_load


def _check_size(size: int, base: Sequence[SizeResult], cand: Sequence[SizeResult], slack: np.ndarray,
                world: int, budget: GateBudget, rng: np.random.Generator) -> tuple[SizeComparison, bool]:
    n = len(base)
    pick = rng.integers(0, n, size=(budget.resamples, n))
    b_bw, c_bw = _busbw_draws(base, pick, world, rng), _busbw_draws(cand, pick, world, rng)
    mb, mc = median([r.busbw for r in base]), median([r.busbw for r in cand])
    by_load = False
    if min(r.busbw for r in base) <= 0 or min(r.busbw for r in cand) <= 0:
        bw = MetricCheck("busbw", mb, mc, None, None, budget.busbw_loss_pct, GateVerdict.INCONCLUSIVE,
                         f"a busbw of 0 at {human_size(size)}: nothing to compare")
    else:
        point = median([math.log(c.busbw / b.busbw) for b, c in zip(base, cand, strict=True)])
        bw, by_load = _metric("busbw", size, np.log(c_bw / b_bw), point, slack, pick, budget.busbw_loss_pct,
                              budget, mb, mc)
    bp, cp = [r.p99_us for r in base], [r.p99_us for r in cand]
    if any(p is None or p <= 0 for p in (*bp, *cp)):
        p99 = MetricCheck("p99", None, None, None, None, budget.p99_growth_pct, GateVerdict.INCONCLUSIVE,
                          f"p99 latency not measured at {human_size(size)}: p99 growth cannot be bounded")
    else:
        d = np.log(np.array(cp, dtype=np.float64) / np.array(bp, dtype=np.float64))
        b_p99, c_p99 = _p99_draws(base, pick, rng), _p99_draws(cand, pick, rng)
        d_draws = d[pick] if b_p99 is None or c_p99 is None else np.log(c_p99 / b_p99)
        p99, p_load = _metric("p99", size, d_draws, float(np.median(d)), slack, pick, budget.p99_growth_pct,
                              budget, median([p for p in bp if p is not None]),
                              median([p for p in cp if p is not None]))
        by_load = by_load or p_load
    return SizeComparison(size, bw, p99, worst([bw.verdict, p99.verdict])), by_load


def compare_paired(baseline: BenchRun, candidate: BenchRun, loads: Sequence[PairLoad],
                   budget: GateBudget | None = None) -> Comparison:
    """Judge interleaved runs: repeat i of ``baseline`` and of ``candidate`` form pair i, ``loads[i]`` its load.

    ``loads`` may be empty (no load probe): then the interval is not widened and a reason says the load
    was not observed.
    """
    budget = budget or GateBudget()
    if baseline.config_hash != candidate.config_hash:
        diff = "; ".join(config_differences(baseline.config, candidate.config))
        raise NotComparable(f"the runs are not the same test ({diff})")
    n = len(baseline.repeats)
    if n != len(candidate.repeats) or (loads and len(loads) != n):
        raise InputError("paired runs", f"{n} baseline repeats, {len(candidate.repeats)} candidate repeats and "
                                        f"{len(loads)} load records do not form pairs")
    sizes = list(budget.sizes) or [s for s in baseline.config.sizes if s >= (1 << 20)] or list(baseline.config.sizes)
    slacks = [load_slack(p) for p in loads]
    unobserved = not loads or any(s is None for s in slacks)
    slack = np.array([s or 0.0 for s in slacks] if loads else [0.0] * n, dtype=np.float64)
    rng = np.random.default_rng(budget.seed)
    rows: list[SizeComparison] = []
    load_made_it = False
    for s in sizes:
        base, cand = baseline.per_repeat(s), candidate.per_repeat(s)
        if len(base) != n or len(cand) != n:
            raise InputError("paired runs", f"not every repeat has a result for {human_size(s)}")
        row, by_load = _check_size(s, base, cand, slack, baseline.config.world_size, budget, rng)
        rows.append(row)
        load_made_it = load_made_it or by_load
    verdict = worst([r.verdict for r in rows])
    checks = [c for r in rows for c in (r.busbw, r.p99)]
    fails = sorted((c for c in checks if c.verdict is GateVerdict.FAIL),
                   key=lambda c: (c.metric != "busbw", -(c.change_pct.low if c.change_pct else 0.0)))
    unsure = [c for c in checks if c.verdict is GateVerdict.INCONCLUSIVE]
    reasons = [c.reason for c in fails] + [c.reason for c in unsure]
    if load_made_it and verdict is GateVerdict.INCONCLUSIVE:
        at = int(np.argmax(slack))
        reasons.insert(0, f"the host load moved more than the budget can resolve: in pair {at + 1} of {n} it "
                          f"could explain a {(math.exp(float(slack[at])) - 1) * 100:.0f} % change "
                          f"({_ambient_text(loads[at])}); rerun the interleaved benchmark on a quieter machine")
    if unobserved:
        reasons.append("the host load was not observed beside every repeat: the interval is not widened for it")
    c_wrong, b_wrong = candidate.wrong_total(), baseline.wrong_total()
    if c_wrong:
        verdict = GateVerdict.FAIL
        reasons.insert(0, f"the candidate returned {c_wrong} wrong elements: it corrupts the all-reduce")
    elif b_wrong:
        verdict = GateVerdict.INCONCLUSIVE
        reasons.insert(0, f"the baseline itself returned {b_wrong} wrong elements: fix it before judging a candidate")
    if n < budget.min_repeats and verdict is GateVerdict.PASS:
        verdict = GateVerdict.INCONCLUSIVE
        reasons.insert(0, f"only {n} pair(s); the budget asks for {budget.min_repeats}: run more pairs")
    if n < 2 and verdict is GateVerdict.FAIL and not c_wrong:
        # one pair has no spread between pairs: a drift in time between its two arms (a load that moved, a
        # tunnel's first handshake) reads as the layer's cost, and no interval can tell them apart
        verdict = GateVerdict.INCONCLUSIVE
        reasons.insert(0, "one pair cannot tell a drift in time from the layer's cost: run at least two "
                          "interleaved pairs (A B | B A)")
    if verdict is GateVerdict.PASS:
        worst_bw = max(rows, key=lambda r: r.busbw.change_pct.high if r.busbw.change_pct else 0.0)
        reasons.insert(0, f"inside the budget at all {len(rows)} sizes over {n} interleaved pairs; worst: "
                          f"{worst_bw.busbw.reason}")
    b_cfg, c_cfg = baseline.config, candidate.config
    return Comparison(verdict=verdict, reasons=tuple(reasons), sizes=tuple(rows), budget=budget,
                      config_hash=baseline.config_hash, baseline_label=f"{b_cfg.backend}/{b_cfg.layer}",
                      candidate_label=f"{c_cfg.backend}/{c_cfg.layer}", baseline_repeats=n, candidate_repeats=n,
                      method=METHOD,
                      load=tuple(p.to_dict() for p in loads))


def _ambient_text(pair: PairLoad) -> str:
    def pct(x: RepeatLoad) -> str:
        busy = "?" if x.ambient is None else f"{x.ambient * 100:.0f} %"
        return busy if x.runnable is None else f"{busy}, {x.runnable:.1f} runnable"

    base = ", ".join(f"{x.node} {pct(x)}" for x in pair.baseline)
    cand = ", ".join(f"{x.node} {pct(x)}" for x in pair.candidate)
    return f"ambient CPU busy and run queue beside the baseline: {base}; beside the candidate: {cand}"
