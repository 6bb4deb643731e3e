"""The executor family: where a command runs (a lab namespace, an SSH host, a Kubernetes pod).

One small interface used alike by probes, actions and the benchmark, so the code that proves a path
in the lab is the code that proves it on a real cluster.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
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


__all__ = ["Executor", "Process", "RunResult", "TargetError"]
