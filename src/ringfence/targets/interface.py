"""The executor family: where a command runs (a lab namespace, an SSH host, a Kubernetes pod).

One small interface used alike by probes, actions and the benchmark, so the code that proves a path
in the lab is the code that proves it on a real cluster.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ringfence.errors import RingfenceError


class TargetError(RingfenceError):
    """A command could not be run on a target (not a non-zero exit: that is a RunResult)."""


@dataclass(frozen=True)
class RunResult:
    """The outcome of one command on a target."""

    argv: tuple[str, ...]
    returncode: int
    stdout: bytes
    stderr: bytes
    seconds: float
    timed_out: bool = False


class Process(Protocol):
    """A long-running command started on a target (a server, a capture, a training rank)."""

    pid: int

    def poll(self) -> int | None:
        """Exit code, or None while it runs."""
        ...

    def stop(self, timeout: float = 5.0) -> int | None:
        """Terminate (then kill) this process only; return its exit code."""
        ...


class Executor(Protocol):
    """Runs commands on one host of a target."""

    name: str  # the host/node this executor reaches

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float = 30.0,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
    ) -> RunResult:
        """Run to completion (or timeout) and capture output."""
        ...

    def spawn(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        stdout: Path | None = None,
        stderr: Path | None = None,
    ) -> Process:
        """Start in the background."""
        ...

    def copy_to(self, local: Path, remote: str) -> None:
        """Copy a local file to the host."""
        ...

    def copy_from(self, remote: str, local: Path) -> None:
        """Copy a file from the host."""
        ...


@dataclass(frozen=True)
class Host:
    """One node of a site: its name, the address its peers reach it at, and how commands run there.

    ``python`` is how a ringfence module is started on the host (``python -m ringfence…``): this
    interpreter for the lab and local targets, the host's own for SSH; ``env`` is added to every such
    start (e.g. ``PYTHONPATH`` when ringfence runs from a source checkout); ``interface`` is the NIC
    the collective uses there, when known.
    """

    name: str
    address: str
    executor: Executor
    python: tuple[str, ...] = ("python3",)
    env: Mapping[str, str] = field(default_factory=dict)
    interface: str | None = None  # the NIC its peers are reached through (GLOO_SOCKET_IFNAME), when known
    progress: str | None = None  # path, on the host, of its training rank's progress file (see targets.cluster)


#: the host name of a site's enforcement point between the zones (a cluster's firewall or gateway):
#: rules are loaded there, but it sends no traffic of its own to capture
FABRIC_HOST = "fabric"


@dataclass(frozen=True)
class Site:
    """The hosts of one cluster, each behind an executor: a lab's namespaces, an SSH inventory, this machine.

    Actions (encryption layers, rollout steps) are written against a site, never against the lab:
    ``name`` keys their state and names what they create (interfaces, directories), ``kind`` says
    which executor family serves it (``lab``, ``ssh``, ``local``) for the record only.
    """

    name: str
    kind: str
    hosts: Mapping[str, Host]
    fanout: int = 8  # hosts contacted at once by a fan-out
    timeout: float = 60.0  # seconds one host may take for one fan-out command

    def host(self, node: str) -> Host:
        """The host ``node``; :class:`TargetError` naming the site when it has no such node."""
        try:
            return self.hosts[node]
        except KeyError:
            raise TargetError(
                f"{self.kind} site {self.name} has no node {node!r} (it has: {', '.join(sorted(self.hosts))})"
            ) from None

    def executor(self, node: str) -> Executor:
        """The executor that reaches ``node``."""
        return self.host(node).executor

    def address(self, node: str) -> str:
        """The address peers reach ``node`` at."""
        return self.host(node).address


__all__ = ["FABRIC_HOST", "Executor", "Host", "Process", "RunResult", "Site", "TargetError"]
