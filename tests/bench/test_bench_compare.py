"""The gate on synthetic runs: pass, fail, inconclusive, and what it refuses."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from bench_synth import CFG, synth

from ringfence.bench.compare import GateBudget, GateVerdict, NotComparable, compare_runs
from ringfence.bench.nccl_tests import import_nccl_tests
from ringfence.bench.run import BenchRun, Repeat, size_result_from_times
from ringfence.errors import InputError

SAMPLES = Path(__file__).resolve().parents[3] / "shared" / "samples" / "nccl-tests"


def test_identical_arms_pass() -> None:
    res = compare_runs(synth(1.0, seed=1), synth(1.0, seed=2, layer="noop"))
    assert res.verdict is GateVerdict.PASS, res.summary()
    for s in res.sizes:
        assert s.busbw.change_pct is not None and s.busbw.change_pct.high < 5


def test_a_37x_slowdown_fails_with_numbers() -> None:
    res = compare_runs(synth(1.0), synth(37.0, seed=3, layer="wireguard"))
    assert res.verdict is GateVerdict.FAIL
    loss = res.sizes[0].busbw.change_pct
    assert loss is not None and loss.estimate == pytest.approx(100 * (1 - 1 / 37), abs=1.0)
    assert "exceeds the 5 % budget" in res.reasons[0] and "busbw loss 97" in res.reasons[0]
    assert res.sizes[0].p99.verdict is GateVerdict.FAIL


def test_a_small_loss_inside_the_budget_passes_and_outside_fails() -> None:
    assert compare_runs(synth(1.0), synth(1.02, seed=4)).verdict is GateVerdict.PASS
    assert compare_runs(synth(1.0), synth(1.12, seed=5)).verdict is GateVerdict.FAIL


def test_noise_wider_than_the_budget_is_inconclusive() -> None:
    # ±30 % per-iteration noise, 3 % real loss: the interval straddles 5 %.
    res = compare_runs(synth(1.0, noise=0.3, repeats=3), synth(1.06, noise=0.3, repeats=3, seed=9))
    assert res.verdict is GateVerdict.INCONCLUSIVE, res.summary()
    assert any("straddles" in r for r in res.reasons)


def test_run_to_run_noise_is_seen_even_with_quiet_iterations() -> None:
    base = BenchRun(CFG, synth(1.0).repeats[:1] + synth(1.3, seed=7).repeats[:1] + synth(0.8, seed=8).repeats[:1])
    cand = BenchRun(CFG, synth(1.04, seed=10).repeats[:1] + synth(1.25, seed=11).repeats[:1] +
                    synth(0.9, seed=12).repeats[:1])
    assert compare_runs(base, cand).verdict is GateVerdict.INCONCLUSIVE


def test_too_few_repeats_never_pass() -> None:
    res = compare_runs(synth(1.0, repeats=1), synth(1.0, repeats=1, seed=2))
    assert res.verdict is GateVerdict.INCONCLUSIVE
    assert "repeat" in res.reasons[0]
    assert compare_runs(synth(1.0, repeats=1), synth(37.0, repeats=1)).verdict is GateVerdict.FAIL


def test_wrong_sums_fail_whatever_the_speed() -> None:
    res = compare_runs(synth(1.0), synth(1.0, seed=2, wrong=3))
    assert res.verdict is GateVerdict.FAIL and "wrong elements" in res.reasons[0]
    assert compare_runs(synth(1.0, wrong=1), synth(1.0, seed=2)).verdict is GateVerdict.INCONCLUSIVE


def test_different_tests_are_not_compared() -> None:
    with pytest.raises(NotComparable, match="iterations"):
        compare_runs(synth(1.0), synth(1.0, cfg=replace(CFG, iterations=10)))


def test_budget_sizes_select_and_must_exist() -> None:
    res = compare_runs(synth(1.0), synth(1.0, seed=2), GateBudget(sizes=(4 << 20,)))
    assert [s.size for s in res.sizes] == [4 << 20]
    with pytest.raises(InputError, match="64 MiB"):
        compare_runs(synth(1.0), synth(1.0, seed=2), GateBudget(sizes=(64 << 20,)))


def test_p99_budget_is_separate() -> None:
    base = synth(1.0)
    # Same mean, but one slow iteration per repeat: busbw loss small, p99 grows ~50 %.
    reps = []
    for rep in synth(1.0, seed=5).repeats:
        results = []
        for r in rep.results:
            times = list(r.times_us)
            times[-1] *= 1.5
            results.append(size_result_from_times(r.size, r.count, times, 2, 0))
        reps.append(Repeat(tuple(results)))
    res = compare_runs(base, BenchRun(CFG, tuple(reps)))
    assert all(s.p99.verdict is GateVerdict.FAIL for s in res.sizes), res.summary()
    assert all(s.busbw.verdict is GateVerdict.PASS for s in res.sizes), res.summary()


def test_deterministic() -> None:
    a, b = synth(1.0, noise=0.2), synth(1.05, noise=0.2, seed=3)
    assert compare_runs(a, b).to_dict() == compare_runs(a, b).to_dict()


@pytest.mark.skipif(not SAMPLES.is_dir(), reason="shared nccl-tests samples not present")
def test_real_degraded_gpu_run_fails_and_unmeasured_p99_is_inconclusive() -> None:
    healthy = import_nccl_tests(SAMPLES / "cscs_gh200_2x4_all_reduce_perf_cxi_hook.txt").to_run()
    degraded = import_nccl_tests(SAMPLES / "cscs_gh200_2x4_all_reduce_perf_no_cxi_hook.txt").to_run()
    res = compare_runs(healthy, degraded)
    assert res.verdict is GateVerdict.FAIL
    at128 = next(s for s in res.sizes if s.size == 128 << 20)
    assert at128.busbw.change_pct is not None
    assert at128.busbw.change_pct.estimate == pytest.approx((1 - 5.43 / 122.57) * 100)
    same = compare_runs(healthy, healthy)
    assert same.verdict is GateVerdict.INCONCLUSIVE and any("p99" in r for r in same.reasons)
