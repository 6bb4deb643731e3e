"""The probe matrix: prove both sides of a policy on a live target, through executors.

*Permitted*: every approved TCP flow is exercised from one concrete source node (for a job's collective,
from every other rank) to a listening port of its destination, with the application's own greeting
where the service has one (HTTP, SSH); it must connect and answer.

*Denied*: for every ordered zone pair and every sensitive port in the destination zone — each TCP
service (ssh, management API, storage, replication) and the rendezvous port of each job's collective —
one node of the source zone that the policy does not approve for it probes it; and each job's ranks
probe every other job's collective. A denial counts (``by_policy=True``) only when all three hold:

* the destination port was LISTENING when the matrix ran (so without policy the probe would have
  connected or been refused — a silent port proves nothing);
* the probe timed out or was reset (a refused connection means a closed port and proves nothing);
* the element of a ``denied`` set for exactly that probe (source, destination, tcp, its own source
  port, destination port) moved between a snapshot taken before the probes and one taken after, on one
  of the enforcement points.

Probes from one source run as one batch (one process, one thread per probe), all sources at once, so
the whole matrix takes about one probe timeout plus two reads of the ``denied`` sets.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ringfence.controls.interface import ProbeResult
from ringfence.enforce.apply import FABRIC
from ringfence.enforce.nftables import TABLE
from ringfence.enforce.nftrun import NftError
from ringfence.enforce.probe import ProbeTarget, RawProbe, tcp_probes
from ringfence.enforce.standin import StandIn, place
from ringfence.evidence import EvidenceStore, RecordKind
from ringfence.marks import LOCAL_PROXY_BYPASS
from ringfence.policy import Policy, Service
from ringfence.policy.matrix import Matrix, ResolvedFlow, resolve
from ringfence.targets.interface import Executor, TargetError
from ringfence.targets.ops import listening_ports

SOURCE = "enforce.probe"  # = ringfence.enforce.facts.PROBE_SOURCE
#: Default probe timeout (s): far above a lab or data-centre round trip, short enough to keep runs quick.
DEFAULT_TIMEOUT = 1.5
#: A permitted path that ran out of time is tried once more with this many times the timeout.
RETRY_FACTOR = 4

Progress = Callable[[str], None]
DeniedKey = tuple[str, str, str, int, int]  # saddr, daddr, proto, sport, dport


@dataclass(frozen=True)
class ProbeSpec:
    """One planned probe: from node ``source`` to ``destination`` (a node) at ``host:port``."""

    source: str
    destination: str
    host: str
    port: int
    expected: str  # "allow" | "deny"
    app: str = ""  # application greeting to exchange: "http", "https", "ssh" or "" (TCP only)
    rule: str | None = None  # the approved flow an allow probe exercises
    why: str = ""  # what it proves, in words
    proto: str = "tcp"


@dataclass(frozen=True)
class ProbePlan:
    """The probes to run, and what could not be planned (with the reason)."""

    probes: tuple[ProbeSpec, ...]
    skipped: tuple[str, ...] = ()


@dataclass(frozen=True)
class ProbeRun:
    """The results of one matrix run and the evidence record that holds them."""

    target: str
    results: tuple[ProbeResult, ...]
    plan: ProbePlan
    evidence: str
    seconds: float
    listening: Mapping[str, tuple[int, ...]]

    @property
    def failures(self) -> tuple[ProbeResult, ...]:
        """Probes whose expected behaviour was not shown (see :func:`behaviour_failed`)."""
        return tuple(r for r in self.results if behaviour_failed(r))


def behaviour_failed(result: ProbeResult) -> bool:
    """An allow probe that did not connect (and answer), or a deny probe not proven blocked by policy."""
    if result.expected == "allow":
        return result.outcome != "connected"
    return not (result.outcome in ("timeout", "reset") and result.by_policy is True)


# ------------------------------------------------------------------------------------------ gathering


def denied_counters(points: Mapping[str, Executor]) -> dict[str, dict[DeniedKey, int]]:
    """Every element of every ``denied`` set, per ``scope/family``, with its packet counter."""
    jobs = [(scope, ex, fam) for scope, ex in points.items() for fam in (("inet", "bridge") if scope == FABRIC
                                                                          else ("inet",))]

    def read(job: tuple[str, Executor, str]) -> tuple[str, dict[DeniedKey, int] | None]:
        scope, ex, family = job
        try:
            res = ex.run(["nft", "-j", "list", "set", family, TABLE, "denied"], timeout=30)
        except TargetError:
            return f"{scope}/{family}", None  # unreachable: no counters from here, so nothing proven by them
        if res.timed_out:
            return f"{scope}/{family}", None  # no answer in time: the same — unknown, never an empty set
        out: dict[DeniedKey, int] = {}
        if res.returncode != 0:
            err = res.stderr.decode(errors="replace")
            if "No such file or directory" in err:
                return f"{scope}/{family}", out  # no ringfence table here (nothing applied)
            raise NftError(f"{scope}: cannot read the denied set: {err.strip()[:500]}")
        try:
            doc = json.loads(res.stdout)
        except ValueError as exc:
            raise NftError(f"{scope}: nft printed JSON that does not parse: {exc}") from exc
        for obj in doc.get("nftables", []):
            for e in obj.get("set", {}).get("elem", []) if isinstance(obj, dict) else []:
                elem = e.get("elem", {}) if isinstance(e, dict) else {}
                key = elem.get("val", {}).get("concat") if isinstance(elem.get("val"), dict) else None
                if isinstance(key, list) and len(key) == 5:
                    k: DeniedKey = (str(key[0]), str(key[1]), str(key[2]), int(key[3]), int(key[4]))
                    out[k] = int(elem.get("counter", {}).get("packets", 0))
        return f"{scope}/{family}", out

    with ThreadPoolExecutor(max_workers=min(8, max(1, len(jobs)))) as pool:
        return {where: found for where, found in pool.map(read, jobs) if found is not None}


# ------------------------------------------------------------------------------------------ planning


def _approved(m: Matrix, addrs: Mapping[str, str], src: str, dst: str, port: int, proto: str = "tcp") -> str | None:
    """The id of an approved flow that lets node ``src`` open ``dst:port``, or None."""
    def covers(sel_nodes: tuple[str, ...], cidrs: tuple[str, ...], node: str) -> bool:
        if node in sel_nodes:
            return True
        a = ipaddress.ip_address(addrs[node])
        return any(a in ipaddress.ip_network(c, strict=False) for c in cidrs)

    for f in m.flows:
        lo, hi = f.ports
        if (proto in f.protos and lo <= port <= hi and covers(f.source.nodes, f.source.cidrs, src)
                and covers(f.destination.nodes, f.destination.cidrs, dst)):
            return f.id
    return None


def _collective_target(policy: Policy, job: str, listening: Mapping[str, frozenset[int]]) -> tuple[str, int] | None:
    """The job's rendezvous: the lowest listening port in its collective range on the first member that has one.

    The rendezvous store (rank 0) listens below the kernel's ephemeral range where the collective's own
    pair listeners live, so the lowest port is the store — a server built for clients that come and go.
    """
    j = policy.job(job)
    if j is None:
        return None
    lo, hi = j.collective_range
    for member in j.members:
        ports = sorted(p for p in listening.get(member, frozenset()) if lo <= p <= hi)
        if ports:
            return member, ports[0]
    return None


def _service_port(svc: Service, listening: frozenset[int]) -> int:
    """The port to probe ``svc`` on: the lowest one of its range that listens (a range service, as srun's,
    binds a port of its range at random), else the first of its range."""
    lo, hi = svc.port_range
    return min((p for p in listening if lo <= p <= hi), default=lo)


def _allow_probes(policy: Policy, m: Matrix, f: ResolvedFlow, addrs: Mapping[str, str],
                  listening: Mapping[str, frozenset[int]], sources: Collection[str]) -> tuple[list[ProbeSpec], str]:
    if "tcp" not in f.protos:
        return [], f"flow {f.id}: only TCP is probed ({f.proto})"
    lo, hi = f.ports
    dest: tuple[str, int] | None = None
    if f.destination.kind == "job" and lo != hi:
        dest = _collective_target(policy, f.destination.name, listening)
    for node in f.destination.nodes:
        if dest is not None:
            break
        if lo == hi:
            dest = (node, lo)
            break
        svc = next((s for s in policy.services if s.node == node and lo <= s.port_range[0] <= hi), None)
        ports = sorted(p for p in listening.get(node, frozenset()) if lo <= p <= hi)
        if svc is not None or ports:
            dest = (node, _service_port(svc, listening.get(node, frozenset())) if svc is not None else ports[0])
    if dest is None:
        return [], f"flow {f.id}: no listening port of {f.destination.describe()} in {lo}-{hi} to probe"
    dnode, port = dest
    candidates = [n for n in m.node_addresses if n in sources and n != dnode
                  and _approved(m, addrs, n, dnode, port) == f.id]
    if not candidates:
        return [], f"flow {f.id}: no node of {f.source.describe()} can run a probe"
    # a job's ranks must all reach the rendezvous; any other flow is shown from one concrete source
    chosen = candidates if f.source.kind == "job" and f.destination.kind == "job" else candidates[:1]
    svc = next((s for s in policy.services if s.node == dnode and s.port_range[0] <= port <= s.port_range[1]), None)
    app = svc.application if svc is not None and svc.application in ("http", "https", "ssh") else ""
    why = f"approved {f.id}: {f.source.describe()} → {f.destination.describe()} ({f.traffic_class})"
    return [ProbeSpec(s, dnode, addrs[dnode], port, "allow", app, f.id, why) for s in chosen], ""


def plan_probes(policy: Policy, listening: Mapping[str, frozenset[int]],
                sources: Collection[str] | None = None) -> ProbePlan:
    """The probe matrix of ``policy`` (see the module docstring).

    ``listening`` maps node names to their listening TCP ports (it chooses the collective ports to
    probe); ``sources`` limits which nodes can run probes (default: every node).
    """
    m = resolve(policy)
    addrs = {n.name: n.addresses[0] for n in policy.nodes}
    src_ok = set(sources) if sources is not None else set(addrs)
    probes: list[ProbeSpec] = []
    skipped: list[str] = []
    for f in m.flows:
        got, why = _allow_probes(policy, m, f, addrs, listening, src_ok)
        probes += got
        if why:
            skipped.append(why)
    # the sensitive ports: every TCP service, and each job's rendezvous
    targets: list[tuple[str, int, str]] = []
    for s in policy.services:
        if s.proto == "tcp":
            label = f"{'admin ' if s.admin else ''}service {s.name} ({s.traffic_class.value})"
            targets.append((s.node, _service_port(s, listening.get(s.node, frozenset())), label))
    for j in policy.jobs:
        t = _collective_target(policy, j.name, listening)
        if t is None:
            skipped.append(f"job {j.name}: no member listens in its collective range {j.collective_ports}")
        else:
            targets.append((t[0], t[1], f"collective of job {j.name}"))
    seen: set[tuple[str, str, int]] = set()

    def deny(src: str, dnode: str, port: int, why: str) -> None:
        if (src, dnode, port) not in seen:
            seen.add((src, dnode, port))
            probes.append(ProbeSpec(src, dnode, addrs[dnode], port, "deny", why=why))

    for zs in policy.zones:
        members = [n for n in m.zone_nodes.get(zs.name, ()) if n in src_ok]
        for dnode, port, label in targets:
            zd = m.node_zone[dnode]
            src = next((n for n in members if n != dnode and _approved(m, addrs, n, dnode, port) is None), None)
            if src is not None:
                deny(src, dnode, port, f"zone {zs.name} → {zd}: {label}")
            elif [n for n in members if n != dnode]:
                skipped.append(f"zone {zs.name} → {zd}: {label} is approved for every node of {zs.name}")
    target_zones = {m.node_zone[d] for d, _, _ in targets}
    skipped += [f"zone {z.name}: no sensitive port listens there, so no denied path into it is probed"
                for z in policy.zones if z.name not in target_zones]
    for a in policy.jobs:  # each job's ranks against every other job's collective
        for b in policy.jobs:
            t = _collective_target(policy, b.name, listening) if a.name != b.name else None
            src = next((n for n in a.members if n in src_ok), None)
            if t is not None and src is not None and _approved(m, addrs, src, t[0], t[1]) is None:
                deny(src, t[0], t[1], f"job {a.name} → collective of job {b.name}")
    return ProbePlan(tuple(probes), tuple(skipped))


# ------------------------------------------------------------------------------------------ running


def _run_batches(plan: Sequence[ProbeSpec], executors: Mapping[str, Executor], timeout: float,
                 progress: Progress, *, retry: bool = True) -> dict[int, RawProbe]:
    by_source: dict[str, list[int]] = {}
    for i, p in enumerate(plan):
        by_source.setdefault(p.source, []).append(i)

    def batch(src: str) -> list[tuple[int, RawProbe]]:
        idx = by_source[src]
        ex = executors.get(src)
        if ex is None:
            return [(i, RawProbe("error", 0, None, f"no executor reaches {src}")) for i in idx]
        # A deny probe bypasses node-local proxies (a TLS sidecar's redirect would accept it on loopback and
        # look like an open path); an allow probe takes the path real clients take, proxies included.
        try:
            raws = tcp_probes(ex, [ProbeTarget(plan[i].host, plan[i].port, plan[i].app,
                                               LOCAL_PROXY_BYPASS if plan[i].expected == "deny" else 0) for i in idx],
                              timeout=timeout)
        except TargetError as exc:
            # The source host cannot be reached (an SSH host down): its probes did not run. Each one is kept,
            # named, as "unreachable" — a fact that proves neither side — never dropped from the run.
            progress(f"{src} unreachable: {exc.message}")
            return [(i, RawProbe("unreachable", 0, None, f"{src} unreachable: {exc.message}")) for i in idx]
        progress(f"probed {len(idx)} path(s) from {src}")
        return list(zip(idx, raws, strict=True))

    out: dict[int, RawProbe] = {}
    with ThreadPoolExecutor(max_workers=min(8, max(1, len(by_source)))) as pool:
        for pairs in pool.map(batch, list(by_source)):
            out.update(pairs)
    # An allow probe that ran out of time on a busy host (its connect, or the answer through a TLS sidecar)
    # has not shown the path closed: it is tried once more with a longer timeout, and passes only if that
    # try connects and answers. Deny probes are never retried: a deny that connected is a fact as it stands.
    again = [i for i in sorted(out) if retry and plan[i].expected == "allow" and out[i].timed_out()]
    if again:
        longer = timeout * RETRY_FACTOR
        progress(f"{len(again)} permitted path(s) ran out of time; trying them again with a {longer:g}s timeout")
        second = _run_batches([plan[i] for i in again], executors, longer, progress, retry=False)
        for j, i in enumerate(again):
            out[i] = dataclasses.replace(second[j], tries=2)
    return out


def _judge(spec: ProbeSpec, raw: RawProbe, saddr: str, listening: frozenset[int] | None,
           before: Mapping[str, Mapping[DeniedKey, int]], after: Mapping[str, Mapping[DeniedKey, int]],
           stand_in: StandIn | None = None) -> ProbeResult:
    dest = f"{spec.destination}:{spec.port}"
    if spec.expected == "allow":
        outcome, detail = raw.outcome, raw.detail
        if outcome == "connected" and spec.app and raw.app_ok is not True:
            outcome, detail = "error", f"connected, but the {spec.app} exchange failed: {raw.detail}"
        elif outcome == "connected" and spec.app:
            detail = f"{spec.app} answered {raw.detail}"
        if raw.tries > 1:
            detail = f"{detail}; on the second try (the first ran out of time)"
        if stand_in is not None:
            detail = f"{detail}; to a {stand_in.describe()}" if detail else f"to a {stand_in.describe()}"
        return ProbeResult(spec.source, dest, spec.proto, spec.port, "allow", outcome, None, detail, (), spec.rule)
    key: DeniedKey = (saddr, spec.host, spec.proto, raw.sport, spec.port)
    moved = {where: after[where][key] - before.get(where, {}).get(key, 0)
             for where in after if after[where].get(key, 0) > before.get(where, {}).get(key, 0)}
    rule = ", ".join(f"denied@{w} +{n}" for w, n in sorted(moved.items())) or None
    proven = False
    if raw.outcome == "refused":
        detail = "refused: the port answered with a reset, so no policy dropped it; a closed port proves nothing"
    elif raw.outcome not in ("timeout", "reset"):
        detail = f"{raw.outcome}: {raw.detail}" if raw.detail else raw.outcome
    elif listening is None:
        detail = f"{raw.outcome}, but whether {dest} listens is unknown, so the timeout proves nothing"
    elif spec.port not in listening:
        detail = f"{raw.outcome}, but nothing listens on {dest}: a silent port proves nothing"
    elif not moved:
        detail = f"{raw.outcome}, but no drop counter moved for source port {raw.sport}"
    else:
        proven = True
        detail = f"{raw.outcome}; {dest} listens; dropped by policy ({rule})"
    if stand_in is not None:
        detail = f"{detail}; to a {stand_in.describe()}"
    return ProbeResult(spec.source, dest, spec.proto, spec.port, "deny", raw.outcome, proven,
                       f"{detail} [{spec.why}]" if spec.why else detail, (), rule)


def gather_listening(executors: Mapping[str, Executor], nodes: Collection[str]) -> dict[str, frozenset[int] | None]:
    """Listening TCP ports of each of ``nodes`` that an executor reaches (None where unreadable or unreachable)."""
    names = [n for n in nodes if n in executors and n != FABRIC]
    with ThreadPoolExecutor(max_workers=min(8, max(1, len(names)))) as pool:
        found = dict(zip(names, pool.map(lambda n: listening_ports(executors[n]), names), strict=True))
    return {n: found.get(n) for n in nodes}


def run_probes(policy: Policy, plan: ProbePlan, points: Mapping[str, Executor], store: EvidenceStore, *,
               target: str, listening: Mapping[str, frozenset[int] | None] | None = None,
               timeout: float = DEFAULT_TIMEOUT, progress: Progress | None = None,
               plan_record: Mapping[str, Any] | None = None, stand_ins: Sequence[StandIn] = (),
               stand_in_failures: Sequence[str] = ()) -> ProbeRun:
    """Run ``plan`` through ``points`` (node name → executor, plus ``fabric``), prove the denials, record it all.

    ``listening`` (node → ports) is read again from every destination when not given. One observation
    record (source ``enforce.probe``) holds every result and the counters that moved; each result's
    ``evidence`` names it. ``plan_record`` (how the probes were chosen: for a class plan, every class and
    its sample size) is kept in it under ``plan``. ``stand_ins`` (listening while the probes run, see
    :mod:`ringfence.enforce.standin`) are named in the detail of every probe to them and in the record;
    a probe to one carries no application greeting (a stand-in only accepts).
    """
    say = progress or (lambda _msg: None)
    started = time.monotonic()
    standing = {(s.node, s.port): s for s in stand_ins}
    if standing:
        plan = ProbePlan(tuple(dataclasses.replace(p, app="") if (p.destination, p.port) in standing else p
                               for p in plan.probes), plan.skipped)
    addrs = {n.name: n.addresses[0] for n in policy.nodes}
    dests = sorted({p.destination for p in plan.probes})
    listen = dict(listening) if listening is not None else gather_listening(points, dests)
    for d in dests:
        listen.setdefault(d, None)
    say(f"reading drop counters on {len(points)} enforcement point(s)")
    before = denied_counters(points)
    say(f"running {len(plan.probes)} probe(s) from {len({p.source for p in plan.probes})} source(s)")
    raws = _run_batches(plan.probes, points, timeout, say)
    after = denied_counters(points)
    results = [_judge(p, raws[i], addrs.get(p.source, ""), listen.get(p.destination), before, after,
                      standing.get((p.destination, p.port)))
               for i, p in enumerate(plan.probes)]
    seconds = time.monotonic() - started
    listed = {n: tuple(sorted(v)) if v is not None else None for n, v in listen.items()}
    data: dict[str, Any] = {
        "target": target, "cluster": policy.cluster, "timeout": timeout, "seconds": round(seconds, 3),
        "probes": [dict(dataclasses.asdict(r), why=p.why, sport=raws[i].sport, tries=raws[i].tries)
                   for i, (r, p) in enumerate(zip(results, plan.probes, strict=True))],
        "skipped": [*plan.skipped, *stand_in_failures],
        "stand_ins": [dataclasses.asdict(x) | {"detail": x.describe()} for x in stand_ins],
        "listening": {n: list(v) if v is not None else None for n, v in listed.items()},
        "failures": sum(1 for r in results if behaviour_failed(r)),
        "plan": dict(plan_record) if plan_record is not None else {"mode": "pairs"},
    }
    ev = str(store.append(RecordKind.OBSERVATION, SOURCE, f"target {target}", data))
    final = tuple(dataclasses.replace(r, evidence=(ev,)) for r in results)
    return ProbeRun(target, final, plan, ev, seconds, {n: v or () for n, v in listed.items()})


def probe_policy(policy: Policy, points: Mapping[str, Executor], store: EvidenceStore, *, target: str,
                 timeout: float = DEFAULT_TIMEOUT, progress: Progress | None = None,
                 extra: Sequence[ProbeSpec] = (), mode: str = "pairs", sample: int | None = None) -> ProbeRun:
    """Read what listens, plan the matrix of ``policy`` (plus ``extra`` probes), run and prove it.

    ``mode`` (:class:`~ringfence.enforce.probe_classes.PlanMode`): ``pairs`` plans all pairs (:func:`plan_probes`),
    ``classes`` one sampled class per (source zone or job, destination class, verdict) with ``sample`` probes
    each, ``auto`` picks by the size of the inventory. The plan and each class's sample size are printed
    through ``progress`` and recorded with the results.
    """
    # Imported here: probe_classes builds on this module's ProbeSpec and ProbePlan.
    from ringfence.enforce.probe_classes import (
        DEFAULT_SAMPLE,
        PlanMode,
        class_probe_plan,
        class_record,
        describe,
        resolve_mode,
    )

    say = progress or (lambda _msg: None)
    chosen = resolve_mode(PlanMode(mode), policy)
    nodes = [n.name for n in policy.nodes]
    say(f"reading listening ports on {len(nodes)} node(s)")
    listening = gather_listening(points, nodes)
    # a range service that listens only while it works (srun's SrunPortRange) gets a stand-in while the
    # probes run, so both sides of its path are shown rather than left to a closed or silent port
    stand = place(policy, {n: ex for n, ex in points.items() if n in listening}, listening, progress=say)
    try:
        seen = {n: v for n, v in listening.items() if v is not None}
        record: dict[str, Any] | None = None
        if chosen is PlanMode.CLASSES:
            plan, fleet = class_probe_plan(policy, seen, sample=sample or DEFAULT_SAMPLE,
                                           reachable={n for n in nodes if n in points})
            record = class_record(fleet)
            for line in describe(fleet):
                say(line)
        else:
            plan = plan_probes(policy, seen, sources=[n for n in nodes if n in points])
            say(f"plan: all pairs, {len(plan.probes)} probe(s)")
        if extra:
            plan = ProbePlan(plan.probes + tuple(extra), plan.skipped)
        return run_probes(policy, plan, points, store, target=target, listening=listening, timeout=timeout,
                          progress=progress, plan_record=record, stand_ins=stand.placed,
                          stand_in_failures=stand.failed)
    finally:
        stand.stop()


__all__ = [
    "DEFAULT_TIMEOUT",
    "SOURCE",
    "DeniedKey",
    "ProbePlan",
    "ProbeRun",
    "ProbeSpec",
    "behaviour_failed",
    "denied_counters",
    "gather_listening",
    "plan_probes",
    "probe_policy",
    "run_probes",
]
