"""The paired gate on synthetic interleaved series: steady loss, a load step, noise, load beyond the budget."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest
from bench_synth import CFG

from ringfence.bench.compare import GateBudget, GateVerdict, NotComparable, compare_runs
from ringfence.bench.load import RepeatLoad
from ringfence.bench.paired import PairLoad, compare_paired, load_slack
from ringfence.bench.run import BenchConfig, BenchRun, Repeat, size_result_from_times
from ringfence.errors import InputError

CFG4 = BenchConfig(tool="ringfence", sizes=CFG.sizes, dtype="float32", world_size=2, nodes=("a", "b"), warmup=2,
                   iterations=20)


def _repeat(scale: float, rng: random.Random, noise: float) -> Repeat:
    return Repeat(tuple(size_result_from_times(s, s // 4, [s / 1e3 * scale * (1 + rng.uniform(-noise, noise))
                                                           for _ in range(CFG4.iterations)], 2, 0)
                        for s in CFG4.sizes))


def _series(scales: Sequence[tuple[float, float]], *, noise: float = 0.01, seed: int = 1) -> tuple[BenchRun, BenchRun]:
    """Pair i: baseline iterations take size/1 GB/s × scales[i][0], candidate × scales[i][1]."""
    rng = random.Random(seed)
    base = tuple(_repeat(b, rng, noise) for b, _ in scales)
    cand = tuple(_repeat(c, rng, noise) for _, c in scales)
    return BenchRun(CFG4, base), BenchRun(CFG4.__class__(**{**CFG4.__dict__, "layer": "cand"}), cand)


def _load(node_ambient: float) -> tuple[RepeatLoad, ...]:
    return tuple(RepeatLoad(n, node_ambient, node_ambient, 0.9, 1.0, 1.0) for n in ("a", "b"))


def _loads(ambients: Sequence[tuple[float, float]]) -> list[PairLoad]:
    return [PairLoad("AB" if i % 2 == 0 else "BA", _load(a), _load(b)) for i, (a, b) in enumerate(ambients)]


def test_a_steady_40_percent_loss_fails() -> None:
    base, cand = _series([(1.0, 1 / 0.6)] * 6)
    res = compare_paired(base, cand, _loads([(0.1, 0.1)] * 6))
    assert res.verdict is GateVerdict.FAIL, res.summary()
    loss = res.sizes[0].busbw.change_pct
    assert loss is not None and loss.estimate == pytest.approx(40, abs=1.5)
    assert "exceeds the 5 % budget" in res.reasons[0]
    assert res.to_dict()["load"][0]["order"] == "AB" and "paired" in res.method


def test_a_40_percent_loss_still_fails_while_the_load_moves() -> None:
    """The load widens the interval, but a loss far beyond what the load could explain still fails."""
    rng = random.Random(3)
    ambients = [(rng.uniform(0.0, 0.3), rng.uniform(0.0, 0.3)) for _ in range(6)]
    base, cand = _series([(1 / (1 - a), 1 / (1 - b) / 0.6) for a, b in ambients])
    assert compare_paired(base, cand, _loads(ambients)).verdict is GateVerdict.FAIL


@pytest.mark.parametrize("step_at", range(1, 12))
def test_a_noop_with_a_load_step_halfway_never_fails(step_at: int) -> None:
    """A hog switched on before repeat ``step_at`` (of 12, interleaved AB|BA…) halves the speed from then on."""
    order = ["AB" if i % 2 == 0 else "BA" for i in range(6)]
    slot = 0
    scales, ambients = [], []
    for o in order:
        pair: dict[str, tuple[float, float]] = {}
        for arm in o:
            hog = slot >= step_at
            pair[arm] = (2.0 if hog else 1.0, 0.5 if hog else 0.02)
            slot += 1
        scales.append((pair["A"][0], pair["B"][0]))
        ambients.append((pair["A"][1], pair["B"][1]))
    base, cand = _series(scales, seed=step_at)
    res = compare_paired(base, cand, _loads(ambients))
    assert res.verdict is not GateVerdict.FAIL, res.summary()
    # the gate of the old design (one arm after the other) reads the same step as a regression
    sequential_base, _ = _series([(1.0, 1.0)] * 6, seed=step_at)
    _, sequential_cand = _series([(2.0, 2.0)] * 6, seed=step_at + 100)
    assert compare_runs(sequential_base, sequential_cand).verdict is GateVerdict.FAIL


def test_noise_beyond_the_budget_is_inconclusive() -> None:
    rng = random.Random(7)
    scales = [(rng.uniform(0.7, 1.3), rng.uniform(0.7, 1.3)) for _ in range(6)]
    base, cand = _series(scales, seed=7)
    res = compare_paired(base, cand, _loads([(0.1, 0.1)] * 6))
    assert res.verdict is GateVerdict.INCONCLUSIVE, res.summary()
    assert "straddles" in " ".join(res.reasons) and "host load moved" not in res.reasons[0]


def test_a_load_move_the_budget_cannot_resolve_is_inconclusive_and_says_so() -> None:
    """No real change, but every pair's arms saw a different ambient load: a pass would be unfounded."""
    ambients = [(0.1, 0.3) if i % 2 == 0 else (0.3, 0.1) for i in range(6)]
    base, cand = _series([(1.0, 1.0)] * 6)
    res = compare_paired(base, cand, _loads(ambients))
    assert res.verdict is GateVerdict.INCONCLUSIVE, res.summary()
    assert res.reasons[0].startswith("the host load moved more than the budget can resolve"), res.reasons
    assert "without it" in " ".join(res.reasons)
    # the same series with a steady load passes
    assert compare_paired(base, cand, _loads([(0.2, 0.2)] * 6)).verdict is GateVerdict.PASS


def test_the_slack_is_the_worst_node_and_unknown_when_unobserved() -> None:
    pair = PairLoad("AB", (RepeatLoad("a", 0.0, 0.0, None, 0, 0), RepeatLoad("b", 0.0, 0.5, None, 0, 0)),
                    (RepeatLoad("a", 0.0, 0.0, None, 0, 0), RepeatLoad("b", 0.0, 0.0, None, 0, 0)))
    assert load_slack(pair) == pytest.approx(0.6931, abs=1e-3)  # b: 50 % busy beside the baseline
    blind = PairLoad("AB", (RepeatLoad("a", None, None, None, 0, 0),), (RepeatLoad("a", 0.1, 0.1, None, 0, 0),))
    assert load_slack(blind) is None
    base, cand = _series([(1.0, 1.0)] * 4)
    res = compare_paired(base, cand, [blind] * 4)
    assert "not observed" in res.reasons[-1]


def test_too_few_pairs_never_pass_and_unpaired_input_is_refused() -> None:
    base, cand = _series([(1.0, 1.0)] * 2)
    assert compare_paired(base, cand, _loads([(0.1, 0.1)] * 2)).verdict is GateVerdict.INCONCLUSIVE
    with pytest.raises(InputError, match="do not form pairs"):
        compare_paired(base, cand, _loads([(0.1, 0.1)] * 3))
    other = BenchRun(CFG4.__class__(**{**CFG4.__dict__, "iterations": 5}), cand.repeats)
    with pytest.raises(NotComparable):
        compare_paired(base, other, [])


def test_one_pair_never_fails_on_speed_alone() -> None:
    """A single pair has no spread between pairs: a 40 % slower candidate arm may be a drift in time."""
    base, cand = _series([(1.0, 1 / 0.6)])
    res = compare_paired(base, cand, _loads([(0.1, 0.1)]), GateBudget(min_repeats=1))
    assert res.verdict is GateVerdict.INCONCLUSIVE and "one pair cannot tell" in res.reasons[0], res.summary()
    bad = BenchRun(cand.config, tuple(Repeat(tuple(r.__class__(**{**r.__dict__, "wrong": 3}) for r in rep.results))
                                      for rep in cand.repeats))
    assert compare_paired(base, bad, [], GateBudget(min_repeats=1)).verdict is GateVerdict.FAIL  # a wrong sum does


def test_a_wrong_sum_fails_whatever_the_speed() -> None:
    base, cand = _series([(1.0, 1.0)] * 4)
    bad = BenchRun(cand.config, tuple(Repeat(tuple(r.__class__(**{**r.__dict__, "wrong": 3}) for r in rep.results))
                                      for rep in cand.repeats))
    res = compare_paired(base, bad, [], GateBudget())
    assert res.verdict is GateVerdict.FAIL and "wrong elements" in res.reasons[0]


def _tailed(slow: int, factor: float, rng: random.Random) -> Repeat:
    """A repeat whose first ``slow`` of 20 iterations take ``factor`` times as long (1 % noise on all)."""
    return Repeat(tuple(size_result_from_times(s, s // 4, [s / 1e3 * (factor if i < slow else 1.0)
                                                           * (1 + rng.uniform(-0.01, 0.01))
                                                           for i in range(CFG4.iterations)], 2, 0)
                        for s in CFG4.sizes))


def _tail_series(slow: int, factor: float, pairs: int = 3) -> tuple[BenchRun, BenchRun]:
    rng = random.Random(11)
    base = tuple(_tailed(0, 1.0, rng) for _ in range(pairs))
    cand = tuple(_tailed(slow, factor, rng) for _ in range(pairs))
    return BenchRun(CFG4, base), BenchRun(CFG4.__class__(**{**CFG4.__dict__, "layer": "cand"}), cand)


# busbw's budget is opened wide: these judge the p99 check alone
_P99_ONLY = GateBudget(busbw_loss_pct=90.0)


def test_one_slow_iteration_per_candidate_arm_is_no_certain_p99_growth() -> None:
    """The p99 of 20 iterations is the slowest: one 3x iteration in every candidate arm (a handshake, a
    hiccup) is a p99 of +200 % in every pair — which another run of the same arm would not repeat."""
    base, cand = _tail_series(1, 3.0)
    res = compare_paired(base, cand, _loads([(0.1, 0.1)] * 3), _P99_ONLY)
    p99 = res.sizes[0].p99
    assert p99.change_pct is not None and p99.change_pct.estimate == pytest.approx(200, abs=5)
    assert p99.verdict is not GateVerdict.FAIL and res.verdict is not GateVerdict.FAIL, res.summary()


def test_a_tail_in_every_candidate_arm_still_fails_on_p99() -> None:
    """A fifth of the candidate's iterations 2.5x slower: no resample of its arms escapes that tail."""
    base, cand = _tail_series(4, 2.5)
    res = compare_paired(base, cand, _loads([(0.1, 0.1)] * 3), _P99_ONLY)
    assert res.sizes[0].p99.verdict is GateVerdict.FAIL and res.verdict is GateVerdict.FAIL, res.summary()
    assert any(r.startswith("p99 growth") for r in res.reasons), res.reasons
