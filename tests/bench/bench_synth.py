"""Synthetic benchmark runs for the gate's tests (a helper module, not a test file)."""

from __future__ import annotations

import random
from dataclasses import replace

from ringfence.bench.run import BenchConfig, BenchRun, Repeat, size_result_from_times

SIZES = (1 << 20, 4 << 20, 16 << 20)
CFG = BenchConfig(tool="ringfence", sizes=SIZES, dtype="float32", world_size=2, nodes=("a", "b"), warmup=2,
                  iterations=20)


def synth(scale: float, *, repeats: int = 5, noise: float = 0.01, seed: int = 1, layer: str = "none",
          wrong: int = 0, cfg: BenchConfig = CFG) -> BenchRun:
    """Iteration times = size/1 GB/s × scale × (1 ± noise), independently drawn."""
    rng = random.Random(seed)
    reps = []
    for _ in range(repeats):
        results = []
        for s in cfg.sizes:
            base = s / 1e3  # µs at 1 GB/s
            times = [base * scale * (1 + rng.uniform(-noise, noise)) for _ in range(cfg.iterations)]
            results.append(size_result_from_times(s, s // 4, times, cfg.world_size, wrong))
        reps.append(Repeat(tuple(results)))
    return BenchRun(replace(cfg, layer=layer), tuple(reps))
