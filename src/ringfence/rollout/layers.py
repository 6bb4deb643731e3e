"""Collective layers the rollout knows by name, and the real benchmark as a :class:`Benchmarker`.

``noop`` is a real layer that changes nothing: a canary with it must be judged ``pass`` (or
``inconclusive`` when the machine is noisy) by the gate — the calibration that proves the gate
reacts to measurements, not to labels. It claims no confidentiality, so the rollout never takes
it fleet-wide. Layers that encrypt (WireGuard, ringfence-transport…) come from
:mod:`ringfence.secure` and are registered in :data:`LAYERS` by import path.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from ringfence.bench.driver import BenchSpec, RankSpec, run_allreduce
from ringfence.bench.load import ExecutorLoadProbe
from ringfence.bench.run import BenchRun
from ringfence.controls.interface import Verdict
from ringfence.rollout.interface import ArmSettings, CollectiveLayer, Outcome, RolloutError

__all__ = ["LAYERS", "AllReduceBenchmarker", "NoopLayer", "load_layer"]


class NoopLayer:
    """Changes nothing on the wire; records that it was asked to. For calibrating the gate."""

    name = "noop"
    encrypts = False

    def __init__(self) -> None:
        self.enabled: set[str] = set()

    def enable(self, nodes: Sequence[str]) -> Outcome:
        """Remember the nodes; nothing else changes."""
        self.enabled |= set(nodes)
        return Outcome(Verdict.PASS, f"noop layer on {', '.join(nodes)}: nothing changed on the wire",
                       {"nodes": list(nodes), "encrypts": False})

    def verify(self, nodes: Sequence[str]) -> Outcome:
        """The noop layer claims nothing, so its only claim to check is that it was enabled on ``nodes``."""
        missing = sorted(set(nodes) - self.enabled)
        if missing:
            return Outcome(Verdict.FAIL, f"noop layer was not enabled on {', '.join(missing)}", {"missing": missing})
        return Outcome(Verdict.PASS, "noop layer in place; it claims no confidentiality (calibration only)",
                       {"nodes": list(nodes), "encrypts": False})

    def disable(self, nodes: Sequence[str]) -> Outcome:
        """Forget the nodes."""
        self.enabled -= set(nodes)
        return Outcome(Verdict.PASS, f"noop layer off on {', '.join(nodes)}", {"nodes": list(nodes)})

    def arm(self, nodes: Sequence[str]) -> ArmSettings:
        """The benchmark runs exactly as without the layer."""
        return ArmSettings()


#: layer name → "module:factory" of a zero-argument factory. One explicit place.
LAYERS: dict[str, str] = {
    "noop": "ringfence.rollout.layers:NoopLayer",
    "wireguard": "ringfence.lab.rollout:WireguardLabLayer",
}


def load_layer(name: str, registry: Mapping[str, str] | None = None) -> CollectiveLayer:
    """The layer called ``name``, from :data:`LAYERS` (or ``registry``), or ``module:factory`` directly."""
    table = LAYERS if registry is None else registry
    target = table.get(name, name if ":" in name else None)
    if target is None:
        raise RolloutError(f"no collective layer called {name!r}", hint=f"known: {', '.join(sorted(table))}")
    module_name, _, factory_name = target.partition(":")
    try:
        factory: Callable[[], CollectiveLayer] = getattr(importlib.import_module(module_name), factory_name)
    except (ImportError, AttributeError) as exc:
        raise RolloutError(f"layer {name!r} ({target}) is not available: {exc}") from exc
    return factory()


@dataclass(frozen=True)
class AllReduceBenchmarker:
    """The real benchmark: ``ranks(nodes)`` places the ranks, ``spec`` says what to measure."""

    spec: BenchSpec
    ranks: Callable[[Sequence[str]], list[RankSpec]]

    def load_probe(self, nodes: Sequence[str]) -> ExecutorLoadProbe:
        """A host-load probe reading ``/proc`` through the executors the ranks run on."""
        return ExecutorLoadProbe({r.node: r.executor for r in self.ranks(nodes)})

    def measure(self, nodes: Sequence[str], layer: str, arm: ArmSettings, *, repeats: int | None = None) -> BenchRun:
        """Run the benchmark on ``nodes`` as the layer's arm settings say (``repeats``: else the spec's)."""
        placed = [
            replace(r, address=arm.addresses.get(r.node, r.address), interface=arm.interfaces.get(r.node, r.interface))
            for r in self.ranks(nodes)
        ]
        spec = replace(
            self.spec,
            layer=layer,
            backend=arm.backend or self.spec.backend,
            plugins=self.spec.plugins + arm.plugins,
            env={**self.spec.env, **arm.env},
            repeats=self.spec.repeats if repeats is None else repeats,
        )
        return run_allreduce(placed, spec)
