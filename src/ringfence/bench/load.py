"""Host load beside each benchmark repeat: ``/proc/loadavg`` and CPU busy from ``/proc/stat``.

The paired gate (:mod:`ringfence.bench.paired`) needs to know how much the machine's *other* work
moved between the two arms of a pair. A repeat's own CPU use says little about that (an encrypting
layer burns CPU by design), so the figure that matters is the **ambient** load: CPU busy measured in
a short window just before and just after each repeat, when none of the benchmark runs. The busy
fraction over the repeat itself and the 1-minute load average are recorded too, for the reader.

Samples are read through an executor (``cat /proc/loadavg /proc/stat``), so the same probe works in
a lab namespace (which shares the host's ``/proc/stat``) and on an SSH host.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from ringfence.errors import RingfenceError
from ringfence.targets.interface import Executor, TargetError

__all__ = [
    "ExecutorLoadProbe",
    "LoadError",
    "LoadProbe",
    "LoadSample",
    "RepeatLoad",
    "busy_fraction",
    "parse_proc",
]


class LoadError(RingfenceError):
    """The host load could not be read or parsed."""


@dataclass(frozen=True)
class LoadSample:
    """One reading of a host: the 1-minute load average, the cumulative CPU jiffies (busy, total), and the
    runnable tasks other than the reader itself (``procs_running`` − 1) on ``cpus`` CPUs."""

    loadavg1: float
    busy: int
    total: int
    running: int = 0
    cpus: int = 1


def parse_proc(text: str, where: str = "/proc") -> LoadSample:
    """Parse ``/proc/loadavg`` followed by ``/proc/stat`` (as ``cat`` prints them).

    busy = user + nice + system + irq + softirq + steal; total adds idle and iowait (guest time is
    already inside user, so it is not added twice).
    """
    lines = text.splitlines()
    try:
        loadavg1 = float(lines[0].split()[0])
        cpu = next(line for line in lines[1:] if line.startswith("cpu "))
        f = [int(x) for x in cpu.split()[1:]]
        user, nice, system, idle, iowait, irq, softirq = f[:7]
        steal = f[7] if len(f) > 7 else 0
        running = next((int(line.split()[1]) for line in lines if line.startswith("procs_running ")), 1)
    except (IndexError, ValueError, StopIteration) as exc:
        raise LoadError(f"{where}: not /proc/loadavg + /proc/stat output ({exc!r})") from exc
    cpus = sum(1 for line in lines if line.startswith("cpu") and line[3:4].isdigit())
    busy = user + nice + system + irq + softirq + steal
    # procs_running counts the `cat` reading it: the others are one fewer
    return LoadSample(loadavg1, busy, busy + idle + iowait, max(running - 1, 0), max(cpus, 1))


def busy_fraction(a: LoadSample, b: LoadSample) -> float | None:
    """Share of CPU time busy between two samples (0..1); None when no time passed between them."""
    dt = b.total - a.total
    if dt <= 0:
        return None
    return min(max((b.busy - a.busy) / dt, 0.0), 1.0)


@dataclass(frozen=True)
class RepeatLoad:
    """The load beside one repeat on one node: ambient busy before and after it, busy during it."""

    node: str
    ambient_before: float | None
    ambient_after: float | None
    during: float | None
    loadavg_start: float
    loadavg_end: float
    runnable: float | None = None  # others' tasks ready to run, the mean of the readings around the repeat
    cpus: int = 1

    @property
    def ambient(self) -> float | None:
        """The worse of the two ambient windows (the load may have changed across the repeat)."""
        seen = [x for x in (self.ambient_before, self.ambient_after) if x is not None]
        return max(seen) if seen else None

    @property
    def share(self) -> float | None:
        """The CPU share one more task could expect beside the others' runnable tasks: min(1, cpus / (n + 1)).

        On a saturated host the busy share reads 100 % whatever else starts; the run queue still tells a hog
        joining 16 runnable tasks (1/18 of the machine) from one joining none.
        """
        return None if self.runnable is None else min(1.0, self.cpus / (self.runnable + 1.0))

    def to_dict(self) -> dict[str, float | str | None]:
        """JSON-able form (for the gate's evidence)."""
        return {"node": self.node, "ambient_before": self.ambient_before, "ambient_after": self.ambient_after,
                "ambient": self.ambient, "during": self.during, "loadavg_start": self.loadavg_start,
                "loadavg_end": self.loadavg_end, "runnable": self.runnable, "cpus": self.cpus, "share": self.share}


class LoadProbe(Protocol):
    """Reads the load of the hosts of ``nodes`` now, and waits one ambient window."""

    window_s: float

    def sample(self, nodes: Sequence[str]) -> dict[str, LoadSample]:
        """One reading per node."""
        ...

    def wait_window(self) -> None:
        """Let the time between two ambient readings pass (nothing of the benchmark runs meanwhile)."""
        ...


class ExecutorLoadProbe:
    """A :class:`LoadProbe` that reads ``/proc`` through each node's executor."""

    def __init__(self, executors: Mapping[str, Executor], window_s: float = 0.15) -> None:
        """``window_s``: the time between two readings of an ambient window (a measurement period, not a wait
        for an event)."""
        self.executors, self.window_s = dict(executors), window_s

    def sample(self, nodes: Sequence[str]) -> dict[str, LoadSample]:
        """Read ``/proc/loadavg`` and ``/proc/stat`` on every node."""
        out: dict[str, LoadSample] = {}
        for n in nodes:
            try:
                res = self.executors[n].run(["cat", "/proc/loadavg", "/proc/stat"], timeout=15.0)
            except KeyError as exc:
                raise LoadError(f"no executor for node {n!r} to read its load") from exc
            except TargetError as exc:
                raise LoadError(f"cannot read the load of {n}: {exc.message}") from exc
            if res.returncode != 0:
                raise LoadError(f"cannot read the load of {n}: cat /proc/loadavg /proc/stat exited {res.returncode}")
            out[n] = parse_proc(res.stdout.decode(errors="replace"), f"{n}:/proc")
        return out

    def wait_window(self) -> None:
        """Sleep between readings: the ambient load is what the host does while we do nothing."""
        time.sleep(self.window_s)
