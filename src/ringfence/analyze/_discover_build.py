"""Observations → proposal: flag what must not be approved, synthesize selectors and port ranges for the rest.

Works on the aggregated observations of :mod:`ringfence.analyze._discover_observe` (a few rows per
pair of nodes), never on flows. The rules are described in docs/discover.md.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ringfence.analyze._discover_observe import EPHEMERAL_BUCKET, Observation
from ringfence.analyze._discover_select import (
    Inventory,
    address_endpoint,
    approved_flow,
    compact_ports,
    endpoint_word,
    group_nodes,
    make_id,
    port_text,
    proto_name,
)
from ringfence.analyze._discover_types import (
    CLASS_ORDER,
    DiscoverOptions,
    Evidence,
    FlaggedFlow,
    Proposal,
    ProposedRule,
)
from ringfence.policy import Endpoint, Service, TrafficClass

# (destination kind, destination name, proto, ports, class): one destination of approvable traffic.
_PathKey = tuple[str, str, str, int | str | None, str]
# (source, destination, proto, service, class, reasons): one group of flagged traffic.
_FlagKey = tuple[str, str, str, str, str, tuple[str, ...]]


@dataclass(frozen=True)
class _Draft:
    """A rule before its id: selectors, ports, class, evidence, why."""

    source: Endpoint
    destination: Endpoint
    proto: str
    ports: int | str | None
    traffic_class: str
    evidence: Evidence | None
    rationale: str
    id_parts: tuple[str, ...]
    notes: tuple[str, ...] = ()


def _evidence(o: Observation) -> Evidence:
    return Evidence(
        flows=o.flows,
        bytes=o.bytes,
        first_seen=o.first_seen,
        last_seen=o.last_seen,
        sources=(o.src_node or o.src_addr or "?",),
        destinations=(o.dst_node or o.dst_addr or "?",),
        port_lo=o.port_lo,
        port_hi=o.port_hi,
    )


def _merge(evidence: Iterable[Evidence]) -> Evidence:
    items = list(evidence)
    out = items[0]
    for e in items[1:]:
        out = out.merge(e)
    return out


def _observed_ports(o: Observation) -> int | str | None:
    if o.port_lo is None or o.port_hi is None:
        return None
    if o.bucket is not None and o.bucket != EPHEMERAL_BUCKET:
        return o.bucket
    return port_text(o.port_lo, o.port_hi)


class Builder:
    """Collects observations, then :meth:`finish` turns them into a :class:`Proposal`."""

    def __init__(self, inv: Inventory, options: DiscoverOptions) -> None:
        self.inv = inv
        self.opt = options
        zones = {z.name for z in inv.policy.zones}
        self.admin = set(options.admin_zones) if options.admin_zones is not None else {"admin"} & zones
        self.collective: dict[tuple[str, int], list[Observation]] = {}
        self.paths: dict[_PathKey, dict[str, Evidence]] = {}
        self.flagged: dict[_FlagKey, tuple[Evidence, Observation, Service | None]] = {}

    # -- intake ------------------------------------------------------------------------------------
    def add(self, o: Observation) -> None:
        """Route one observation: flagged, a job's collective, or an approvable path."""
        port = o.bucket if o.bucket is not None and o.bucket != EPHEMERAL_BUCKET else None
        svc = self.inv.service(o.dst_node, o.proto, port)
        reasons = self._reasons(o, svc)
        if reasons:
            self._flag(o, svc, reasons)
        elif o.cjob is not None and svc is None:
            self.collective.setdefault((o.cjob, o.proto), []).append(o)
        else:
            assert o.src_node is not None and o.dst_node is not None  # unknown ends are always flagged
            if svc is not None:
                key: _PathKey = ("service", svc.name, svc.proto, None, o.traffic_class)
            else:
                ports = _observed_ports(o)
                proto = proto_name(o.proto) if ports is not None else "any"
                key = ("node", o.dst_node, proto, ports, o.traffic_class)
            srcs = self.paths.setdefault(key, {})
            ev = _evidence(o)
            srcs[o.src_node] = srcs[o.src_node].merge(ev) if o.src_node in srcs else ev

    def _reasons(self, o: Observation, svc: Service | None) -> tuple[str, ...]:
        inv = self.inv
        sz = inv.zone_of.get(o.src_node) if o.src_node else None
        dz = inv.zone_of.get(o.dst_node) if o.dst_node else None
        out: list[str] = []
        if o.traffic_class == "unclassified":
            out.append("unclassified: no service, job collective range or inventory entry explains it")
        if o.src_node is None:
            out.append(f"source {o.src_addr} is not in the inventory")
        if o.dst_node is None:
            out.append(f"egress to {o.dst_addr}, which is not in the inventory")
        elif dz in inv.external and sz not in inv.external:
            out.append(f"egress outside the trust boundary (zone {dz} has trust: external)")
        if sz in inv.external and o.dst_node is not None and dz not in inv.external:
            out.append(f"ingress from outside the trust boundary (zone {sz} has trust: external)")
        if svc is not None and svc.admin and sz not in self.admin:
            where = f"zone {sz}" if sz else "outside the inventory"
            out.append(f"from {where} to administrative service {svc.name} (admin zones: "
                       f"{', '.join(sorted(self.admin)) or 'none'})")
        if o.traffic_class == "storage" and o.src_node is not None and not inv.jobs_of.get(o.src_node):
            out.append(f"storage access from {o.src_node}, a member of no job (lateral read?)")
        is_job_collective = o.cjob is not None and svc is None
        if o.traffic_class == "collective" and not is_job_collective and not inv.shares_job(o.src_node, o.dst_node):
            out.append("collective-class traffic between ends that share no job")
        return tuple(out)

    def _flag(self, o: Observation, svc: Service | None, reasons: tuple[str, ...]) -> None:
        key = (o.src_node or o.src_addr or "?", o.dst_node or o.dst_addr or "?", proto_name(o.proto),
               svc.name if svc else "", o.traffic_class, reasons)
        ev = _evidence(o)
        if key in self.flagged:
            prev, first, fsvc = self.flagged[key]
            self.flagged[key] = (prev.merge(ev), first, fsvc)
        else:
            self.flagged[key] = (ev, o, svc)

    # -- synthesis ---------------------------------------------------------------------------------
    def finish(self, flows: int) -> Proposal:
        """The proposal: collective rules first, then the other paths, then the flagged flows."""
        notes: list[str] = []
        drafts = self._collective_drafts(notes)
        drafts += sorted(self._path_drafts(), key=lambda d: (
            CLASS_ORDER.index(d.traffic_class) if d.traffic_class in CLASS_ORDER else len(CLASS_ORDER),
            d.destination.describe(), d.source.describe(), str(d.ports)))
        taken: set[str] = set()
        rules = tuple(self._rule(d, taken) for d in drafts)
        flagged = tuple(self._flagged(taken))
        policy = self.inv.policy.model_copy(update={"approved": tuple(r.rule for r in rules)})
        return Proposal(policy, rules, flagged, tuple(notes), self.opt, flows)

    def _rule(self, d: _Draft, taken: set[str]) -> ProposedRule:
        rule = approved_flow(make_id(d.id_parts, taken), d.source, d.destination, d.proto, d.ports,
                             d.traffic_class, d.rationale)
        return ProposedRule(rule, d.evidence, d.rationale, self._protection(d.traffic_class), d.notes)

    def _protection(self, cls: str) -> str:
        cp = self.inv.policy.classes.of(TrafficClass(cls))
        if cp is None:
            return "none stated (unclassified)"
        layers = ", ".join(layer.value for layer in cp.layers) or "any confidential layer"
        return f"{cp.protection.value}: {layers}"

    def _collective_drafts(self, notes: list[str]) -> list[_Draft]:
        elo, ehi = self.opt.ephemeral
        given = dict(self.opt.rendezvous)
        out: list[_Draft] = []
        for job in self.inv.policy.jobs:
            jlo, jhi = job.collective_range
            protos = sorted(p for (j, p) in self.collective if j == job.name)
            if not protos:
                notes.append(f"job {job.name}: no collective traffic observed; nothing proposed for it")
                continue
            for proto in protos:
                obs = self.collective[(job.name, proto)]
                pname = proto_name(proto)
                suffix = () if pname == "tcp" else (pname,)
                ephemeral = [o for o in obs if o.bucket == EPHEMERAL_BUCKET]
                fixed: dict[int, list[Observation]] = {}
                for o in obs:
                    if o.bucket is not None and o.bucket != EPHEMERAL_BUCKET:
                        fixed.setdefault(o.bucket, []).append(o)
                if ephemeral:
                    lo, hi = max(elo, jlo), min(ehi, jhi)
                    out.append(_Draft(
                        Endpoint(job=job.name), Endpoint(job=job.name), pname, port_text(lo, hi), "collective",
                        _merge(_evidence(o) for o in ephemeral),
                        f"ranks of {job.name} listen on OS-ephemeral ports that change every run: the "
                        f"ephemeral range {elo}-{ehi} within the job's collective ports {job.collective_ports}",
                        (job.name, "collective", *suffix)))
                extra_notes: dict[int, str] = {}
                if pname == "tcp" and job.name in given:
                    port = given[job.name]
                    fixed.setdefault(port, [])
                    extra_notes[port] = f"rendezvous port {port} of job {job.name} given by the operator"
                elif pname == "tcp" and not fixed and self.opt.assume_rendezvous:
                    # Fixed (non-ephemeral) ports seen: the rendezvous was among them, nothing to assume.
                    port = self.opt.assume_rendezvous
                    if jlo <= port <= jhi and not elo <= port <= ehi:
                        fixed.setdefault(port, [])
                        extra_notes[port] = (
                            f"rendezvous of job {job.name} not observed (it happens once, at job start): assumed "
                            f"torch.distributed's default port {port}; give --rendezvous {job.name}=PORT if not")
                        notes.append(extra_notes[port])
                runs = compact_ports(fixed)
                if len(runs) > self.opt.max_fixed_runs:
                    runs = [(runs[0][0], runs[-1][1])]
                    notes.append(f"job {job.name}: fixed collective ports merged into one range {port_text(*runs[0])}")
                for lo, hi in runs:
                    seen = [o for p, os_ in fixed.items() if lo <= p <= hi for o in os_]
                    run_notes = tuple(n for p, n in extra_notes.items() if lo <= p <= hi)
                    why = (f"fixed collective port(s) of {job.name} (rendezvous store or configured listeners), "
                           "exactly as seen") if seen else f"rendezvous port of {job.name}, not observed (see the note)"
                    out.append(_Draft(
                        Endpoint(job=job.name), Endpoint(job=job.name), pname, port_text(lo, hi), "collective",
                        _merge(_evidence(o) for o in seen) if seen else None, why,
                        (job.name, "collective", str(port_text(lo, hi)), *suffix), run_notes))
        return out

    def _path_drafts(self) -> list[_Draft]:
        k = self.opt.min_zone_nodes
        by_source: list[tuple[Endpoint, _PathKey, Evidence, str]] = []
        for key, srcs in self.paths.items():
            by_source.extend((g.endpoint, key, _merge(srcs[m] for m in g.members), g.rationale)
                             for g in group_nodes(srcs, self.inv, k, "source"))
        out: list[_Draft] = []
        # Node destinations of one source, protocol, port and class are grouped like sources are.
        node_dsts: dict[tuple[str, str, int | str | None, str], dict[str, tuple[Endpoint, Evidence, str]]] = {}
        for src, (kind, name, proto, ports, cls), ev, why in by_source:
            if kind == "service":
                svc = self.inv.policy.service(name)
                assert svc is not None
                out.append(_Draft(src, Endpoint(service=name), proto, None, cls, ev,
                                  f"{why}; destination is service {name} on {svc.node}",
                                  (endpoint_word(src), "to", name, *(() if proto == "tcp" else (proto,)))))
            else:
                node_dsts.setdefault((src.describe(), proto, ports, cls), {})[name] = (src, ev, why)
        for (_, proto, ports, cls), dsts in node_dsts.items():
            for g in group_nodes(dsts, self.inv, k, "destination"):
                src, _, why = dsts[g.members[0]]  # every member of a group is one of ``dsts``
                ev = _merge(dsts[m][1] for m in g.members)
                out.append(_Draft(src, g.endpoint, proto, ports, cls, ev, f"{why}; {g.rationale}",
                                  (endpoint_word(src), "to", endpoint_word(g.endpoint),
                                   str(ports) if ports is not None else "", *(() if proto == "tcp" else (proto,)))))
        return out

    def _flagged(self, taken: set[str]) -> list[FlaggedFlow]:
        out: list[FlaggedFlow] = []
        items = sorted(self.flagged.items(), key=lambda kv: (-kv[1][0].bytes, kv[0][:5]))
        for (src, dst, proto, svc_name, cls, reasons), (ev, o, svc) in items:
            src_label = f"{src} ({self.inv.zone_of[src]})" if src in self.inv.zone_of else src
            dst_label = f"{dst} ({self.inv.zone_of[dst]})" if dst in self.inv.zone_of else dst
            ports = None if ev.port_lo is None else str(port_text(ev.port_lo, ev.port_hi or ev.port_lo))
            suggested = None
            if cls != "unclassified":
                s_ep = Endpoint(node=o.src_node) if o.src_node else address_endpoint(o.src_addr or "", o.src_ident)
                s_proto: str = proto
                if svc is not None:
                    d_ep, s_ports, s_proto = Endpoint(service=svc.name), None, svc.proto
                else:
                    d_ep = Endpoint(node=o.dst_node) if o.dst_node else address_endpoint(o.dst_addr or "", o.dst_ident)
                    s_ports = None if ev.port_lo is None else port_text(ev.port_lo, ev.port_hi or ev.port_lo)
                    s_proto = proto if s_ports is not None else "any"
                suggested = approved_flow(
                    make_id((endpoint_word(s_ep), "to", endpoint_word(d_ep)), taken), s_ep, d_ep, s_proto, s_ports,
                    cls, "flagged by discovery; approved by hand: " + "; ".join(reasons))
            out.append(FlaggedFlow(reasons, src_label, dst_label, proto, ports, cls, svc_name or None, ev, suggested))
        return out


__all__ = ["Builder"]
