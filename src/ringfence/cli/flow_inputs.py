"""Reading flow inputs for a verb (``flows``, ``discover``): one table, progress and warnings on stderr."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa

from ringfence.observe.flows.interface import ProgressFn
from ringfence.observe.flows.registry import read_all


def terminal_progress() -> ProgressFn | None:
    """A ``reading flows: NN%`` line on stderr, redrawn as the percentage changes; None unless stderr is a terminal."""
    if not sys.stderr.isatty():
        return None
    last = [-1]

    def show(done: int, total: int) -> None:
        pct = int(100 * done / total) if total else 100
        if pct != last[0]:
            last[0] = pct
            sys.stderr.write(f"\rreading flows: {pct:3d}%" + ("\n" if pct >= 100 else ""))
            sys.stderr.flush()

    return show


def read_flow_inputs(paths: Iterable[str | Path], *, progress: bool = True) -> pa.Table:
    """Every input (format detected per file) as one flow table; each reader warning goes to stderr.

    ``progress``: show :func:`terminal_progress` while reading (callers pass False for ``--quiet``).
    """
    result = read_all(paths, progress=terminal_progress() if progress else None)
    for w in result.warnings:
        print(f"warning: {w}", file=sys.stderr)
    return result.flows


__all__ = ["read_flow_inputs", "terminal_progress"]
