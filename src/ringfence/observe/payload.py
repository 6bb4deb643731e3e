"""Per-flow encryption verdicts from payload samples (see :mod:`ringfence.observe.samples`)."""

from __future__ import annotations

from ringfence.observe.samples import FlowKeys, PayloadSamples
from ringfence.observe.schema import Protection


def classify_flows(keys: FlowKeys, samples: PayloadSamples) -> tuple[list[str], list[str | None], list[str]]:
    """(protection, protocol, reason) for each of the ``keys.n`` flows."""
    n = keys.n
    return [Protection.UNKNOWN.value] * n, [None] * n, ["payload not yet inspected"] * n


__all__ = ["classify_flows"]
