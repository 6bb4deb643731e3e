"""Start the lab's long-running processes inside namespaces, and stop exactly those again.

Each process is started as ``ip netns exec NS sh -c 'echo $$ > PIDFILE; exec "$@"' PIDFILE ARGV…``:
``ip netns exec`` and ``sh`` both *exec*, so the pid we get back is the service's own pid, and the
process writes its pid file before it becomes the service, so even a crash of the starting process
right after the start leaves a record. Every process runs in its own session (its pgid is its pid),
so stopping it reaches the children it made (an ``ssh`` client, say) and nothing else.

Before any signal, a pid is checked to still be *ours*: alive, and its command line naming the lab's
own directory — a recycled pid belonging to someone else is never signalled.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from ringfence.lab.topology import LabError

# Popen objects of processes this interpreter started, kept so they are reaped by us when stopped
# (and never garbage-collected while running, which would warn). Processes started by another
# process (the CLI's ``lab up``) are reaped by init once stopped.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}

_WRAPPER = 'echo $$ > "$0"; exec "$@"'


def spawn(
    namespace: str,
    argv: Sequence[str],
    *,
    pidfile: Path,
    log: Path,
    env: Mapping[str, str] | None = None,
) -> int:
    """Start ``argv`` in ``namespace``, output appended to ``log``; returns its pid."""
    full = ["ip", "netns", "exec", namespace, "sh", "-c", _WRAPPER, str(pidfile), *argv]
    environ = dict(os.environ)
    if env:
        environ.update(env)
    try:
        pidfile.parent.mkdir(parents=True, exist_ok=True)
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            popen = subprocess.Popen(
                full, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=environ,
                start_new_session=True,
            )
    except OSError as exc:
        raise LabError(f"cannot start {argv[0]} in {namespace}: {exc.strerror or exc}") from exc
    _CHILDREN[popen.pid] = popen
    return popen.pid


def _stat(pid: int) -> tuple[str, int] | None:
    """(state letter, pgid) of a live process, None if it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name may hold spaces or parentheses: the fields start after the last ')'
    fields = raw[raw.rfind(")") + 2 :].split()
    return fields[0], int(fields[2])


def is_alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie has finished: only its parent's bookkeeping is left)."""
    child = _CHILDREN.get(pid)
    if child is not None:
        if child.poll() is not None:
            del _CHILDREN[pid]
            return False
        return True
    st = _stat(pid)
    return st is not None and st[0] not in ("Z", "X")


def is_ours(pid: int, marker: str) -> bool:
    """True if ``pid`` is alive and its command line contains ``marker`` (the lab's directory)."""
    # A process caught in the middle of exec shows an empty command line for a moment: look again.
    for _ in range(20):
        if not is_alive(pid):
            return False
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return False
        if cmdline:
            return marker in cmdline.replace(b"\0", b" ").decode(errors="replace")
        time.sleep(0.025)
    return False


def _signal(pid: int, sig: signal.Signals) -> None:
    st = _stat(pid)
    if st is None:
        return
    try:
        if st[1] == pid:  # a session/group leader we started: take its children with it
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _wait_gone(pids: set[int], deadline: float) -> set[int]:
    left = set(pids)
    while left and time.monotonic() < deadline:
        left = {p for p in left if is_alive(p)}
        if left:
            time.sleep(0.05)
    return left


def stop(pids: Iterable[int], marker: str, *, grace: float = 3.0) -> tuple[set[int], set[int]]:
    """SIGTERM, then after ``grace`` seconds SIGKILL, every pid that is still ours.

    Returns ``(stopped, left)``: the pids that were ours and ended, and those still alive after SIGKILL.
    """
    ours = {p for p in pids if is_ours(p, marker)}
    for p in ours:
        _signal(p, signal.SIGTERM)
    left = _wait_gone(ours, time.monotonic() + grace)
    for p in left:
        if is_ours(p, marker):
            _signal(p, signal.SIGKILL)
    left = _wait_gone(left, time.monotonic() + 5.0)
    for p in ours - left:
        child = _CHILDREN.pop(p, None)
        if child is not None:
            child.wait()
    return ours - left, left


__all__ = ["is_alive", "is_ours", "spawn", "stop"]
