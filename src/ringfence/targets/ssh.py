"""Executor over a real OpenSSH client: ``ssh -o BatchMode=yes -i KEY user@host CMD``, ``scp`` for copies.

The client can itself run under a prefix (``ip netns exec <jump-namespace>``), which is how the lab
reaches its management node from the jump host. No user or system ``ssh_config`` is read
(``-F /dev/null``): every option that matters is on the command line, so a run is reproducible.

An ``ssh`` exit status of 255 means ssh itself failed (connection, authentication, host key) and is
raised as :class:`TargetError`; any other status is the remote command's and is returned.

Commands to one host share one connection (OpenSSH's ``ControlMaster``): a drill or a rollout step sends
hundreds of short commands, and a new connection costs a key exchange on both ends each time (0.41 s a
command through the lab's jump host at load 2, against 0.15 s over the shared connection). The shared
connection is checked like any other — against this executor's own known_hosts, with its own key — and
its socket's name is a digest of everything that decides that check (client prefix, user, host, port,
and the key and known_hosts files, their contents read at each command), so two executors that would
verify differently never share one, nor does a command after its known_hosts changed. Long-lived
processes (:meth:`SshExecutor.spawn`) get connections of their own, and at most :data:`MUX_SESSIONS`
commands use the shared one at once (sshd's ``MaxSessions`` defaults to 10): a command beyond that, or
one the shared connection refuses, opens its own. :func:`close_masters` ends every shared connection
this process opened (the CLI calls it when a command ends; ``ControlPersist`` ends a forgotten one).
"""

from __future__ import annotations

import atexit
import hashlib
import os
import shlex
import shutil
import tempfile
import threading
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

from ringfence.targets.interface import RunResult, TargetError
from ringfence.targets.local import LocalExecutor, LocalProcess

SSH_FAILURE = 255
#: commands that share one host's connection at once (below sshd's default MaxSessions of 10)
MUX_SESSIONS = 8
#: seconds an idle shared connection outlives its last command when nobody closes it (a crashed run)
MUX_PERSIST = 60
#: what ssh says when the shared connection refused a session before the command started (it then runs on a
#: connection of its own); a failure after it may have started (the master died mid-command) is not retried,
#: since a command such as ``nft -f`` must not run twice
_MUX_REFUSED = ("Session open refused", "mux_client_request_session", "mux_client_hello_exchange")

_mux_lock = threading.Lock()
_mux_dir: str | None = None
_at_exit = False
#: control path → (how to reach it: the client prefix and ssh options, destination), for close_masters
_masters: dict[str, tuple[tuple[str, ...], tuple[str, ...], str]] = {}
_slots: dict[str, threading.BoundedSemaphore] = {}


def _control_dir() -> str:
    """This process's directory of control sockets (0700, short: a socket path has ~100 bytes)."""
    global _mux_dir, _at_exit
    with _mux_lock:
        if _mux_dir is None or not os.path.isdir(_mux_dir):
            _mux_dir = tempfile.mkdtemp(prefix="rf-ssh-", dir="/tmp")
            if not _at_exit:
                atexit.register(close_masters)
                _at_exit = True
        return _mux_dir


def close_masters(through: str | None = None) -> None:
    """End the shared connections this process opened (``ssh -O exit``) and remove their sockets: all of
    them, or only those whose client prefix contains ``through`` (e.g. ``<lab>-``: the namespaces of a lab
    about to be deleted)."""
    global _mux_dir
    with _mux_lock:
        if through is None:
            masters, gone_dir = dict(_masters), _mux_dir
            _masters.clear()
            _slots.clear()  # a command still holding a slot releases its own semaphore object
            _mux_dir = None
        else:
            masters = {p: m for p, m in _masters.items() if any(through in part for part in m[0])}
            gone_dir = None
            for path in masters:
                _masters.pop(path, None)
                _slots.pop(path, None)
    for path, (prefix, options, destination) in masters.items():
        if os.path.exists(path):
            try:
                LocalExecutor(prefix=prefix).run(["ssh", *options, "-o", f"ControlPath={path}", "-O", "exit",
                                                  destination], timeout=10)
            except TargetError:
                pass  # gone already; ControlPersist ends it otherwise
    if gone_dir is not None:
        shutil.rmtree(gone_dir, ignore_errors=True)


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
        # the remote side writes its pid file as its first act; a stop that comes sooner (the command was just
        # spawned: over a shared connection the stop itself takes ~0.1 s) waits for it, bounded, rather than
        # leave the remote process running once the local client is gone
        script = (
            f'f={shlex.quote(self._pidfile)}; i=0; while [ ! -s "$f" ] && [ $i -lt {tries} ]; do sleep 0.1; '
            'i=$((i+1)); done; [ -s "$f" ] || exit 0; p=$(cat "$f"); kill -TERM "$p" 2>/dev/null; '
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
        multiplex: bool = True,
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
            # a host that stops answering on an open connection is noticed in ~15 s, not at a command's timeout
            "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3",
            "-o", "LogLevel=ERROR",
        ]
        self._prefix = tuple(prefix)
        self._multiplex = multiplex

    def _control(self) -> str | None:
        """The shared connection's socket name: a digest of what its host-key check and login depend on,
        the *contents* of the key and known_hosts included (read now: a known_hosts changed since the
        connection opened never rides it). None when they cannot be read: ssh itself then says why."""
        try:
            pinned, key = Path(self.known_hosts).read_bytes(), Path(self.key).read_bytes()
        except OSError:
            return None
        h = hashlib.sha256("\0".join([*self._prefix, self.user, self.host, str(self.port), str(self.key),
                                       str(self.known_hosts)]).encode())
        h.update(hashlib.sha256(pinned).digest() + hashlib.sha256(key).digest())
        return h.hexdigest()[:24]

    def _mux(self) -> tuple[list[str], threading.BoundedSemaphore | None]:
        """The options that put a command on the shared connection, and the slot it holds (none: its own)."""
        control = self._control() if self._multiplex else None
        if control is None:
            return [], None
        path = os.path.join(_control_dir(), control)
        with _mux_lock:
            slot = _slots.setdefault(path, threading.BoundedSemaphore(MUX_SESSIONS))
            _masters.setdefault(path, (self._prefix, tuple(self._options), self._destination()))
        if not slot.acquire(blocking=False):
            return [], None  # every shared session is busy: this command opens its own connection
        return ["-o", "ControlMaster=auto", "-o", f"ControlPath={path}", "-o", f"ControlPersist={MUX_PERSIST}"], slot

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

    def _ssh(self, remote_command: str, mux: Sequence[str] = ()) -> list[str]:
        return ["ssh", *self._options, *mux, "-p", str(self.port), self._destination(), remote_command]

    @staticmethod
    def _refused_by_mux(result: RunResult) -> bool:
        err = result.stderr.decode(errors="replace")
        return result.returncode == SSH_FAILURE and not result.timed_out and any(m in err for m in _MUX_REFUSED)

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
        command = self._command(argv, env)
        mux, slot = self._mux()
        try:
            result = self._local.run(self._ssh(command, mux), timeout=timeout, stdin=stdin)
        finally:
            if slot is not None:
                slot.release()
        if mux and self._refused_by_mux(result):
            result = self._local.run(self._ssh(command), timeout=timeout, stdin=stdin)  # a connection of its own
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
        mux, slot = self._mux()
        try:
            result = self._local.run(["scp", "-q", *self._options, *mux, "-P", str(self.port), src, dst], timeout=120)
        finally:
            if slot is not None:
                slot.release()
        if mux and self._refused_by_mux(result):
            result = self._local.run(["scp", "-q", *self._options, "-P", str(self.port), src, dst], timeout=120)
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


__all__ = ["MUX_PERSIST", "MUX_SESSIONS", "SSH_FAILURE", "SshExecutor", "SshProcess", "close_masters"]
