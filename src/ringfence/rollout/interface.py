"""The parts a canary rollout is assembled from, as Protocols, so each can be injected.

The rollout machine (:mod:`ringfence.rollout.machine`) never enables anything itself: it calls a
:class:`StepAction` for steps 1–2 (TLS on storage/management/replication; key management and
rotation), a :class:`CollectiveLayer` for steps 3 and 5 (the canary pair, then the fleet), and a
:class:`Benchmarker` for the before/after measurement; every outcome is recorded through an
:class:`EvidenceSink` (the real one is :class:`ringfence.evidence.EvidenceStore`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ringfence.bench.run import BenchRun
from ringfence.controls.interface import Verdict
from ringfence.errors import RingfenceError

__all__ = [
    "ArmSettings",
    "Benchmarker",
    "CollectiveLayer",
    "EvidenceSink",
    "Outcome",
    "RolloutError",
    "RolloutRefused",
    "StepAction",
]


class RolloutError(RingfenceError):
    """The rollout state cannot be read, or an action could not be carried out."""


class RolloutRefused(RolloutError):
    """A step was asked for that the procedure does not allow now (order, budget, gate)."""


class EvidenceSink(Protocol):
    """Where records go: ``append(kind, source, subject, data) -> id`` (EvidenceStore fits)."""

    def append(self, kind: str, source: str, subject: str, data: Any = None) -> str:
        """Append one record; return its id."""
        ...


@dataclass(frozen=True)
class Outcome:
    """What an action or a verification found. ``data`` is JSON-able and goes into the evidence."""

    verdict: Verdict  # pass: done and proven; fail: done wrong or refused; unknown: could not tell
    detail: str
    data: Mapping[str, Any] = field(default_factory=dict)


class StepAction(Protocol):
    """Steps 1 and 2: change something (``apply``), then prove it on the wire (``verify``)."""

    name: str

    def apply(self) -> Outcome:
        """Make the change (enable TLS, rotate keys); idempotent."""
        ...

    def verify(self) -> Outcome:
        """Observe the effect, both sides (e.g. capture per class: no plaintext; rotation rekeyed)."""
        ...


@dataclass(frozen=True)
class ArmSettings:
    """How the benchmark must run while a layer is enabled: a backend (ringfence-transport), the
    tunnel's addresses and interfaces (WireGuard), extra environment. Empty: unchanged."""

    backend: str | None = None
    plugins: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    addresses: Mapping[str, str] = field(default_factory=dict)  # node → address to rendezvous on
    interfaces: Mapping[str, str] = field(default_factory=dict)  # node → GLOO_SOCKET_IFNAME


class CollectiveLayer(Protocol):
    """A collective-path protection layer (WireGuard, IPsec, MACsec, ringfence-transport, noop)."""

    name: str
    encrypts: bool  # False for calibration layers (noop): they may never go fleet-wide

    def enable(self, nodes: Sequence[str]) -> Outcome:
        """Turn the layer on between ``nodes``."""
        ...

    def verify(self, nodes: Sequence[str]) -> Outcome:
        """Prove the layer is in force between ``nodes`` (ciphertext on the wire, fail-closed)."""
        ...

    def disable(self, nodes: Sequence[str]) -> Outcome:
        """Turn it off again (the rollback of ``abort``)."""
        ...

    def arm(self, nodes: Sequence[str]) -> ArmSettings:
        """How the benchmark must run over this layer."""
        ...


class Benchmarker(Protocol):
    """Runs the same all-reduce benchmark on ``nodes``, with or without a layer."""

    def measure(self, nodes: Sequence[str], layer: str, arm: ArmSettings, *, repeats: int | None = None) -> BenchRun:
        """One benchmark run labelled ``layer``: ``repeats`` repeats, else the configured number.

        Step 4 asks for one repeat at a time, to interleave the arms.
        """
        ...
