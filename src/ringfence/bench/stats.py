"""The arithmetic of the benchmark: bandwidths, nearest-rank percentiles, spread.

Units follow nccl-tests so that imported and measured runs read the same: sizes in bytes, times in
microseconds, bandwidths in GB/s with G = 10^9 (not GiB).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = [
    "DTYPES",
    "algbw_gbps",
    "busbw_factor",
    "busbw_gbps",
    "coefficient_of_variation",
    "median",
    "nearest_rank",
]

#: dtype name → bytes per element (torch's names; nccl-tests' "float" is float32).
DTYPES: dict[str, int] = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int32": 4}


def algbw_gbps(size_bytes: int, time_us: float) -> float:
    """Algorithm bandwidth: bytes moved by one all-reduce over its time, in GB/s (10^9 B/s)."""
    if time_us <= 0:
        raise ValueError(f"time must be positive, got {time_us} us")
    return size_bytes / (time_us * 1e-6) / 1e9


def busbw_factor(world_size: int) -> float:
    """nccl-tests' all-reduce bus-bandwidth factor 2(n−1)/n (doc/PERFORMANCE.md).

    A ring all-reduce sends and receives 2(n−1)/n of the buffer per rank, so busbw is comparable
    with the link speed whatever the number of ranks.
    """
    if world_size < 1:
        raise ValueError(f"world size must be at least 1, got {world_size}")
    return 2.0 * (world_size - 1) / world_size


def busbw_gbps(algbw: float, world_size: int) -> float:
    """Bus bandwidth = algbw · 2(n−1)/n."""
    return algbw * busbw_factor(world_size)


def nearest_rank(values: Sequence[float], percentile: float) -> float:
    """The nearest-rank percentile: the smallest value with at least ``percentile`` % at or below it.

    No interpolation, so the answer is always a measured value: the p99 of 20 samples is the
    largest one (rank ⌈0.99·20⌉ = 20), the p50 of 4 samples the second smallest.
    """
    if not values:
        raise ValueError("no values")
    if not 0 < percentile <= 100:
        raise ValueError(f"percentile must be in (0, 100], got {percentile}")
    ordered = sorted(values)
    # Round first: 0.99 * 100 is 99.00000000000001 in binary floating point, and ceil would skip a rank.
    rank = math.ceil(round(percentile / 100.0 * len(ordered), 9))
    return ordered[max(rank, 1) - 1]


def median(values: Sequence[float]) -> float:
    """The ordinary median (mean of the two middle values for an even count)."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    mid = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[mid]
    return (ordered[mid - 1] + ordered[mid]) / 2.0


def coefficient_of_variation(values: Sequence[float]) -> float:
    """Population standard deviation over the mean (nccl-tests' ``i_cv%`` divided by 100)."""
    if not values:
        raise ValueError("no values")
    mean = sum(values) / len(values)
    if mean == 0:
        return 0.0
    var = sum((v - mean) ** 2 for v in values) / len(values)
    return math.sqrt(var) / mean
