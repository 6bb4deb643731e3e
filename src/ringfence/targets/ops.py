"""Host operations every action needs, written once over :meth:`Executor.run` so they work on any executor.

Files are written atomically on the host (temp file, then rename) with their mode set before the
rename, so a key is never readable by others, not even for a moment. Daemons are started detached
(``setsid``, output to a log on the host, pid written by the daemon's own wrapper before it execs),
so they outlive the command that started them — a sidecar started by ``encrypt enable`` runs until
``encrypt disable``, whether the host is a lab namespace, this machine or an SSH host.

A daemon is only ever signalled while its command line still names ``marker`` (a directory of
ours): a recycled pid that now belongs to someone else is never touched. Its whole process group
is signalled, since ``setsid`` made it a group leader: the children it started end with it.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Collection, Iterable, Mapping, Sequence

from ringfence.targets.interface import Executor, RunResult, TargetError

#: exit status of :func:`read_file`'s script when the file does not exist
_MISSING = 3

_WRITE = (
    'umask 077; mkdir -p "$(dirname "$0")" && cat > "$0.rf-tmp" && chmod "$1" "$0.rf-tmp" && mv -f "$0.rf-tmp" "$0"'
)
_READ = '[ -e "$0" ] || exit 3; cat "$0"'
# $0 pidfile, $1 log; the daemon's wrapper writes its own pid (it then execs, so the pid is the daemon's).
# The daemon writes its own pid (after setsid, before exec); the pid is echoed only once the pidfile holds it (or
# the daemon has already exited), so a caller that reads the pidfile next never finds it missing or stale.
_START = (
    'p="$0"; l="$1"; shift; mkdir -p "$(dirname "$p")" "$(dirname "$l")" || exit 1; rm -f "$p"; '
    "setsid sh -c 'echo $$ > \"$0\"; exec \"$@\"' \"$p\" \"$@\" >>\"$l\" 2>&1 </dev/null & c=$!; "
    'while [ ! -s "$p" ] && kill -0 "$c" 2>/dev/null; do sleep 0.02; done; echo "$c"'
)
# Is pid $1 alive with a command line naming $0?  (shared by alive and stop)
_OURS = 'ours() { [ -r /proc/$1/cmdline ] && tr "\\0" " " < /proc/$1/cmdline | grep -qF -- "$M"; }; '


def _check(result: RunResult, executor: Executor, what: str) -> RunResult:
    if result.timed_out:
        raise TargetError(f"{executor.name}: {what} timed out after {result.seconds:.0f}s")
    if result.returncode != 0:
        raise TargetError(f"{executor.name}: {what} failed: {result.stderr.decode(errors='replace').strip()[-400:]}")
    return result


def write_file(executor: Executor, path: str, data: bytes, *, mode: int = 0o600, timeout: float = 30.0) -> None:
    """Write ``data`` to ``path`` on the host atomically, ``mode`` set before it appears (default 0600)."""
    res = executor.run(["sh", "-c", _WRITE, path, f"{mode:o}"], stdin=data, timeout=timeout)
    _check(res, executor, f"writing {path}")


def read_file(executor: Executor, path: str, *, timeout: float = 30.0) -> bytes | None:
    """The bytes of ``path`` on the host, or None when it does not exist."""
    res = executor.run(["sh", "-c", _READ, path], timeout=timeout)
    if res.returncode == _MISSING and not res.timed_out:
        return None
    return _check(res, executor, f"reading {path}").stdout


def remove_tree(executor: Executor, path: str, *, timeout: float = 30.0) -> None:
    """``rm -rf path`` on the host (refuses a path that is not absolute and at least two levels deep)."""
    parts = [p for p in path.split("/") if p]
    if not path.startswith("/") or len(parts) < 2 or ".." in parts:
        raise TargetError(f"{executor.name}: refusing to remove {path!r}")
    _check(executor.run(["rm", "-rf", "--", path], timeout=timeout), executor, f"removing {path}")


def start_daemon(
    executor: Executor,
    argv: Sequence[str],
    *,
    marker: str,
    pidfile: str,
    log: str,
    env: Mapping[str, str] | None = None,
    timeout: float = 30.0,
) -> int:
    """Start ``argv`` detached on the host; returns its pid there. Its command line must name ``marker``."""
    if not any(marker in a for a in argv):
        raise TargetError(f"{executor.name}: refusing to start {argv[0]!r}: its command line must name {marker}")
    assigns = [f"{k}={v}" for k, v in (env or {}).items()]
    full = ["env", *assigns, *argv] if assigns else list(argv)
    res = _check(executor.run(["sh", "-c", _START, pidfile, log, *full], timeout=timeout), executor,
                 f"starting {shlex.join(argv[:3])}")
    text = res.stdout.decode(errors="replace").strip()
    if not text.isdigit():
        raise TargetError(f"{executor.name}: starting {argv[0]!r} gave no pid: {text[:200]!r}")
    return int(text)


def alive(executor: Executor, pids: Iterable[int], *, marker: str, timeout: float = 30.0) -> set[int]:
    """Which of ``pids`` still run on the host with a command line naming ``marker``."""
    wanted = sorted(set(pids))
    if not wanted:
        return set()
    script = _OURS + 'for p in "$@"; do ours "$p" && echo "$p"; done; exit 0'
    res = _check(executor.run(["sh", "-c", script, "sh", *map(str, wanted)], env={"M": marker}, timeout=timeout),
                 executor, "checking processes")
    return {int(w) for w in res.stdout.split() if w.isdigit()}


def stop_daemons(
    executor: Executor, pids: Iterable[int], *, marker: str, grace: float = 5.0, timeout: float = 60.0
) -> set[int]:
    """SIGTERM each of ``pids`` that is ours (its process group), SIGKILL after ``grace``; returns those left."""
    wanted = sorted(set(pids))
    if not wanted:
        return set()
    tries = max(1, int(grace * 10))
    # `kill -SIG -PGID`, never `kill -SIG -- -PGID`: dash (Debian's /bin/sh) rejects the `--`, and the fallback
    # then signalled only the group leader, leaving the daemon under a wrapper shell running.
    script = _OURS + (
        'mine=""; for p in "$@"; do ours "$p" && mine="$mine $p"; done; '
        'for p in $mine; do kill -TERM -"$p" 2>/dev/null || kill -TERM "$p" 2>/dev/null; done; '
        f'i=0; while [ $i -lt {tries} ]; do left=""; for p in $mine; do ours "$p" && left="$left $p"; done; '
        '[ -z "$left" ] && exit 0; sleep 0.1; i=$((i+1)); done; '
        'for p in $left; do kill -KILL -"$p" 2>/dev/null || kill -KILL "$p" 2>/dev/null; done; sleep 0.2; '
        'for p in $left; do ours "$p" && echo "$p"; done; exit 0'
    )
    res = _check(executor.run(["sh", "-c", script, "sh", *map(str, wanted)], env={"M": marker}, timeout=timeout),
                 executor, "stopping processes")
    return {int(w) for w in res.stdout.split() if w.isdigit()}


def wait_for_files(executor: Executor, paths: Sequence[str], *, seconds: float) -> list[str]:
    """Wait up to ``seconds`` on the host until every path exists (one call, polling there); returns those missing."""
    if not paths:
        return []
    tries = max(1, int(seconds * 20))
    script = (
        f'i=0; while [ $i -lt {tries} ]; do m=""; for f in "$@"; do [ -e "$f" ] || m="$m $f"; done; '
        '[ -z "$m" ] && exit 0; sleep 0.05; i=$((i+1)); done; '
        'for f in "$@"; do [ -e "$f" ] || echo "$f"; done; exit 0'
    )
    res = _check(executor.run(["sh", "-c", script, "sh", *paths], timeout=seconds + 30), executor, "waiting for files")
    return res.stdout.decode(errors="replace").split()


_LISTEN_PY = r"""
import json
ports = set()
for t in ("/proc/net/tcp", "/proc/net/tcp6"):
    try:
        rows = open(t).read().splitlines()[1:]
    except OSError:
        continue
    for r in rows:
        f = r.split()
        if len(f) > 3 and f[3] == "0A":
            addr, port = f[1].rsplit(":", 1)
            # a socket bound to loopback (a local proxy's listener) cannot be reached from another node
            if addr in ("0100007F", "00000000000000000000000001000000"):
                continue
            ports.add(int(port, 16))
print(json.dumps(sorted(ports)))
"""


def listening_ports(executor: Executor) -> frozenset[int] | None:
    """TCP ports in LISTEN state on ``executor``'s host (read from /proc, no traffic); None if unreadable."""
    try:
        res = executor.run(["python3", "-c", _LISTEN_PY], timeout=30)
    except TargetError:
        return None  # unreachable: whether anything listens there is unknown
    if res.returncode != 0 or res.timed_out:
        return None
    try:
        return frozenset(int(p) for p in json.loads(res.stdout))
    except (ValueError, TypeError):
        return None


def free_of(busy: Collection[int], lo: int, hi: int) -> list[int]:
    """The ports of ``lo``-``hi`` not in ``busy`` (listening ports already read), ascending."""
    return [p for p in range(lo, hi + 1) if p not in busy]


def free_ports(executor: Executor, lo: int, hi: int) -> list[int] | None:
    """The ports of ``lo``-``hi`` nothing on ``executor``'s host listens on, ascending; None if unreadable."""
    busy = listening_ports(executor)
    return None if busy is None else free_of(busy, lo, hi)


__all__ = ["alive", "free_of", "free_ports", "listening_ports", "read_file", "remove_tree", "start_daemon",
           "stop_daemons", "wait_for_files", "write_file"]
