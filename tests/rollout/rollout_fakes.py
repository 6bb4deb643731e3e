"""Fakes for the rollout's injected parts (a helper module, not a test file)."""

from __future__ import annotations

import os
import random
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ringfence.bench.load import LoadSample
from ringfence.bench.run import BenchConfig, BenchRun, Repeat, size_result_from_times
from ringfence.controls.interface import Verdict
from ringfence.rollout.interface import ArmSettings, Outcome

CFG = BenchConfig(tool="ringfence", sizes=(1 << 20, 4 << 20), dtype="float32", world_size=2, nodes=("w0", "w1"),
                  warmup=1, iterations=10)


def synth(scale: float, *, repeats: int = 3, seed: int = 1, layer: str = "none", cfg: BenchConfig = CFG) -> BenchRun:
    """A run whose iterations take size/1 GB/s × scale × (1 ± 1 %)."""
    rng = random.Random(seed)
    reps = tuple(
        Repeat(tuple(size_result_from_times(s, s // 4, [s / 1e3 * scale * (1 + rng.uniform(-0.01, 0.01))
                                                        for _ in range(cfg.iterations)], 2, 0) for s in cfg.sizes))
        for _ in range(repeats)
    )
    return BenchRun(replace(cfg, layer=layer), reps)


class FakeEvidence:
    """Keeps records in a list; ids are their positions."""

    def __init__(self) -> None:
        self.records: list[tuple[str, str, str, Any]] = []

    def append(self, kind: str, source: str, subject: str, data: Any = None) -> str:
        self.records.append((kind, source, subject, data))
        return f"ev-{len(self.records)}"

    def kinds(self) -> list[str]:
        return [r[0] for r in self.records]


@dataclass
class FakeAction:
    """A step-1/2 action whose outcomes the test chooses."""

    name: str
    apply_verdict: Verdict = Verdict.PASS
    verify_verdict: Verdict = Verdict.PASS
    calls: list[str] = field(default_factory=list)

    def apply(self) -> Outcome:
        self.calls.append("apply")
        return Outcome(self.apply_verdict, f"{self.name} applied")

    def verify(self) -> Outcome:
        self.calls.append("verify")
        return Outcome(self.verify_verdict, f"{self.name} verified: {self.verify_verdict.value}")


@dataclass
class FakeLayer:
    """An encrypting layer stand-in that records what it was asked."""

    name: str = "wireguard"
    encrypts: bool = True
    verify_verdict: Verdict = Verdict.PASS
    calls: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)

    def enable(self, nodes: Sequence[str]) -> Outcome:
        self.calls.append(("enable", tuple(nodes)))
        return Outcome(Verdict.PASS, f"enabled on {nodes}")

    def verify(self, nodes: Sequence[str]) -> Outcome:
        self.calls.append(("verify", tuple(nodes)))
        return Outcome(self.verify_verdict, "ciphertext on the wire" if self.verify_verdict is Verdict.PASS
                       else "plaintext seen")

    def disable(self, nodes: Sequence[str]) -> Outcome:
        self.calls.append(("disable", tuple(nodes)))
        return Outcome(Verdict.PASS, f"disabled on {nodes}")

    def arm(self, nodes: Sequence[str]) -> ArmSettings:
        return ArmSettings(interfaces=dict.fromkeys(nodes, "wg0"))


@dataclass
class FakeBenchmarker:
    """Returns synthetic runs: plaintext at scale 1, with a layer at ``slowdown``."""

    slowdown: float
    calls: list[tuple[str, ArmSettings]] = field(default_factory=list)

    def measure(self, nodes: Sequence[str], layer: str, arm: ArmSettings, *, repeats: int | None = None) -> BenchRun:
        self.calls.append((layer, arm))
        return synth(1.0 if layer == "none" else self.slowdown, seed=len(self.calls), layer=layer,
                     repeats=3 if repeats is None else repeats)


@dataclass
class HogHost:
    """A fake :class:`~ringfence.bench.load.LoadProbe` of one host whose CPU hog can be switched on."""

    hog: bool = False
    window_s: float = 0.0
    busy: int = 0
    total: int = 0

    def sample(self, nodes: Sequence[str]) -> dict[str, LoadSample]:
        # 100 jiffies pass between readings: 50 busy with the hog (one of two cores), 2 without
        self.total += 100
        self.busy += 50 if self.hog else 2
        return {n: LoadSample(1.0 if self.hog else 0.1, self.busy, self.total) for n in nodes}

    def wait_window(self) -> None:
        return None


@dataclass
class HogBenchmarker:
    """Synthetic runs that take twice as long once the host's hog is on (from the ``hog_after``-th call)."""

    slowdown: float
    host: HogHost
    hog_after: int
    calls: list[str] = field(default_factory=list)

    def measure(self, nodes: Sequence[str], layer: str, arm: ArmSettings, *, repeats: int | None = None) -> BenchRun:
        self.calls.append(layer)
        if len(self.calls) >= self.hog_after:
            self.host.hog = True
        scale = (1.0 if layer == "none" else self.slowdown) * (2.0 if self.host.hog else 1.0)
        return synth(scale, seed=len(self.calls), layer=layer, repeats=3 if repeats is None else repeats)


@dataclass
class SlowTestLayer:
    """TEST ONLY — claims to encrypt (so only the gate can stop it) but merely slows the collective:
    its arm runs the benchmark on ``slowgloo``, gloo with a sleep before every all-reduce
    (tests/bench/bench_slow_backend.py)."""

    name: str = "slowed-test"
    encrypts: bool = True
    delay_ms: int = 25
    on: set[str] = field(default_factory=set)

    def enable(self, nodes: Sequence[str]) -> Outcome:
        self.on |= set(nodes)
        return Outcome(Verdict.PASS, "slowed backend selected")

    def verify(self, nodes: Sequence[str]) -> Outcome:
        ok = set(nodes) <= self.on
        return Outcome(Verdict.PASS if ok else Verdict.FAIL, "slowed backend in place" if ok else "not enabled")

    def disable(self, nodes: Sequence[str]) -> Outcome:
        self.on -= set(nodes)
        return Outcome(Verdict.PASS, "slowed backend deselected")

    def arm(self, nodes: Sequence[str]) -> ArmSettings:
        bench_dir = Path(__file__).resolve().parents[1] / "bench"
        path = os.pathsep.join(p for p in (str(bench_dir), os.environ.get("PYTHONPATH", "")) if p)
        return ArmSettings(backend="slowgloo", plugins=("bench_slow_backend:register",),
                           env={"PYTHONPATH": path, "RINGFENCE_TEST_SLOW_MS": str(self.delay_ms)})


class CliActions:
    """What ``rollout advance --actions rollout_fakes:CliActions`` loads for steps 1–2 in tests."""

    def __init__(self) -> None:
        self.tls = FakeAction("tls-test")
        self.keys = FakeAction("keys-test")
