"""What the live drills read from a running job and a capture: counters at a known moment, progress, plaintext.

A rank's progress document is written by the rank, later than the counts it holds (the lab's agents
coalesce a burst of counts into one write half a second later, and a busy machine delays that
further). A drill that reads a counter at the moment it broke a key may therefore read a value from
*before* steps that had already happened, and count those steps against the broken path — the CI
failure this module exists for: two steps "during" an IPsec drill that were taken before its SA was
deleted. :func:`settled_counter` reads a counter from a document the rank wrote *after* the moment
the caller chose, judged without comparing clocks: the document must differ twice from the one read
at that moment (the first change may be a write already under way), and the lab's agents rewrite
theirs at least every :data:`ringfence.lab.agents.common.HEARTBEAT_S` even when nothing counted.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa

#: how often a settled read looks at the rank's document again
POLL_S = 0.1


class ProgressSource(Protocol):
    """Anything that reports a workload's progress (the drills' :class:`~ringfence.secure.drills.Cluster`)."""

    def agent_status(self) -> dict[str, dict[str, Any]]:
        """``<node>-<agent>`` → ``{"counters": {...}, "updated": EPOCH, ...}``."""
        ...


@dataclass(frozen=True)
class Settled:
    """A counter read from a document written after the chosen moment (``settled``), or the latest one seen."""

    value: int
    settled: bool  # False: the rank wrote nothing new within the bound — the value may lag
    waited_s: float


def _doc(source: ProgressSource, agent: str) -> Mapping[str, Any] | None:
    doc = source.agent_status().get(agent)
    return doc if isinstance(doc, Mapping) else None


def _counter(doc: Mapping[str, Any] | None, counter: str) -> int:
    counters = doc.get("counters") if doc is not None else None
    value = counters.get(counter, 0) if isinstance(counters, Mapping) else 0
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _version(doc: Mapping[str, Any] | None) -> object:
    """What tells one write of the document from the next: its ``updated`` stamp, else its whole content."""
    if doc is None:
        return None
    stamp = doc.get("updated")
    return stamp if isinstance(stamp, int | float) and not isinstance(stamp, bool) else repr(sorted(doc.items()))


def settled_counter(source: ProgressSource, worker: str, counter: str, *, timeout: float = 10.0) -> Settled:
    """``counter`` of ``<worker>-worker`` as of now: from the second document written after this call began.

    Bounded by ``timeout``: a rank that writes nothing new (a stalled rank of a cluster whose progress
    files are not rewritten while idle) gives the latest value, marked ``settled=False``.
    """
    agent = f"{worker}-worker"
    start = time.monotonic()
    doc = _doc(source, agent)
    seen = [_version(doc)]
    while len(seen) < 3 and time.monotonic() - start < timeout:
        time.sleep(POLL_S)
        doc = _doc(source, agent)
        if (v := _version(doc)) != seen[-1] and doc is not None:
            seen.append(v)
    return Settled(_counter(doc, counter), len(seen) >= 3, time.monotonic() - start)


def wait_progress(source: ProgressSource, worker: str, counter: str, timeout: float) -> bool:
    """Whether ``counter`` of ``worker`` grows within ``timeout`` (polled)."""
    start = _counter(_doc(source, f"{worker}-worker"), counter)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _counter(_doc(source, f"{worker}-worker"), counter) > start:
            return True
        time.sleep(0.2)
    return False


def plaintext_from(flows: pa.Table, cls: str, addresses: set[str]) -> tuple[int, int]:
    """(plaintext payload bytes, flows) of class ``cls`` touching ``addresses``."""
    rows = [r for r in flows.select(["src", "dst", "class", "protection", "payload_bytes"]).to_pylist()
            if r["class"] == cls and (r["src"] in addresses or r["dst"] in addresses)]
    return sum(int(r["payload_bytes"] or 0) for r in rows if r["protection"] == "plaintext"), len(rows)


__all__ = ["POLL_S", "ProgressSource", "Settled", "plaintext_from", "settled_counter", "wait_progress"]
