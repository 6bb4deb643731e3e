"""busbw by hand, nearest-rank percentiles, spread."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ringfence.bench.stats import (
    algbw_gbps,
    busbw_factor,
    busbw_gbps,
    coefficient_of_variation,
    median,
    nearest_rank,
)


def test_busbw_two_ranks_by_hand() -> None:
    # 64 MiB in 50 ms: algbw = 67108864 B / 0.05 s = 1.34217728 GB/s; factor 2·(2−1)/2 = 1.
    alg = algbw_gbps(64 << 20, 50_000.0)
    assert alg == pytest.approx(1.34217728)
    assert busbw_factor(2) == 1.0
    assert busbw_gbps(alg, 2) == pytest.approx(1.34217728)


def test_busbw_four_ranks_by_hand() -> None:
    # 1 MiB in 100 µs: algbw = 1048576 / 1e-4 / 1e9 = 10.48576 GB/s; factor 2·3/4 = 1.5 → 15.72864.
    alg = algbw_gbps(1 << 20, 100.0)
    assert alg == pytest.approx(10.48576)
    assert busbw_factor(4) == 1.5
    assert busbw_gbps(alg, 4) == pytest.approx(15.72864)


def test_busbw_matches_nccl_tests_eight_ranks() -> None:
    # A line of the CSCS GH200 2×4 sample: algbw 70.04, busbw 122.57 with 8 ranks (factor 1.75).
    assert busbw_gbps(70.04, 8) == pytest.approx(122.57, abs=0.005)


def test_nearest_rank_definitions() -> None:
    values = [float(v) for v in range(1, 21)]  # 1..20
    assert nearest_rank(values, 99) == 20.0  # ⌈0.99·20⌉ = 20
    assert nearest_rank(values, 50) == 10.0  # ⌈0.5·20⌉ = 10
    assert nearest_rank(values, 95) == 19.0  # ⌈0.95·20⌉ = 19
    hundred = [float(v) for v in range(100, 0, -1)]
    assert nearest_rank(hundred, 99) == 99.0  # ⌈0.99·100⌉ = 99, not 100: no float drift
    assert nearest_rank([7.0], 99) == 7.0
    assert nearest_rank([3.0, 1.0, 2.0, 4.0], 50) == 2.0


def test_bad_inputs_raise() -> None:
    with pytest.raises(ValueError):
        nearest_rank([], 50)
    with pytest.raises(ValueError):
        nearest_rank([1.0], 0)
    with pytest.raises(ValueError):
        algbw_gbps(1, 0.0)
    with pytest.raises(ValueError):
        busbw_factor(0)


def test_median_and_cv() -> None:
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0, 2.0, 3.0]) == 2.5
    assert coefficient_of_variation([2.0, 4.0]) == pytest.approx(1 / 3)  # σ = 1, μ = 3
    assert coefficient_of_variation([5.0, 5.0]) == 0.0


@given(st.lists(st.floats(min_value=0, max_value=1e9, allow_nan=False), min_size=1, max_size=200),
       st.floats(min_value=0.01, max_value=100))
def test_nearest_rank_is_a_member_with_enough_below(values: list[float], pct: float) -> None:
    v = nearest_rank(values, pct)
    assert v in values
    at_or_below = sum(1 for x in values if x <= v)
    assert at_or_below >= math.floor(pct / 100 * len(values) - 1e-9)
