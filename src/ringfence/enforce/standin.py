"""Stand-in listeners: how the probe matrix proves a path to a service that listens only now and then.

Some services bind a port only while they work: ``srun`` listens on a port of Slurm's ``SrunPortRange``
on the submit host for the life of one job step, and nothing listens there between steps. A probe to
such a service while nothing of it listens proves neither side: the allowed path is refused by a closed
port, and a silent port proves no denial. The policy says which services are like that
(``on_demand: true``); for each whose node listens on none of its ports, the matrix places a stand-in: a
tiny stdlib-only listener on a free port of the service's range (its one port for a single port),
started on that node through its executor (lab namespace or SSH alike), that accepts and closes
connections while the probes run. Allowed sources must connect to it; denied ones must be dropped by
policy on their way to it (a listening port, so the drop counter decides).

A stand-in proves the enforcement path — the rule that admits or drops a port of the service — not the
service itself; the probe's record says so. A service not declared on demand is never stood in for:
when it does not listen, that is a finding of its own (the service the policy approves is not running).

Clean-up is bounded by the stand-in itself: it ends when its stop file appears, when the run that started
it is gone (it writes a heartbeat to the pipe that run reads: a dead reader breaks it, in a lab namespace
as over SSH, where sshd closes the session's pipes once the client dies), or when its own deadline passes.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

from ringfence.policy import Policy, Service
from ringfence.targets.interface import Executor, RunResult, TargetError
from ringfence.targets.ops import free_of, listening_ports

#: names every stand-in's command line and stop file, so a host's operator can tell what it is
MARKER = "ringfence-standin"
#: the longest a stand-in lives when nobody stops it (s): well above a fleet's probe matrix over SSH;
#: the run stops it through its stop file as soon as its probes are done
DEFAULT_DEADLINE = 600.0

_STANDIN_PY = r"""
import os, select, socket, sys, time
port, stop, deadline = int(sys.argv[1]), sys.argv[2], time.monotonic() + float(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", port))
s.listen(128)
print("listening", port, flush=True)
accepted, beat = 0, time.monotonic()
while time.monotonic() < deadline and not os.path.exists(stop):
    r, _, _ = select.select([s], [], [], 0.1)
    if r:
        c, _ = s.accept()
        accepted += 1
        c.close()
    if time.monotonic() - beat > 1.0:  # the run that started it reads this; once it is gone, so is the stand-in
        beat = time.monotonic()
        try:
            sys.stdout.write("."); sys.stdout.flush()
        except (BrokenPipeError, OSError):
            break
s.close()
try:
    print("accepted", accepted, flush=True)
except (BrokenPipeError, OSError):
    pass
"""


@dataclass(frozen=True)
class StandIn:
    """One stand-in listener: ``service`` (a port range on ``node``) stood in for on ``port``."""

    node: str
    service: str
    port: int
    lo: int
    hi: int
    stop_file: str

    def describe(self) -> str:
        """In words, for a probe's detail and the record."""
        return (f"stand-in listener on {self.node}:{self.port} for service {self.service} "
                f"(ports {self.lo}-{self.hi}; nothing of its range listened)")


@dataclass
class StandIns:
    """The stand-ins of one probe run: which are listening, and the threads that wait for them to end."""

    placed: list[StandIn] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # a stand-in that could not be placed, in words
    _threads: list[tuple[StandIn, Executor, threading.Thread, list[RunResult | TargetError]]] = field(
        default_factory=list)

    def at(self) -> dict[tuple[str, int], StandIn]:
        """(node, port) → the stand-in listening there."""
        return {(s.node, s.port): s for s in self.placed}

    def stop(self) -> None:
        """Tell every stand-in to end (its stop file) and wait for it (bounded by its own deadline)."""
        for s, ex, _t, _out in self._threads:
            try:
                ex.run(["sh", "-c", ': > "$1"', "sh", s.stop_file], timeout=30)
            except TargetError:
                pass  # the host went away: its stand-in ends at its own deadline
        for s, ex, t, _out in self._threads:
            t.join(timeout=35)
            try:
                ex.run(["rm", "-f", "--", s.stop_file], timeout=30)
            except TargetError:
                pass
        self._threads.clear()


def transient_services(policy: Policy, listening: Mapping[str, frozenset[int] | None],
                       reachable: Collection[str]) -> list[Service]:
    """TCP services the policy says listen on demand (``on_demand: true``) whose node is known to listen on
    none of their ports now (and can be reached)."""
    out: list[Service] = []
    for s in policy.services:
        lo, hi = s.port_range
        ports = listening.get(s.node)
        if s.proto != "tcp" or not s.on_demand or s.node not in reachable or ports is None:
            continue
        if not any(lo <= p <= hi for p in ports):
            out.append(s)
    return out


def place(policy: Policy, executors: Mapping[str, Executor], listening: dict[str, frozenset[int] | None], *,
          deadline: float = DEFAULT_DEADLINE, wait: float = 30.0,
          progress: Callable[[str], None] | None = None) -> StandIns:
    """Start a stand-in for every transient range service of ``policy`` and wait until each listens.

    ``listening`` (node → ports) is what the matrix read; it is updated in place with the ports the
    stand-ins were *seen* listening on (read again from the host, never assumed). A stand-in not seen
    listening within ``wait`` seconds is stopped and reported in ``failed``; its service's probes then
    prove nothing, as before.
    """
    say = progress or (lambda _msg: None)
    out = StandIns()
    todo = transient_services(policy, listening, list(executors))
    for svc in todo:
        lo, hi = svc.port_range
        free = free_of(listening.get(svc.node) or frozenset(), lo, hi)  # the ports read above, not read again
        if not free:
            out.failed.append(f"service {svc.name}: every port of {lo}-{hi} on {svc.node} is in use")
            continue
        port = free[-1]  # from the top, where services rarely are
        stop_file = f"/tmp/{MARKER}-{secrets.token_hex(6)}"
        s = StandIn(svc.node, svc.name, port, lo, hi, stop_file)
        ex = executors[svc.node]
        # python3 and the stdlib only, as the probe program itself: nothing of ringfence on the host
        argv = ["python3", "-c", _STANDIN_PY, str(port), stop_file, f"{deadline:g}", MARKER]
        result: list[RunResult | TargetError] = []

        def serve(ex: Executor = ex, argv: list[str] = argv, result: list[RunResult | TargetError] = result) -> None:
            try:
                result.append(ex.run(argv, timeout=deadline + 30))
            except TargetError as exc:
                result.append(exc)

        t = threading.Thread(target=serve, name=f"{MARKER}-{svc.node}-{port}", daemon=True)
        t.start()
        out._threads.append((s, ex, t, result))
        out.placed.append(s)
    if not out.placed:
        return out
    # seen listening, not assumed: read the hosts again until every stand-in's port is there (or it ended)
    end = time.monotonic() + wait
    pending = {(s.node, s.port) for s in out.placed}
    while pending and time.monotonic() < end:
        for node in sorted({n for n, _ in pending}):
            ports = listening_ports(executors[node])
            if ports is not None:
                listening[node] = ports | (listening.get(node) or frozenset())
                pending -= {(n, p) for n, p in pending if n == node and p in ports}
        ended = {(s.node, s.port) for s, _ex, t, _r in out._threads if not t.is_alive()}
        if pending and pending <= ended:
            break
        if pending:
            time.sleep(0.1)
    for s, _ex, _t, res in list(out._threads):
        if (s.node, s.port) in pending:
            why = res[0] if res else "not seen listening in time"
            detail = (why.message if isinstance(why, TargetError)
                      else f"exit {why.returncode}: {why.stderr.decode(errors='replace')[-200:]}"
                      if isinstance(why, RunResult) else why)
            out.failed.append(f"service {s.service}: the stand-in on {s.node}:{s.port} did not listen ({detail})")
            out.placed.remove(s)
            ports = listening.get(s.node)
            if ports is not None:
                listening[s.node] = ports - {s.port}
    for s in out.placed:
        say(s.describe())
    return out


__all__ = ["DEFAULT_DEADLINE", "MARKER", "StandIn", "StandIns", "place", "transient_services"]
