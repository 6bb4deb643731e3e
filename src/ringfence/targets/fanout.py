"""One command on many hosts at once: bounded parallelism, a timeout per host, every host accounted for.

A host that fails (cannot be reached, times out, exits non-zero) is reported by name with why; it is
never dropped from the answer and never holds up the others beyond its own timeout.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

from ringfence.targets.interface import Executor, RunResult, Site, TargetError


@dataclass(frozen=True)
class HostOutcome:
    """What one host answered: its result, or why there is none (``error``)."""

    node: str
    result: RunResult | None
    error: str | None

    @property
    def ok(self) -> bool:
        """It ran and exited 0 within its timeout."""
        return self.error is None and self.result is not None and self.result.returncode == 0


def host_outcome(node: str, executor: Executor, argv: Sequence[str], timeout: float) -> HostOutcome:
    """Run ``argv`` on one host within ``timeout`` s: its result, or why there is none."""
    try:
        res = executor.run(list(argv), timeout=timeout)
    except TargetError as exc:
        return HostOutcome(node, None, exc.message)
    if res.timed_out:
        return HostOutcome(node, res, f"{node}: no answer within {timeout:g}s")
    if res.returncode != 0:
        why = res.stderr.decode(errors="replace").strip()[-300:]
        return HostOutcome(node, res, f"{node}: exit {res.returncode}{': ' + why if why else ''}")
    return HostOutcome(node, res, None)


_K = TypeVar("_K")
_T = TypeVar("_T")


def each(items: Sequence[_K], fn: Callable[[_K], _T], *, fanout: int = 8) -> list[_T]:
    """``fn`` of every item, at most ``fanout`` at a time, answers in the order given (each host is its own
    round trip: a fleet must not pay them one after another). ``fn`` handles its own failures."""
    with ThreadPoolExecutor(max_workers=max(1, min(fanout, len(items)))) as pool:
        return list(pool.map(fn, items))


def run_on_all(executors: Mapping[str, Executor], argv: Sequence[str], *, fanout: int = 8,
               timeout: float = 60.0) -> dict[str, HostOutcome]:
    """Run ``argv`` on every host, at most ``fanout`` at a time, each within ``timeout`` seconds."""
    if fanout < 1:
        raise TargetError(f"fan-out must be at least 1, not {fanout}")
    nodes = sorted(executors)
    return dict(zip(nodes, each(nodes, lambda n: host_outcome(n, executors[n], argv, timeout), fanout=fanout),
                    strict=True))


def require_reachable(site: Site, *, fanout: int = 8, timeout: float = 30.0) -> None:
    """Every host of ``site`` answers a trivial command, or :class:`TargetError` naming each one that did not.

    Run before an action changes anything, so a host that is down stops the action before it is half
    applied, and the user learns every unreachable host at once, not one per attempt.
    """
    outcomes = run_on_all({n: h.executor for n, h in site.hosts.items()}, ["true"], fanout=fanout, timeout=timeout)
    bad = [o for o in outcomes.values() if not o.ok]
    if bad:
        raise TargetError(
            f"{site.kind} site {site.name}: {len(bad)} of {len(outcomes)} hosts unreachable: "
            + "; ".join(o.error or o.node for o in bad),
            hint="bring them back (or take them out of the hosts file) and run the action again",
        )


__all__ = ["HostOutcome", "each", "host_outcome", "require_reachable", "run_on_all"]
