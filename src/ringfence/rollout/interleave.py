"""Step 4's measurement: baseline and candidate repeats interleaved on the canary pair, the load beside each.

The layer is on when step 4 starts (step 3 enabled and verified it). Pairs alternate their order —
B A | A B | B A … (B: the layer on, A: off) — so the layer is switched once per pair rather than
twice, and a load that drifts steadily through the run favours neither arm. Every switch is an
action of the layer (``disable`` / ``enable``) and is recorded; the layer is on again at the end.
Around every repeat the host load is read (:mod:`ringfence.bench.load`): an ambient window before
it, the repeat itself, an ambient window after it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from typing import Protocol, runtime_checkable

from ringfence.bench.load import LoadProbe, LoadSample, RepeatLoad, busy_fraction
from ringfence.bench.paired import PairLoad
from ringfence.bench.run import BenchRun
from ringfence.controls.interface import Verdict
from ringfence.rollout.interface import ArmSettings, Benchmarker, CollectiveLayer, Outcome, RolloutError

__all__ = ["READINGS", "Holding", "Interleaved", "Probing", "ToggleFailed", "pair_orders", "run_interleaved"]


class ToggleFailed(RolloutError):
    """Switching the layer between the arms failed: the step cannot go on (abort rolls back)."""


@runtime_checkable
class Holding(Protocol):
    """A benchmarker that can keep the cluster quiet across many measurements (one pause, not one per repeat)."""

    def hold(self) -> AbstractContextManager[None]:
        """Pause the cluster's own traffic for the ``with`` block."""
        ...


@runtime_checkable
class Probing(Protocol):
    """A benchmarker that knows how to read the load of the hosts it runs on."""

    def load_probe(self, nodes: Sequence[str]) -> LoadProbe:
        """A probe for ``nodes``."""
        ...


@dataclass(frozen=True)
class Interleaved:
    """The paired runs (repeat i of each is pair i), their load, and the layer switches made."""

    baseline: BenchRun
    candidate: BenchRun
    loads: tuple[PairLoad, ...]
    switches: tuple[Outcome, ...]


def pair_orders(pairs: int) -> list[str]:
    """``BA``, ``AB``, ``BA``, …: starting with the layer on, one switch per pair."""
    return ["BA" if i % 2 == 0 else "AB" for i in range(pairs)]


def _merge(runs: Sequence[BenchRun]) -> BenchRun:
    out = runs[0]
    for r in runs[1:]:
        out = out.merged(r)
    return replace(out, notes=tuple(dict.fromkeys(out.notes)))


#: readings per ambient window: the run queue is an instantaneous count, so one reading is mostly noise on a
#: busy host; the mean of several is what the slack is computed from.
READINGS = 5


def _loads(before: Sequence[dict[str, LoadSample]], after: Sequence[dict[str, LoadSample]],
           nodes: Sequence[str]) -> tuple[RepeatLoad, ...]:
    # before[-1] is read just before the repeat starts, after[0] as it ends: none of ours runs in the windows
    reads = [*before, *after]
    return tuple(RepeatLoad(n, busy_fraction(before[0][n], before[-1][n]), busy_fraction(after[0][n], after[-1][n]),
                            busy_fraction(before[-1][n], after[0][n]), before[-1][n].loadavg1, after[0][n].loadavg1,
                            sum(r[n].running for r in reads) / len(reads), before[-1][n].cpus) for n in nodes)


def run_interleaved(bench: Benchmarker, layer: CollectiveLayer, nodes: Sequence[str], pairs: int,
                    probe: LoadProbe | None, record: Callable[[str, Outcome], None]) -> Interleaved:
    """Measure ``pairs`` interleaved pairs of single repeats; ``record(what, outcome)`` logs each switch."""
    if pairs < 1:
        raise RolloutError("the interleaved benchmark needs at least one pair")
    arm = layer.arm(nodes)
    on = True
    base: list[BenchRun] = []
    cand: list[BenchRun] = []
    loads: list[PairLoad] = []
    switches: list[Outcome] = []

    def switch(want: bool) -> None:
        nonlocal on
        out = layer.enable(nodes) if want else layer.disable(nodes)
        what = f"{'enable' if want else 'disable'} {layer.name} between interleaved repeats"
        record(what, out)
        switches.append(out)
        if out.verdict is not Verdict.PASS:
            raise ToggleFailed(f"{what} failed: {out.detail}", hint="abort the rollout (it rolls the canary back)")
        on = want

    def samples() -> Iterator[dict[str, LoadSample]]:
        assert probe is not None
        yield probe.sample(nodes)
        for _ in range(READINGS - 1):
            probe.wait_window()
            yield probe.sample(nodes)

    held = bench.hold() if isinstance(bench, Holding) else contextlib.nullcontext()
    with held:
        try:
            for order in pair_orders(pairs):
                arm_loads: dict[str, tuple[RepeatLoad, ...]] = {}
                for side in order:
                    if (side == "B") != on:
                        switch(side == "B")
                    before = list(samples()) if probe else []
                    run = bench.measure(nodes, layer.name if side == "B" else "none",
                                        arm if side == "B" else ArmSettings(), repeats=1)
                    after = list(samples()) if probe else []
                    (cand if side == "B" else base).append(run)
                    arm_loads[side] = _loads(before, after, nodes) if probe else ()
                loads.append(PairLoad(order, arm_loads["A"], arm_loads["B"]))
        finally:
            if not on:
                switch(True)  # the layer stays on after step 4, as step 3 left it
    return Interleaved(_merge(base), _merge(cand), tuple(loads) if probe else (), tuple(switches))
