"""What the malicious-job and exfiltration drills share: the attacker's connections, their proof, and detection.

*The attacker acts.* :func:`attack` runs one small stdlib-only program on the attacker's host through its
executor (``python3 -c``, as a probe does — so the same drill runs in a lab namespace and over SSH). Each
connection binds its own source port first and reports it; when it connects, it really does what the attack
is (an HTTP request for another job's object, a checkpoint streamed in an HTTP PUT, an SSH banner read).

*Stopped, proven as probes prove.* A connection counts as stopped by policy only when it timed out or was
reset, its destination port was listening, AND the ``denied`` element of exactly that connection (source,
destination, tcp, its own source port, destination port) moved on an enforcement point between a read before
and one after (:func:`judge_connection`). A refused connection (a closed port) proves nothing.

*Detected with identity.* A firewall decision in the site's telemetry (ulogd's NFLOG JSON at each enforcement
point, collected through the executors) for that very source, destination and port, logged after the attack
began, whose source address the inventory names as one of the actor's nodes (:func:`match_decisions`).
"""

from __future__ import annotations

import ipaddress
import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from ringfence.drill.interface import DrillContext, DrillError
from ringfence.enforce.apply import FABRIC
from ringfence.enforce.probe_matrix import DeniedKey
from ringfence.evidence import RecordKind
from ringfence.observe.flows.events.deploy import DEFAULT_DIR, FILES
from ringfence.policy import Policy
from ringfence.policy.matrix import Matrix
from ringfence.targets.interface import Executor, TargetError

#: the evidence source of the drills' own observations (the report itself is ``ringfence.drill``)
ATTACK_SOURCE = "ringfence.drill.attack"
#: said in every report that measures detection
DETECTION_NOTE = ("seconds to detect run from the attempt's start to the drill holding the telemetry record; it "
                  "first looks once the attacker's connections have ended (at least the connect timeout), so they "
                  "are an upper bound of the telemetry's own delay")
#: bytes of each point's decision log read per look (the attempt is among the newest records)
DECISION_TAIL = 4 << 20
_TAIL = '[ -e "$0" ] || exit 3; tail -c "$1" "$0"'
#: how long one attacker connection waits for an answer (a probe's timeout: far above any round trip)
CONNECT_TIMEOUT = 1.5

_ATTACK_PY = r"""
import json, os, socket, sys, threading, time
def one(a):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if a.get("mark"):
        s.setsockopt(socket.SOL_SOCKET, 36, a["mark"])  # SO_MARK: past node-local proxies, as a deny probe
    s.bind(("0.0.0.0", 0))
    out = {"sport": s.getsockname()[1], "outcome": "", "sent": 0, "reply": "", "started": time.time()}
    s.settimeout(a["timeout"])
    try:
        s.connect((a["host"], a["port"]))
        out["outcome"] = "connected"
    except socket.timeout:
        out["outcome"] = "timeout"
    except ConnectionRefusedError:
        out["outcome"] = "refused"
    except ConnectionResetError:
        out["outcome"] = "reset"
    except OSError as e:
        out["outcome"] = "error"
        out["reply"] = f"{type(e).__name__}: {e}"
    if out["outcome"] == "connected":
        try:
            if a["method"]:
                n = int(a["body"])
                head = (f"{a['method']} {a['path']} HTTP/1.0\r\nHost: {a['host']}\r\n"
                        f"Content-Type: application/octet-stream\r\nContent-Length: {n}\r\n\r\n").encode()
                s.sendall(head)
                chunk = os.urandom(min(n, 1 << 16))
                while out["sent"] < n:
                    part = chunk[: n - out["sent"]]
                    s.sendall(part)
                    out["sent"] += len(part)
            data = b""
            while len(data) < 512:
                got = s.recv(512 - len(data))
                if not got:
                    break
                data += got
                if a["first_line"] and b"\n" in data:
                    break
            out["reply"] = data[:512].decode("latin-1")
        except OSError as e:
            out["reply"] += f" [{type(e).__name__}: {e}]"
    s.close()
    return out
a = json.loads(sys.argv[1])
res = [None] * len(a)
def run(i):
    try:
        res[i] = one(a[i])
    except Exception as e:
        res[i] = {"sport": 0, "outcome": "error", "sent": 0, "reply": f"{type(e).__name__}: {e}", "started": 0}
ts = [threading.Thread(target=run, args=(i,)) for i in range(len(a))]
for t in ts:
    t.start()
for t in ts:
    t.join()
print(json.dumps(res))
"""


@dataclass(frozen=True)
class Conn:
    """One connection the attacker tries: ``host:port`` (``node`` is its inventory name), and what it sends."""

    node: str
    host: str
    port: int
    method: str = ""  # "GET"/"PUT": an HTTP request is sent once connected ("": connect, then read a banner)
    path: str = ""
    body: int = 0  # bytes of the request body (random: a checkpoint's worth)
    mark: int = 0
    first_line: bool = True  # stop reading at the first line (a banner) — else up to 512 bytes

    def describe(self) -> str:
        """``worker-0 (10.77.1.10:29500)``."""
        return f"{self.node} ({self.host}:{self.port})"


@dataclass(frozen=True)
class Outcome:
    """What one connection did, as the attacker's program saw it."""

    conn: Conn
    outcome: str  # connected | timeout | refused | reset | error | unreachable
    sport: int
    sent: int
    reply: str
    started: float

    @property
    def status(self) -> int | None:
        """The HTTP status of the reply, when it was one."""
        parts = self.reply.split(" ", 2)
        if len(parts) >= 2 and parts[0].startswith("HTTP/") and parts[1].isdigit():
            return int(parts[1])
        return None

    def to_json(self) -> dict[str, Any]:
        """JSON for the evidence record."""
        return {"node": self.conn.node, "host": self.conn.host, "port": self.conn.port, "method": self.conn.method,
                "path": self.conn.path, "body": self.conn.body, "outcome": self.outcome, "sport": self.sport,
                "sent": self.sent, "reply": self.reply[:200], "started": self.started}


def attack(executor: Executor, conns: Sequence[Conn], *, timeout: float = CONNECT_TIMEOUT) -> list[Outcome]:
    """Make every connection of ``conns`` at once from ``executor``'s host; one outcome each, in order.

    A host that cannot be reached, or a program that did not run, gives each connection ``unreachable`` or
    ``error`` with the reason — never an empty list (an attack not made proves nothing either way).
    """
    if not conns:
        return []
    args = json.dumps([{"host": c.host, "port": c.port, "method": c.method, "path": c.path, "body": c.body,
                        "mark": c.mark, "timeout": timeout, "first_line": c.first_line} for c in conns])
    try:
        res = executor.run(["python3", "-c", _ATTACK_PY, args], timeout=timeout * 4 + 30)
    except TargetError as exc:
        return [Outcome(c, "unreachable", 0, 0, exc.message, time.time()) for c in conns]
    why = res.stderr.decode(errors="replace").strip()[-300:] or "the attacker's program did not run"
    if res.returncode == 0 and not res.timed_out:
        try:
            rows = json.loads(res.stdout)
            if isinstance(rows, list) and len(rows) == len(conns):
                return [Outcome(c, str(r["outcome"]), int(r["sport"]), int(r["sent"]), str(r["reply"]),
                                float(r["started"])) for c, r in zip(conns, rows, strict=True)]
            why = f"the attacker's program printed {len(rows) if isinstance(rows, list) else 'no'} results"
        except (ValueError, KeyError, TypeError):
            why = f"unreadable output of the attacker's program {res.stdout[:80]!r}"
    return [Outcome(c, "error", 0, 0, why, time.time()) for c in conns]


# ------------------------------------------------------------------------------------------ proof


def moved(before: Mapping[str, Mapping[DeniedKey, int]], after: Mapping[str, Mapping[DeniedKey, int]],
          key: DeniedKey) -> dict[str, int]:
    """``scope/family`` → packets by which the ``denied`` element ``key`` grew between the two reads."""
    return {w: after[w][key] - before.get(w, {}).get(key, 0) for w in after
            if after[w].get(key, 0) > before.get(w, {}).get(key, 0)}


def judge_connection(o: Outcome, listening: bool | None, grew: Mapping[str, int]) -> tuple[bool | None, str]:
    """(got through?, why) for one connection: True when it connected; False only when it timed out or was reset
    on a listening port AND its own ``denied`` element grew; None (unproven) otherwise."""
    c = o.conn
    if o.outcome == "connected":
        return True, f"connected to {c.describe()}{f' and sent {o.sent} bytes' if o.sent else ''}" + (
            f"; it answered {o.reply.splitlines()[0][:60]!r}" if o.reply.strip() else "")
    if o.outcome not in ("timeout", "reset"):
        return None, f"{c.describe()}: {o.outcome}{f' ({o.reply[:120]})' if o.reply else ''} — proves nothing"
    if listening is None:
        return None, f"{c.describe()}: {o.outcome}, but whether it listens is unknown, so nothing is proven"
    if not listening:
        return None, f"{c.describe()}: {o.outcome}, but nothing listens there: a silent port proves nothing"
    if not grew:
        return None, f"{c.describe()}: {o.outcome}, but no drop counter moved for source port {o.sport}"
    where = ", ".join(f"denied@{w} +{n}" for w, n in sorted(grew.items()))
    return False, f"{c.describe()}: {o.outcome}, dropped by policy ({where})"


def combine(verdicts: Sequence[tuple[bool | None, str]]) -> tuple[bool | None, str]:
    """One attempt of several connections: through if any got through, stopped only if every one was proven."""
    if not verdicts:
        return None, "no connection was made"
    through = [w for g, w in verdicts if g is True]
    if through:
        return True, "; ".join(through)
    unproven = [w for g, w in verdicts if g is None]
    if unproven:
        return None, "; ".join(unproven)
    return False, "; ".join(w for _, w in verdicts)


# ------------------------------------------------------------------------------------------ identity


def node_of(policy: Policy, address: str) -> str | None:
    """The inventory name of the node holding ``address``."""
    return next((n.name for n in policy.nodes if address in n.addresses), None)


def who(policy: Policy, node: str) -> str:
    """``worker-2 (10.77.1.12), job train-b (spiffe://lab/job/train-b)`` — the node with its job and identity."""
    n = policy.node(node)
    addr = f" ({', '.join(n.addresses)})" if n is not None else ""
    job = next((j for j in policy.jobs if node in j.members), None)
    if job is not None:
        return f"{node}{addr}, job {job.name} ({job.identity})"
    return f"{node}{addr}" + (f" ({n.identity})" if n is not None and n.identity else "")


def approved_to(m: Matrix, node: str, address: str, port: int) -> str | None:
    """The id of an approved flow that lets ``node`` open ``address:port`` over TCP, or None."""
    a = ipaddress.ip_address(address)
    for f in m.flows_from(node):
        lo, hi = f.ports
        if "tcp" in f.protos and lo <= port <= hi and (
                address in f.destination.addresses
                or any(a in ipaddress.ip_network(c, strict=False) for c in f.destination.cidrs)):
            return f.id
    return None


# ------------------------------------------------------------------------------------------ detection


@dataclass(frozen=True)
class Detection:
    """The first firewall decision that shows an attempt, attributed to the actor by the inventory."""

    found: bool
    # attempt start → the drill had the record in hand; the drill first looks once the attacker's connections
    # have ended (at least their connect timeout), so this is an upper bound of the telemetry's own delay
    seconds: float | None
    logged_at: str  # the decision's own time (the kernel's)
    where: str  # the enforcement point that logged it
    count: int  # decisions matching the attempt
    text: str


def match_decisions(rows: Iterable[Mapping[str, Any]], policy: Policy, actor_nodes: Sequence[str],
                    keys: Sequence[tuple[str, str, int]], since: float) -> list[Mapping[str, Any]]:
    """Drop decisions for one of ``keys`` (src, dst, dport), logged at or after ``since`` (epoch seconds),
    whose source the inventory names as one of ``actor_nodes`` — in time order."""
    wanted = set(keys)
    out = []
    for r in rows:
        t = r.get("time")
        ts = t.timestamp() if isinstance(t, datetime) else None
        if (r.get("verdict") == "drop" and ts is not None and ts >= since
                and (r.get("src"), r.get("dst"), r.get("dport")) in wanted
                and node_of(policy, str(r.get("src"))) in actor_nodes):
            out.append(r)
    return sorted(out, key=lambda r: r["time"])


def detection_of(matches: Sequence[Mapping[str, Any]], policy: Policy, started: float, seen_at: float,
                 how: str) -> Detection:
    """The :class:`Detection` of an attempt from its matching decisions (none: not detected)."""
    if not matches:
        return Detection(False, None, "", "", 0, f"no {how} names it")
    first = matches[0]
    node = node_of(policy, str(first["src"])) or str(first["src"])
    rule = first.get("rule") or first.get("prefix") or "default drop"
    return Detection(
        True, round(seen_at - started, 3), first["time"].isoformat(), str(first.get("node") or ""), len(matches),
        f"{len(matches)} drop decision(s) in the {how} at {first.get('node') or '?'} ({str(rule).strip()}), "
        f"attributed to {who(policy, node)} by the inventory; first logged {first['time'].isoformat()}",
    )


#: in ``options["telemetry_dir"]``, replaced by each enforcement point's inventory name
HOST_PLACEHOLDER = "{host}"


def telemetry_dir_of(template: str, point: str) -> str:
    """The telemetry directory of ``point`` from a ``--telemetry-dir`` value: the same directory on every host,
    or — where it holds :data:`HOST_PLACEHOLDER` — one per point (hosts that share one filesystem, as the lab's
    namespaces do, each keep their logs in a directory of their own)."""
    return template.replace(HOST_PLACEHOLDER, point)


def telemetry_dirs(ctx: DrillContext, points: Iterable[str]) -> dict[str, str]:
    """Where each enforcement point keeps its telemetry: the lab's own directories on ``--target lab``,
    else ``options["telemetry_dir"]`` (see :func:`telemetry_dir_of`) or the deployment default on every host."""
    lab = ctx.options.get("lab")
    if lab is not None:
        # the lab's layout (ringfence.lab.telemetry.point_dir): one directory per point under its telemetry dir
        return {p: str(Path(lab.telemetry_dir) / p) for p in points}
    template = str(ctx.options.get("telemetry_dir") or DEFAULT_DIR)
    return {p: telemetry_dir_of(template, p) for p in points}


def enforcement_points(ctx: DrillContext) -> dict[str, Executor]:
    """``fabric`` and every host of the site, each behind its executor (what apply, probes and contain use)."""
    site = ctx.cluster.site()
    points: dict[str, Executor] = {n: site.executor(n) for n in sorted(site.hosts)}
    lab = ctx.options.get("lab")
    if FABRIC not in points and lab is not None:
        points[FABRIC] = lab.fabric_executor()  # the lab's fabric namespace is no host of its site
    if FABRIC not in points:
        raise DrillError(f"{ctx.target} has no '{FABRIC}' host: the drill cannot read the fabric's decisions",
                         hint="name the fabric's enforcement point 'fabric' in the hosts file")
    return points


def read_decisions(ctx: DrillContext, points: Mapping[str, Executor], where: Sequence[str],
                   tag: str) -> list[dict[str, Any]]:
    """The firewall decisions logged lately at the points ``where``: the newest :data:`DECISION_TAIL` bytes of
    each point's ulogd log, read through its executor (a torn first line is skipped by the reader)."""
    from ringfence.observe.flows.events.ulogd import UlogdReader

    dirs = telemetry_dirs(ctx, where)
    rows: list[dict[str, Any]] = []
    for p in where:
        if p not in points:
            continue
        path = f"{dirs[p]}/{FILES['ulogd']}"
        try:
            res = points[p].run(["sh", "-c", _TAIL, path, str(DECISION_TAIL)], timeout=30)
        except TargetError as exc:
            ctx.progress(f"{p}: telemetry not read: {exc.message}")
            continue
        if res.returncode != 0 or res.timed_out or not res.stdout:
            continue  # no log there (yet): nothing decided there is known
        local = ctx.workdir / f"decisions-{tag}-{p}.json"
        local.write_bytes(res.stdout)
        rows += UlogdReader().read(local, node=p).events.select(
            ["time", "src", "dst", "dport", "verdict", "rule", "prefix", "node"]).to_pylist()
    return rows


def await_detection(ctx: DrillContext, points: Mapping[str, Executor], where: Sequence[str],
                    attempts: Mapping[str, tuple[Sequence[tuple[str, str, int]], float]],
                    actor_nodes: Sequence[str], *, bound: float) -> dict[str, Detection]:
    """Poll the telemetry at ``where`` until every attempt (step → its keys and start time) shows up, or ``bound``
    seconds pass; one :class:`Detection` per step (``found=False`` for those never seen)."""
    deadline = time.monotonic() + bound
    found: dict[str, Detection] = {}
    rounds = 0
    while True:
        rounds += 1
        rows = read_decisions(ctx, points, where, f"{len(found)}-{rounds}")
        seen_at = time.time()
        for step, (keys, started) in attempts.items():
            if step not in found:
                m = match_decisions(rows, ctx.policy, actor_nodes, keys, started - 1.0)
                if m:
                    found[step] = detection_of(m, ctx.policy, started, seen_at, "firewall telemetry (NFLOG)")
        if len(found) == len(attempts) or time.monotonic() > deadline:
            break
        time.sleep(0.3)  # a poll interval of the detector, not a wait for an event: bounded by ``bound``
    for step in attempts:
        found.setdefault(step, Detection(False, None, "", "", 0,
                                         f"no drop decision naming it at {', '.join(where)} within {bound:g}s"))
    return found


def look_for(outcomes: Sequence[Outcome], full: float) -> float:
    """How long to wait for a drop decision: ``full`` when some connection met silence or a reset (a drop rule
    may have logged it); 0 — one look — when every one was answered, since no drop rule saw those."""
    return full if any(o.outcome in ("timeout", "reset") for o in outcomes) else 0.0


def record_attempt(ctx: DrillContext, scenario: str, step: str, outcomes: Sequence[Outcome],
                   extra: Mapping[str, Any] | None = None) -> str:
    """The attacker's connections of one step, on the record (observation); returns its evidence id."""
    data = {"scenario": scenario, "step": step, "target": ctx.target,
            "connections": [o.to_json() for o in outcomes], **(extra or {})}
    return str(ctx.store.append(RecordKind.OBSERVATION, ATTACK_SOURCE, f"drill {scenario} {step}", data))


__all__ = [
    "ATTACK_SOURCE",
    "CONNECT_TIMEOUT",
    "DETECTION_NOTE",
    "HOST_PLACEHOLDER",
    "Conn",
    "Detection",
    "Outcome",
    "approved_to",
    "attack",
    "await_detection",
    "combine",
    "detection_of",
    "enforcement_points",
    "judge_connection",
    "look_for",
    "match_decisions",
    "moved",
    "node_of",
    "read_decisions",
    "record_attempt",
    "telemetry_dir_of",
    "telemetry_dirs",
    "who",
]
