"""Incident containment: snapshot the evidence, isolate a node, job or identity at two independent points,
prove the isolation with probes, and release it again — every step recorded in the evidence store.

*Two points.* The subject's addresses go into the ``contained`` set of the fabric (routed ``inet`` and
bridged tables) **and** of each subject node's own ruleset. Both drop everything to or from them except
the evidence ``collectors``, before connection tracking, so live connections are cut too. The fabric
does not depend on the suspect's cooperation: a node that deletes its own ruleset is still isolated.

*Before isolating*, a snapshot: a short capture (where the target can capture), the flow table read
from it (rows touching the subject), and every point's live rule state — each kept as an artifact
(content-addressed, sha256) and tied together in one observation record.

*Proof.* Outbound probes from each contained node to every other sensitive port (denied at the node
itself) and inbound probes from an approved peer (denied at the fabric, before the node sees them) —
each proven by its own ``denied`` element; the collector must stay reachable; the other jobs' ranks
must keep stepping (``steps`` counters read from the target, never from the suspect's traffic).
"""

from __future__ import annotations

import io
import ipaddress
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ringfence.controls.interface import ProbeResult, Verdict
from ringfence.enforce.apply import FABRIC, each_point, live_rulesets
from ringfence.enforce.facts import CONTAIN_SOURCE, CONTAINMENT_FORMAT, probe_to_json
from ringfence.enforce.interface import EnforceError
from ringfence.enforce.nftables import TABLE
from ringfence.enforce.nftrun import NftError, load
from ringfence.enforce.probe_matrix import (
    DEFAULT_TIMEOUT,
    ProbePlan,
    ProbeRun,
    ProbeSpec,
    gather_listening,
    plan_probes,
    run_probes,
)
from ringfence.errors import RingfenceError
from ringfence.evidence import EvidenceStore, RecordKind
from ringfence.policy import Policy
from ringfence.policy.matrix import Matrix, resolve
from ringfence.targets.interface import Executor, TargetError

if TYPE_CHECKING:
    from ringfence.enforce.revoke import Revocation

#: Takes ``seconds`` of capture into the given path and returns the path (the lab's ``capture``).
CaptureFn = Callable[[float, Path], Path]
#: Node → all-reduce steps so far (the lab's agent counters).
StepsFn = Callable[[], Mapping[str, int]]
Progress = Callable[[str], None]


class ContainError(EnforceError):
    """Containment cannot proceed: an unknown subject, no ruleset applied, a point that refused the change."""


@dataclass(frozen=True)
class Subject:
    """What is contained: a node, a job (its ranks) or an identity (the nodes that carry it)."""

    kind: str  # "node" | "job" | "identity"
    name: str
    nodes: tuple[str, ...]
    addresses: tuple[str, ...]

    def describe(self) -> str:
        """``job train-b``."""
        return f"{self.kind} {self.name}"

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"kind": self.kind, "name": self.name, "nodes": list(self.nodes), "addresses": list(self.addresses)}


def resolve_subject(policy: Policy, *, node: str | None = None, job: str | None = None,
                    identity: str | None = None) -> Subject:
    """The subject named by exactly one of ``node``, ``job``, ``identity``; :class:`ContainError` otherwise."""
    given = [(k, v) for k, v in (("node", node), ("job", job), ("identity", identity)) if v]
    if len(given) != 1:
        raise ContainError("name exactly one subject to contain", hint="--node N, --job J or --identity I")
    kind, name = given[0][0], str(given[0][1])
    nodes: tuple[str, ...]
    if kind == "node":
        nodes = (name,) if policy.node(name) else ()
    elif kind == "job":
        j = policy.job(name)
        nodes = tuple(j.members) if j else ()
    else:
        nodes = tuple(dict.fromkeys([n.name for n in policy.nodes if n.identity == name] +
                                    [m for j in policy.jobs if j.identity == name for m in j.members]))
    if not nodes:
        idents = {n.identity for n in policy.nodes if n.identity} | {j.identity for j in policy.jobs}
        known = {"node": [n.name for n in policy.nodes], "job": [j.name for j in policy.jobs],
                 "identity": sorted(idents)}
        raise ContainError(f"no {kind} {name!r} in policy {policy.cluster}", hint=f"known: {', '.join(known[kind])}")
    by_name = {n.name: n for n in policy.nodes}
    addrs = tuple(a for n in nodes if n in by_name for a in by_name[n].addresses)
    return Subject(kind, name, nodes, addrs)


# ------------------------------------------------------------------------------------------ snapshot


@dataclass(frozen=True)
class Snapshot:
    """The evidence taken before isolating: the observation record and its artifacts (name → evidence id)."""

    evidence: str
    artifacts: Mapping[str, str]
    flows: int
    captured: bool

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"evidence": self.evidence, "artifacts": dict(self.artifacts), "flows": self.flows,
                "captured": self.captured}


def _flow_table(pcap: Path, addresses: Sequence[str]) -> tuple[bytes, int]:
    """The flows of ``pcap`` touching ``addresses``, as Parquet bytes, and how many there are."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from ringfence.observe.flows.pcap import PcapReader

    flows = PcapReader().read(pcap).flows
    wanted = _strings(addresses)
    mine = pc.or_(pc.is_in(flows.column("src"), wanted), pc.is_in(flows.column("dst"), wanted))
    table = flows.filter(mine)
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue(), table.num_rows


def _strings(values: Sequence[str]) -> Any:
    import pyarrow as pa

    return pa.array(list(values), pa.string())


def snapshot(subject: Subject, points: Mapping[str, Executor], store: EvidenceStore, *, target: str,
             workdir: Path, capture: CaptureFn | None = None, seconds: float = 3.0) -> Snapshot:
    """Capture, flow table and rule state, hashed into ``store`` before anything is changed."""
    arts: dict[str, str] = {}
    inputs: dict[str, str] = {}
    flows = 0
    captured = False
    tag = f"{subject.kind}-{subject.name}".replace("/", "_").replace(":", "_")
    if capture is not None:
        pcap = capture(seconds, workdir / f"contain-{tag}.pcap")
        captured = True
        arts["capture"] = str(store.add_artifact(pcap, f"contain-{tag}.pcap", source=CONTAIN_SOURCE))
        table, flows = _flow_table(pcap, subject.addresses)
        arts["flows"] = str(store.add_artifact(table, f"contain-{tag}-flows.parquet", source=CONTAIN_SOURCE,
                                               data={"rows": flows}))
    rules = json.dumps(live_rulesets(points), sort_keys=True, separators=(",", ":")).encode()
    arts["rules"] = str(store.add_artifact(rules, f"contain-{tag}-rules.json", source=CONTAIN_SOURCE))
    for name, ev in arts.items():
        inputs[name] = store.get(ev).data["blob"]
    data = {"step": "snapshot", "target": target, "subject": subject.to_json(), "artifacts": arts,
            "flows": flows, "captured": captured, "capture_seconds": seconds if captured else 0}
    rec = str(store.append(RecordKind.OBSERVATION, CONTAIN_SOURCE, subject.describe(), data, inputs))
    return Snapshot(rec, arts, flows, captured)


# ------------------------------------------------------------------------------------------ isolate / release


def _live_set(ex: Executor, family: str, name: str) -> tuple[str, ...] | None:
    res = ex.run(["nft", "-j", "list", "set", family, TABLE, name], timeout=30)
    if res.returncode != 0:
        return None
    for obj in json.loads(res.stdout).get("nftables", []):
        if "set" in obj:
            return tuple(str(e) for e in obj["set"].get("elem", []) if isinstance(e, str))
    return ()


def _families(scope: str) -> tuple[str, ...]:
    return ("inet", "bridge") if scope == FABRIC else ("inet",)


def _elements(op: str, family: str, name: str, elems: Sequence[str]) -> dict[str, Any]:
    return {op: {"element": {"family": family, "table": TABLE, "name": name, "elem": list(elems)}}}


def control_addresses(points: Mapping[str, Executor], nodes: Sequence[str]) -> list[str]:
    """The address each of ``nodes`` sees this control host's SSH sessions come from (``$SSH_CONNECTION``'s
    first field): it must stay reachable while the node is contained, or the containment is cut off half-way."""
    out: list[str] = []
    for node in nodes:
        if node not in points:
            continue
        res = points[node].run(["sh", "-c", 'printf %s "$SSH_CONNECTION"'], timeout=30)
        fields = res.stdout.decode(errors="replace").split()
        if res.returncode != 0 or not fields:
            raise ContainError(f"{node}: cannot tell which address this control host reaches it from")
        out.append(str(ipaddress.ip_address(fields[0])))
    return list(dict.fromkeys(out))


def containment_points(subject: Subject, points: Mapping[str, Executor]) -> list[str]:
    """Where the subject is isolated: the fabric and each subject node that has a ruleset of its own."""
    if FABRIC not in points or _live_set(points[FABRIC], "inet", "contained") is None:
        raise ContainError("the fabric has no ringfence ruleset: containment needs an applied policy",
                           hint="ringfence apply POLICY --target lab")
    own = [n for n in subject.nodes if n in points and _live_set(points[n], "inet", "contained") is not None]
    return [FABRIC, *own]


def isolate(subject: Subject, points: Mapping[str, Executor], store: EvidenceStore, *, target: str,
            collectors: Sequence[str], snapshot_evidence: str | None = None, approved_by: str | None = None,
            ticket: str | None = None) -> str:
    """Add the subject to ``contained`` (and ``collectors`` to ``collectors``) at every containment point.

    Each point is one nft transaction; the fabric goes first, so the isolation never rests on the suspect
    alone. Returns the action record's id.
    """
    scopes = containment_points(subject, points)
    done = []
    try:
        for scope in scopes:
            cmds = []
            for fam in _families(scope):
                if collectors:
                    cmds.append(_elements("add", fam, "collectors", collectors))
                cmds.append(_elements("add", fam, "contained", subject.addresses))
            load(points[scope], {"nftables": cmds})
            done.append(scope)
    except NftError as exc:
        raise ContainError(f"containment of {subject.describe()} failed at {scope} (applied at: "
                           f"{', '.join(done) or 'nowhere'}): {exc.message}") from exc
    data = {"action": "contain", "target": target, "subject": subject.describe(), "detail": subject.to_json(),
            "collectors": list(collectors), "scopes": scopes, "snapshot": snapshot_evidence,
            "approved_by": approved_by, "ticket": ticket}
    return str(store.append(RecordKind.ACTION, CONTAIN_SOURCE, f"target {target}", data))


def release(subject: Subject, points: Mapping[str, Executor], store: EvidenceStore, *, target: str) -> str:
    """Remove the subject from every ``contained`` set where it is (and the collectors once nothing is
    contained there any more); record it. Returns the action record's id."""
    changed: set[str] = set()

    def one(scope: str) -> None:
        ex, cmds = points[scope], []
        for fam in _families(scope):
            live = _live_set(ex, fam, "contained")
            if live is None:
                continue
            present = [a for a in subject.addresses if a in live]
            if present:
                cmds.append(_elements("delete", fam, "contained", present))
            if not set(live) - set(subject.addresses):
                collectors = _live_set(ex, fam, "collectors") or ()
                if collectors:
                    cmds.append(_elements("delete", fam, "collectors", collectors))
        if cmds:
            load(ex, {"nftables": cmds})
            changed.add(scope)

    # every point at once (each is its own transaction, and over SSH each costs round trips): a release is
    # tried everywhere, and one point failing (or unreachable) is named after the rest were released
    failed = [(scope, f"unreachable: {exc.message}" if isinstance(exc, TargetError) else exc.message)
              for scope, exc in each_point(list(points), one) if isinstance(exc, RingfenceError)]
    if failed:
        scope, why = failed[0]
        raise ContainError(f"release of {subject.describe()} failed at {scope}: {why}"
                           + (f" (and at {', '.join(s for s, _ in failed[1:])})" if failed[1:] else ""))
    data = {"action": "release", "target": target, "subject": subject.describe(), "detail": subject.to_json(),
            "scopes": [scope for scope in points if scope in changed]}
    return str(store.append(RecordKind.ACTION, CONTAIN_SOURCE, f"target {target}", data))


# ------------------------------------------------------------------------------------------ verify


#: the port an inbound denial is probed on when the contained node listens nowhere (an SSH login attempt: the
#: first thing an intruder tries); the drop counter, not a listener, proves where it was dropped
INBOUND_PORT = 22
#: why a node reached by no approved peer cannot show the fabric's own inbound drop
NO_APPROVED_PEER = ("no approved path into it from a node outside the collectors could be probed, so an inbound "
                    "probe is dropped by the prober's own egress rules first: the fabric's inbound drop is not shown")


def containment_plan(policy: Policy, subject: Subject, collectors: Sequence[str],
                     listening: Mapping[str, frozenset[int]], sources: Sequence[str],
                     keep: Sequence[str] = ()) -> ProbePlan:
    """Probes that show the subject reaches only the collectors: an allow to each collector, a deny to every
    other listening sensitive port (outbound, from each subject node), and a deny into each subject node
    from a peer outside the subject (inbound). ``keep``: addresses left reachable that are not collectors
    (the control host driving the containment over SSH) — neither probed as allowed nor as denied."""
    addrs = {n.name: n.addresses[0] for n in policy.nodes}
    base = plan_probes(policy, listening, sources)
    m = resolve(policy)
    probes: list[ProbeSpec] = []
    skipped: list[str] = list(base.skipped)
    sensitive = sorted({(p.destination, p.port) for p in base.probes})
    # a port nothing listens on (its node down, its service stopped) cannot show a denial: not probed, said
    silent = [(d, port) for d, port in sensitive if port not in listening.get(d, frozenset())]
    skipped += [f"{d}:{port}: nothing listens there, so a denial of it would prove nothing" for d, port in silent]
    sensitive = [x for x in sensitive if x not in silent]
    collector_nodes = [n for n, a in addrs.items() if a in collectors]
    kept = [n for n, a in addrs.items() if a in keep and n not in collector_nodes]
    skipped += [f"{n}: kept reachable (it drives the containment), so neither side is probed to it" for n in kept]
    for node in subject.nodes:
        if node not in sources:
            skipped.append(f"{node}: no executor reaches it, so its outbound isolation is not probed")
            continue
        for c in collector_nodes:
            approved = [p for p in base.probes if p.expected == "allow" and p.destination == c
                        and p.rule in {f.id for f in m.flows_from(node)}]
            port = approved[0].port if approved else next(iter(sorted(listening.get(c, frozenset()))), 0)
            app = approved[0].app if approved else ""
            if port:
                probes.append(ProbeSpec(node, c, addrs[c], port, "allow", app, approved[0].rule if approved else None,
                                        f"contained {node} keeps reaching evidence collector {c}"))
        probes += [ProbeSpec(node, d, addrs[d], port, "deny", why=f"contained {node} → {d}:{port}")
                   for d, port in sensitive if d not in subject.nodes and d not in collector_nodes and d not in kept]
    for node in subject.nodes:
        ports = sorted(listening.get(node, frozenset()))
        # a collector may still reach the contained node (it gathers the evidence): a denial is shown
        # from an approved peer that is not one
        peers = [p for p in base.probes if p.destination == node and p.source not in subject.nodes
                 and p.source not in collector_nodes and p.source not in kept and p.expected == "allow"]
        if peers:
            probes.append(ProbeSpec(peers[0].source, node, addrs[node], peers[0].port, "deny",
                                    why=f"approved peer {peers[0].source} → contained {node}"))
            continue
        # the sampled matrix may probe none of the approved paths into this node (a job's collective is
        # probed at its rendezvous only): any approved flow into a port it listens on, from a prober outside
        found = _approved_peer(m, addrs, node, ports, [s for s in sources if s not in subject.nodes
                                                      and s not in collector_nodes and s not in kept])
        if found is not None:
            peer, port, rule = found
            probes.append(ProbeSpec(peer, node, addrs[node], port, "deny",
                                    why=f"approved peer {peer} → contained {node}:{port} ({rule})"))
            continue
        # no approved peer: the inbound denial is still shown (from any other node), on a port it listens on,
        # else on INBOUND_PORT (the drop counter, not a listener, proves it) — but the prober's own egress
        # rules drop it first, so it proves the path closed, not the fabric's part: said, never counted as it
        skipped.append(f"{node}: {NO_APPROVED_PEER}")
        src = next((s for s in sources if s not in subject.nodes and s not in collector_nodes and s not in kept), None)
        if src is None:
            continue
        port = ports[0] if ports else INBOUND_PORT
        probes.append(ProbeSpec(src, node, addrs[node], port, "deny", why=f"{src} → contained {node}:{port} "
                                f"(no approved peer{'' if ports else '; it listens nowhere'})"))
    return ProbePlan(tuple(probes), tuple(skipped))


def _approved_peer(m: Matrix, addrs: Mapping[str, str], node: str, ports: Sequence[int],
                   peers: Sequence[str]) -> tuple[str, int, str] | None:
    """(peer, port, flow id) of an approved TCP flow from one of ``peers`` into ``node`` on a port it listens on."""
    for f in m.flows_to(node):
        if "tcp" not in f.protos:
            continue
        lo, hi = f.ports
        port = next((p for p in ports if lo <= p <= hi), None)
        peer = next((s for s in peers if s in f.source.nodes and s != node), None)
        if port is not None and peer is not None and addrs.get(peer):
            return peer, port, f.id
    return None


@dataclass(frozen=True)
class ContainmentReport:
    """A containment (or drill): what was contained, the snapshot, the proof, the training check, the release."""

    target: str
    subject: Subject
    snapshot: Snapshot | None
    contained_evidence: str | None
    probes: tuple[ProbeResult, ...]
    probe_evidence: str | None
    points: Mapping[str, bool]
    training: Mapping[str, Any]
    released_evidence: str | None = None
    release_probes: tuple[ProbeResult, ...] = ()
    started: str = field(default_factory=lambda: datetime.now(UTC).isoformat())
    seconds: float | None = None  # from isolating to the end of the proof
    notes: tuple[str, ...] = ()  # what the proof could not show, and why (the plan's skipped probes)
    # an identity's containment is its certificate's revocation (ringfence.enforce.revoke), not isolation
    revocation: Revocation | None = None

    @property
    def isolated(self) -> bool | None:
        """Every deny probe proven by policy (None when none ran)."""
        denies = [p for p in self.probes if p.expected == "deny"]
        return all(p.by_policy is True for p in denies) if denies else None

    @property
    def collector_reachable(self) -> bool | None:
        """Every allow probe (to the collectors) connected (None when none ran)."""
        allows = [p for p in self.probes if p.expected == "allow"]
        return all(p.outcome == "connected" for p in allows) if allows else None

    @property
    def ok(self) -> bool:
        """Contained, isolation proven at both points, collector reachable, others training, release (if any) works."""
        if self.revocation is not None:  # revoked, refused everywhere, reissued; nobody else stopped training
            return self.revocation.verdict is Verdict.PASS and self.training.get("others_training") is not False
        released_ok = self.released_evidence is None or all(p.outcome == "connected" for p in self.release_probes)
        return bool(self.isolated and self.collector_reachable is not False and all(self.points.values())
                    and self.training.get("others_training") is not False and released_ok)

    def to_json(self) -> dict[str, Any]:
        """The containment facts document (``Facts.containment``; see docs/enforcement.md); an identity's
        revocation adds ``revocation`` (:meth:`ringfence.enforce.revoke.Revocation.to_json`)."""
        ev = [e for e in (self.snapshot.evidence if self.snapshot else None, self.contained_evidence,
                          self.probe_evidence, self.released_evidence) if e]
        extra = {"revocation": self.revocation.to_json()} if self.revocation is not None else {}
        if self.revocation is not None:  # each gate's refusal and acceptance is its own record
            ev += [c.evidence for c in (*self.revocation.refusals, *self.revocation.accepted) if c.evidence]
        return {
            "format": CONTAINMENT_FORMAT, "target": self.target, "started": self.started,
            "subject": self.subject.to_json(), "contained": self.contained_evidence is not None,
            "isolated": self.isolated, "collector_reachable": self.collector_reachable, "points": dict(self.points),
            "others_training": self.training.get("others_training"), "training": dict(self.training),
            "released": self.released_evidence is not None,
            "release_verified": (all(p.outcome == "connected" for p in self.release_probes)
                                 if self.release_probes else None),
            "snapshot": self.snapshot.to_json() if self.snapshot else {},
            "probes": [probe_to_json(p) for p in self.probes],
            "release_probes": [probe_to_json(p) for p in self.release_probes],
            "evidence": ev, "ok": self.ok, "seconds": self.seconds, "notes": list(self.notes), **extra,
        }


def proven_points(subject: Subject, probes: Sequence[ProbeResult]) -> dict[str, bool]:
    """Which containment points a proven denial was seen at: ``node`` (a subject node's own ruleset), ``fabric``."""
    where = [w.split("@", 1)[1].split("/", 1)[0] for p in probes if p.expected == "deny" and p.by_policy and p.rule
             for w in p.rule.split(", ")]
    return {"node": any(w in subject.nodes for w in where), "fabric": FABRIC in where}


def training_progress(steps: StepsFn, watch: Sequence[str], stopped: Sequence[str], before: Mapping[str, int], *,
                      wait: float = 20.0, min_steps: int = 2) -> dict[str, Any]:
    """Whether every rank in ``watch`` advanced by ``min_steps`` since ``before`` (polling up to ``wait`` s),
    and how far the ranks in ``stopped`` (the contained job's) got meanwhile."""
    deadline = time.monotonic() + wait
    now = dict(steps())
    while time.monotonic() < deadline and not all(now.get(n, 0) - before.get(n, 0) >= min_steps for n in watch):
        time.sleep(0.5)
        now = dict(steps())
    # A rank whose counter could not be read (its host unreachable) is unobserved, never "stopped":
    # the others' training is then unknown, not failed and not passed.
    delta = {n: now[n] - before[n] for n in (*watch, *stopped) if n in now and n in before}
    unseen = [n for n in watch if n not in delta]
    others = None if unseen or not watch else all(delta[n] >= min_steps for n in watch)
    return {"others_training": others, "steps": delta, "watched": list(watch), "contained_ranks": list(stopped),
            "unobserved": unseen}


def verify(policy: Policy, subject: Subject, points: Mapping[str, Executor], store: EvidenceStore, *, target: str,
           collectors: Sequence[str], timeout: float = DEFAULT_TIMEOUT, progress: Progress | None = None,
           keep: Sequence[str] = ()) -> ProbeRun:
    """Run :func:`containment_plan` and prove it (see :func:`ringfence.enforce.probe_matrix.run_probes`)."""
    nodes = [n.name for n in policy.nodes]
    listening = gather_listening(points, nodes)
    known = {n: v for n, v in listening.items() if v is not None}
    plan = containment_plan(policy, subject, collectors, known, [n for n in nodes if n in points], keep)
    return run_probes(policy, plan, points, store, target=target, listening=listening, timeout=timeout,
                      progress=progress)


def verify_release(policy: Policy, subject: Subject, points: Mapping[str, Executor], store: EvidenceStore, *,
                   target: str, timeout: float = DEFAULT_TIMEOUT) -> ProbeRun:
    """After release: the subject's approved service paths (those with an application greeting) connect again."""
    nodes = [n.name for n in policy.nodes]
    listening = gather_listening(points, nodes)
    # planned from the subject's own nodes only: a matrix sampled over every node may probe another member
    # of the subject's job, never the released node itself
    base = plan_probes(policy, {n: v for n, v in listening.items() if v is not None},
                       [n for n in subject.nodes if n in points])
    again = tuple(p for p in base.probes if p.expected == "allow" and p.source in subject.nodes and p.app)
    return run_probes(policy, ProbePlan(again), points, store, target=target, listening=listening, timeout=timeout)


def fabric_probes(policy: Policy, own: Sequence[str], listening: Mapping[str, frozenset[int]],
                  collectors: Sequence[str], keep: Sequence[str] = ()) -> list[ProbeSpec]:
    """The paths the fabric alone must drop once ``own``'s node-level containment is lifted: at most two
    approved paths from each of ``own`` to a listening port outside it, the collectors and ``keep``."""
    # the subject's own nodes as the only sources: a flow approved for a whole job is otherwise shown from its
    # first member, which need not be the contained one (a job's last rank would have nothing to lift)
    base = plan_probes(policy, listening, own)
    per_source: dict[str, int] = {}
    specs = []
    for p in base.probes:
        if (p.expected == "allow" and p.source in own and p.host not in collectors and p.host not in keep
                and p.destination not in own and p.port in listening.get(p.destination, frozenset())
                and per_source.get(p.source, 0) < 2):
            per_source[p.source] = per_source.get(p.source, 0) + 1
            specs.append(ProbeSpec(p.source, p.destination, p.host, p.port, "deny",
                                   why=f"{p.source}'s own containment lifted: the fabric alone must drop {p.rule}"))
    return specs


def fabric_check(policy: Policy, subject: Subject, points: Mapping[str, Executor], store: EvidenceStore, *,
                 target: str, collectors: Sequence[str], timeout: float = DEFAULT_TIMEOUT,
                 keep: Sequence[str] = ()) -> ProbeRun | None:
    """Prove the fabric isolates on its own: lift the containment in the subject nodes' own rulesets (what a
    suspect that tampers with its rules would do), probe paths the policy otherwise approves from them — each
    must be dropped, and seen dropped at the fabric — then put the node-level containment back (always)."""
    own = [n for n in subject.nodes if n in points and set(subject.addresses) & set(_live_set(points[n], "inet",
                                                                                              "contained") or ())]
    if not own:
        return None
    nodes = [n.name for n in policy.nodes]
    listening = gather_listening(points, nodes)
    specs = fabric_probes(policy, own, {n: v for n, v in listening.items() if v is not None}, collectors, keep)
    if not specs:
        return None
    try:
        for n in own:
            load(points[n], {"nftables": [_elements("delete", "inet", "contained", subject.addresses)]})
        run = run_probes(policy, ProbePlan(tuple(specs)), points, store, target=target, listening=listening,
                         timeout=timeout)
    finally:
        for n in own:
            load(points[n], {"nftables": [_elements("add", "inet", "contained", subject.addresses)]})
    store.append(RecordKind.ACTION, CONTAIN_SOURCE, f"target {target}",
                 {"action": "fabric-check", "target": target, "subject": subject.describe(), "lifted_at": own,
                  "restored": True, "probes": run.evidence})
    return run


def contain(policy: Policy, subject: Subject, points: Mapping[str, Executor], store: EvidenceStore, *,
            target: str, collectors: Sequence[str], workdir: Path, capture: CaptureFn | None = None,
            steps: StepsFn | None = None, snapshot_seconds: float = 4.0, drill: bool = False,
            timeout: float = DEFAULT_TIMEOUT, progress: Progress | None = None, approved_by: str | None = None,
            ticket: str | None = None, keep: Sequence[str] = ()) -> ContainmentReport:
    """Snapshot, isolate at two points, verify with probes and the other jobs' progress; with ``drill``, then
    release and verify the subject's approved paths work again. ``keep``: addresses that stay reachable
    without being evidence collectors (the control host that drives the containment over SSH)."""
    say = progress or (lambda _msg: None)
    containment_points(subject, points)  # refuse before snapshotting when there is nothing to isolate with
    say(f"snapshot of {subject.describe()}: {snapshot_seconds:g}s capture, flow table, rule state")
    snap = snapshot(subject, points, store, target=target, workdir=workdir, capture=capture,
                    seconds=snapshot_seconds)
    watch = [m for j in policy.jobs if not set(j.members) & set(subject.nodes) for m in j.members]
    stopped = [m for j in policy.jobs if set(j.members) & set(subject.nodes) for m in j.members]
    say(f"isolating {', '.join(subject.addresses)} (collectors: {', '.join(collectors) or 'none'})")
    t0 = time.monotonic()
    reachable = tuple(dict.fromkeys([*collectors, *keep]))
    act = isolate(subject, points, store, target=target, collectors=reachable, snapshot_evidence=snap.evidence,
                  approved_by=approved_by, ticket=ticket)
    before = dict(steps()) if steps is not None else {}
    run = verify(policy, subject, points, store, target=target, collectors=collectors, timeout=timeout,
                 progress=progress, keep=keep)
    say("lifting the node-level containment for a moment: the fabric alone must isolate")
    fab = fabric_check(policy, subject, points, store, target=target, collectors=collectors, timeout=timeout,
                       keep=keep)
    results = run.results + (fab.results if fab is not None else ())
    seconds = round(time.monotonic() - t0, 3)
    # the plan's own notes (the matrix's zone-level ones say nothing about this containment)
    named = {*subject.nodes, *(n.name for n in policy.nodes if set(n.addresses) & set(keep))}
    notes = tuple(s for s in run.plan.skipped if s.split(":", 1)[0] in named) + (() if fab is not None else (
        f"the fabric alone was not checked: {subject.describe()} has no approved path to lift its own "
        "containment on, other than to the collectors",))
    training: dict[str, Any] = {"others_training": None, "reason": "no step counters from this target"}
    if steps is not None:
        say(f"checking that {', '.join(watch) or 'no other rank'} keep(s) training")
        training = training_progress(steps, watch, stopped, before)
    report = ContainmentReport(target, subject, snap, act, results, run.evidence,
                               proven_points(subject, results), training,
                               seconds=seconds, notes=notes)
    if drill:
        say(f"releasing {subject.describe()}")
        rel = release(subject, points, store, target=target)
        again = verify_release(policy, subject, points, store, target=target, timeout=timeout)
        report = ContainmentReport(target, subject, snap, act, results, run.evidence, report.points, training,
                                   rel, again.results, report.started, seconds, notes)
    store.append(RecordKind.OBSERVATION, CONTAIN_SOURCE, subject.describe(),
                 {k: v for k, v in report.to_json().items() if k not in ("probes", "release_probes")})
    return report


__all__ = [
    "CaptureFn",
    "ContainError",
    "ContainmentReport",
    "Snapshot",
    "StepsFn",
    "Subject",
    "contain",
    "containment_plan",
    "fabric_probes",
    "fabric_check",
    "containment_points",
    "control_addresses",
    "isolate",
    "proven_points",
    "release",
    "resolve_subject",
    "snapshot",
    "training_progress",
    "verify",
    "verify_release",
]
