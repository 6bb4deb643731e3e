"""Executor over a real OpenSSH client: ``ssh -o BatchMode=yes -i KEY user@host CMD``, ``scp`` for copies.

The client can itself run under a prefix (``ip netns exec <jump-namespace>``), which is how the lab
reaches its management node from the jump host. No user or system ``ssh_config`` is read
(``-F /dev/null``): every option that matters is on the command line, so a run is reproducible.

An ``ssh`` exit status of 255 means ssh itself failed (connection, authentication, host key) and is
raised as :class:`TargetError`; any other status is the remote command's and is returned.
"""

from __future__ import annotations

import shlex
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

from ringfence.targets.interface import RunResult, TargetError
from ringfence.targets.local import LocalExecutor, LocalProcess

SSH_FAILURE = 255


class SshProcess:
    """A remote command started in the background; :meth:`stop` ends the remote process, then the client."""

    def __init__(self, executor: SshExecutor, local: LocalProcess, remote_pidfile: str) -> None:
        self._executor = executor
        self._local = local
        self._pidfile = remote_pidfile
        self.pid = local.pid  # the local ssh client's pid

    def poll(self) -> int | None:
        """The ssh client's exit code (the remote command's, passed through), or None while it runs."""
        return self._local.poll()

    def stop(self, timeout: float = 5.0) -> int | None:
        """SIGTERM the remote process (SIGKILL after ``timeout``), then stop the local client."""
        tries = max(1, int(timeout * 10))
        script = (
            f'f={shlex.quote(self._pidfile)}; [ -s "$f" ] || exit 0; p=$(cat "$f"); kill -TERM "$p" 2>/dev/null; '
            f'i=0; while kill -0 "$p" 2>/dev/null && [ $i -lt {tries} ]; do sleep 0.1; i=$((i+1)); done; '
            'kill -KILL "$p" 2>/dev/null; rm -f "$f"'
        )
        if self._local.poll() is None:
            self._executor.run(["sh", "-c", script], timeout=timeout + 10)
        return self._local.stop(timeout)


class SshExecutor:
    """Runs commands on ``user@host`` through OpenSSH with key authentication only."""

    def __init__(
        self,
        host: str,
        *,
        user: str,
        key: Path,
        known_hosts: Path,
        port: int = 22,
        name: str | None = None,
        prefix: Sequence[str] = (),
        connect_timeout: float = 10.0,
    ) -> None:
        self.host = host
        self.user = user
        self.key = key
        self.known_hosts = known_hosts
        self.port = port
        self.name = name or host
        self._local = LocalExecutor(name=self.name, prefix=prefix)
        # Host keys are checked against the given known_hosts only, never accepted on first sight: an
        # assurance run that trusted whichever key answered would prove nothing about the host it reached.
        if not str(known_hosts):
            raise TargetError(f"{self.name}: a known_hosts file is required (host keys are never auto-accepted)")
        self._options = [
            "-F", "/dev/null", "-i", str(key),
            "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
            "-o", "StrictHostKeyChecking=yes",
            "-o", f"UserKnownHostsFile={known_hosts}", "-o", "GlobalKnownHostsFile=/dev/null",
            "-o", f"ConnectTimeout={max(1, int(connect_timeout))}",
            "-o", "LogLevel=ERROR",
        ]

    def _destination(self) -> str:
        return f"{self.user}@{self.host}"

    def _remote_path(self, remote: str) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.user}@{host}:{remote}"

    @staticmethod
    def _command(argv: Sequence[str], env: Mapping[str, str] | None) -> str:
        # ssh joins its arguments with spaces for the remote shell: quote them ourselves, exactly once.
        assigns = [f"{k}={v}" for k, v in (env or {}).items()]
        return shlex.join(["env", *assigns, *argv] if assigns else list(argv))

    def _ssh(self, remote_command: str) -> list[str]:
        return ["ssh", *self._options, "-p", str(self.port), self._destination(), remote_command]

    def _check(self, result: RunResult, what: str) -> RunResult:
        if result.returncode == SSH_FAILURE and not result.timed_out:
            raise TargetError(
                f"{self.name}: ssh to {self._destination()} failed ({what}): "
                f"{result.stderr.decode(errors='replace').strip()}"
            )
        return result

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float = 30.0,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
    ) -> RunResult:
        """Run ``argv`` remotely to completion; ``returncode`` is the remote command's."""
        result = self._local.run(self._ssh(self._command(argv, env)), timeout=timeout, stdin=stdin)
        return self._check(result, shlex.join(argv))

    def spawn(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        stdout: Path | None = None,
        stderr: Path | None = None,
    ) -> SshProcess:
        """Start ``argv`` remotely; its pid is kept in a remote file so :meth:`SshProcess.stop` can end it."""
        pidfile = f"/tmp/ringfence-{uuid.uuid4().hex}.pid"
        wrapped = ["sh", "-c", 'echo $$ > "$0"; exec "$@"', pidfile, *argv]
        local = self._local.spawn(self._ssh(self._command(wrapped, env)), stdout=stdout, stderr=stderr)
        return SshProcess(self, local, pidfile)

    def _scp(self, src: str, dst: str) -> None:
        argv = ["scp", "-q", *self._options, "-P", str(self.port), src, dst]
        result = self._local.run(argv, timeout=120)
        if result.returncode != 0:
            raise TargetError(
                f"{self.name}: scp {src} {dst} failed: {result.stderr.decode(errors='replace').strip()}"
            )

    def copy_to(self, local: Path, remote: str) -> None:
        """Copy a local file to ``remote`` on the host (scp, which speaks SFTP in OpenSSH ≥ 9)."""
        self._scp(str(local), self._remote_path(remote))

    def copy_from(self, remote: str, local: Path) -> None:
        """Copy ``remote`` from the host to a local file."""
        try:
            local.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise TargetError(f"{self.name}: cannot create {local.parent}: {exc.strerror or exc}") from exc
        self._scp(self._remote_path(remote), str(local))


__all__ = ["SSH_FAILURE", "SshExecutor", "SshProcess"]
