"""Executor for this machine, optionally wrapped in a prefix (``ip netns exec NS``, ``nsenter …``).

The lab executor is this one with a namespace prefix; the SSH executor wraps ``ssh HOST``.
The boundary of the family: OS and subprocess errors become :class:`TargetError` here.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

from ringfence.targets.interface import RunResult, TargetError


class LocalProcess:
    """A background process we started; stopping it touches only this pid's process group."""

    def __init__(self, popen: subprocess.Popen[bytes], files: Sequence[IO[bytes]] = ()) -> None:
        self._popen = popen
        self._files = list(files)
        self.pid = popen.pid

    def poll(self) -> int | None:
        """Exit code, or None while it runs."""
        return self._popen.poll()

    def stop(self, timeout: float = 5.0) -> int | None:
        """SIGTERM our own process group, then SIGKILL after ``timeout``."""
        try:
            if self._popen.poll() is None:
                _signal_group(self._popen.pid, signal.SIGTERM)
                try:
                    self._popen.wait(timeout)
                except subprocess.TimeoutExpired:
                    _signal_group(self._popen.pid, signal.SIGKILL)
                    self._popen.wait(timeout)
            return self._popen.returncode
        finally:
            for f in self._files:
                f.close()


def _signal_group(pid: int, sig: signal.Signals) -> None:
    # We start every child in its own session, so its pgid is its pid: only what we started is hit.
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


class LocalExecutor:
    """Runs commands here, each prefixed by ``prefix`` (empty: directly)."""

    def __init__(self, name: str = "localhost", prefix: Sequence[str] = ()) -> None:
        self.name = name
        self.prefix = tuple(prefix)

    def _argv(self, argv: Sequence[str]) -> list[str]:
        return [*self.prefix, *argv]

    @staticmethod
    def _env(env: Mapping[str, str] | None) -> dict[str, str] | None:
        if env is None:
            return None
        merged = dict(os.environ)
        merged.update(env)
        return merged

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float = 30.0,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
    ) -> RunResult:
        """Run to completion; a timeout kills the whole process group and is reported, not raised."""
        full = self._argv(argv)
        start = time.monotonic()
        try:
            proc = subprocess.Popen(
                full,
                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=self._env(env),
                start_new_session=True,
            )
        except OSError as exc:
            raise TargetError(f"{self.name}: cannot run {full[0]!r}: {exc.strerror or exc}") from exc
        try:
            out, err = proc.communicate(stdin, timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            _signal_group(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            timed_out = True
        return RunResult(
            argv=tuple(full),
            returncode=proc.returncode,
            stdout=out,
            stderr=err,
            seconds=time.monotonic() - start,
            timed_out=timed_out,
        )

    def spawn(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        stdout: Path | None = None,
        stderr: Path | None = None,
    ) -> LocalProcess:
        """Start in the background, in a new session (so stop() reaches its children too)."""
        full = self._argv(argv)
        files: list[IO[bytes]] = []
        try:
            out = open(stdout, "ab") if stdout else None  # noqa: SIM115 - closed by LocalProcess.stop
            err = open(stderr, "ab") if stderr else None  # noqa: SIM115
            files = [f for f in (out, err) if f is not None]
            popen = subprocess.Popen(
                full,
                stdin=subprocess.DEVNULL,
                stdout=out or subprocess.DEVNULL,
                stderr=err or subprocess.DEVNULL,
                env=self._env(env),
                start_new_session=True,
            )
        except OSError as exc:
            for f in files:
                f.close()
            raise TargetError(f"{self.name}: cannot start {full[0]!r}: {exc.strerror or exc}") from exc
        return LocalProcess(popen, files)

    def copy_to(self, local: Path, remote: str) -> None:
        """Copy a file (a namespace shares the file system, so this is a plain copy)."""
        self._copy(local, Path(remote))

    def copy_from(self, remote: str, local: Path) -> None:
        """Copy a file back."""
        self._copy(Path(remote), local)

    def _copy(self, src: Path, dst: Path) -> None:
        try:
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes(src.read_bytes())
        except OSError as exc:
            raise TargetError(f"{self.name}: cannot copy {src} to {dst}: {exc.strerror or exc}") from exc


__all__ = ["LocalExecutor", "LocalProcess"]
