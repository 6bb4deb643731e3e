"""Probe planning at fleet scale: one probe class per (source group, destination class, verdict).

At ten thousand nodes the probe matrix cannot try every pair (10⁸), and it need not: the compiled
policy (:mod:`ringfence.analyze.plan`) already says which principals no rule can tell apart. The verdict
of a TCP/UDP probe from node ``s`` to port ``p`` of node ``d`` depends only on (source class of ``s``,
destination class of ``d``, protocol bucket, port segment of ``p``) — the key of one ``cells`` row. So:

* **source groups** are the policy's zones and jobs (a node is in its zone's group and in each of its
  jobs' groups);
* **destination services** are the declared services (at their first port) and each job's collective
  (at its rendezvous port: the one the node was seen listening on, else torch's default 29500 when it
  lies in the job's collective range, else the range's first port — the plan says which);
* destination services with the same (destination class, bucket, segment) form one **destination
  class**: every source sees the same verdict for each of them;
* the **verdict** of a (source node, destination class) is the approving rule, or *deny*.

Each (source group, destination class, verdict) is one :class:`ProbeClass`; it holds how many source
nodes and destination services it stands for and a stated sample of concrete probes (``sample`` source
nodes, spread deterministically by ``seed``, each against a destination service of the class on
another node). Nothing here runs a probe: :mod:`ringfence.enforce.probe_matrix` runs what it plans.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from ringfence.analyze.plan import BUCKET_TCP, BUCKET_UDP, Plan, compile_plan
from ringfence.policy import Policy

#: torch.distributed's default rendezvous port (MASTER_PORT), assumed when none was seen listening.
DEFAULT_RENDEZVOUS = 29500


class PlannedProbe(NamedTuple):
    """One concrete probe: ``source`` node opens ``host:port`` (``proto``) on node ``destination``."""

    source: str
    destination: str
    host: str
    port: int
    proto: str


class ProbeClass(NamedTuple):
    """An equivalence class of probes and its sample.

    ``group`` is ``zone:NAME`` or ``job:NAME``; ``destination`` describes the destination class by its
    first service (``service NAME (class)`` or ``collective of job NAME``); ``verdict`` is ``allow`` or
    ``deny``; ``rule`` the approving flow for ``allow``. ``sources`` and ``services`` are the sizes of
    the class (source nodes, destination services); ``probes`` the sample, ``len(probes)`` of them.
    ``port_assumed`` is true when a collective's port was not seen listening. (Immutable tuples, not
    frozen dataclasses: a fleet plan builds hundreds of thousands, and a frozen dataclass's ``__init__``
    costs a microsecond per field.)
    """

    group: str
    destination: str
    proto: str
    port: int
    verdict: str
    rule: str | None
    sources: int
    services: int
    probes: tuple[PlannedProbe, ...]
    port_assumed: bool = False


@dataclass(frozen=True)
class FleetPlan:
    """Every probe class of a policy, the requested sample size, and what could not be planned."""

    classes: tuple[ProbeClass, ...]
    sample: int
    seed: int
    skipped: tuple[str, ...] = ()

    @property
    def probes(self) -> tuple[PlannedProbe, ...]:
        """All sampled probes, class by class."""
        return tuple(p for c in self.classes for p in c.probes)


@dataclass(frozen=True)
class _Dest:
    node: str
    host: str
    port: int
    proto: str
    label: str
    assumed: bool


def _rendezvous(plan_port: tuple[int, int], seen: frozenset[int] | None) -> tuple[int, bool]:
    lo, hi = plan_port
    ports = sorted(p for p in (seen or ()) if lo <= p <= hi)
    if ports:
        return ports[0], False
    return (DEFAULT_RENDEZVOUS if lo <= DEFAULT_RENDEZVOUS <= hi else lo), True


def _destinations(policy: Policy, listening: Mapping[str, frozenset[int]]) -> tuple[list[_Dest], list[str]]:
    addr = {n.name: n.addresses[0] for n in policy.nodes}
    dests: list[_Dest] = []
    skipped: list[str] = []
    for s in policy.services:
        if s.node not in addr:
            skipped.append(f"service {s.name}: node {s.node} is not in the inventory")
            continue
        label = f"{'admin ' if s.admin else ''}service {s.name} ({s.traffic_class.value})"
        dests.append(_Dest(s.node, addr[s.node], s.port_range[0], s.proto, label, False))
    for j in policy.jobs:
        member = next((m for m in j.members if m in addr), None)
        if member is None:
            skipped.append(f"job {j.name}: no member is in the inventory")
            continue
        port, assumed = _rendezvous(j.collective_range, listening.get(member))
        dests.append(_Dest(member, addr[member], port, "tcp", f"collective of job {j.name}", assumed))
    return dests, skipped


def _classes(plan: Plan) -> dict[str, tuple[int, int]]:
    """Node name → (source class, destination class), from each node's first inventory row."""
    t = plan.addresses
    out: dict[str, tuple[int, int]] = {}
    for node, ident, sc, dc in zip(
        t.column("node").to_pylist(),
        t.column("ident").to_pylist(),
        t.column("sc").to_pylist(),
        t.column("dc").to_pylist(),
        strict=True,
    ):
        if node is not None and ident == "":
            out.setdefault(node, (sc, dc))
    return out


def plan_fleet_probes(
    policy: Policy, *, sample: int = 1, seed: int = 0, listening: Mapping[str, frozenset[int]] | None = None,
    reachable: Collection[str] | None = None,
) -> FleetPlan:
    """The probe classes of ``policy`` with up to ``sample`` probes each (see the module docstring).

    ``listening`` (node → listening TCP ports) picks each job's rendezvous port; without it the port is
    assumed and the class says so. ``reachable``: the nodes a probe can be run from (those with an
    executor); a class's sample is drawn from them only, and a class with none of them is skipped, said.
    """
    if sample < 1:
        raise ValueError("sample must be at least 1")
    plan = compile_plan(policy)
    node_cls = _classes(plan)
    rules = dict(zip(plan.cells.column("key").to_pylist(), plan.cells.column("rule").to_pylist(), strict=True))
    nseg, ndc = plan.segments.count, plan.n_dst_classes
    dests, skipped = _destinations(policy, listening or {})

    # Destination classes: (dc, bucket, segment) → the services in it, in declaration order.
    dclasses: dict[tuple[int, int, int], list[_Dest]] = {}
    for d in dests:
        bucket = BUCKET_TCP if d.proto == "tcp" else BUCKET_UDP
        dclasses.setdefault((node_cls[d.node][1], bucket, plan.segments.segment(d.port)), []).append(d)

    groups: list[tuple[str, list[str]]] = []
    zone_nodes: dict[str, list[str]] = {}
    for n in policy.nodes:
        zone_nodes.setdefault(n.zone, []).append(n.name)
    groups += [(f"zone:{z.name}", zone_nodes.get(z.name, [])) for z in policy.zones]
    groups += [(f"job:{j.name}", [m for m in j.members if m in node_cls]) for j in policy.jobs]

    rng = random.Random(seed)
    dinfo = {k: (svcs, frozenset(d.node for d in svcs), any(d.assumed for d in svcs)) for k, svcs in dclasses.items()}
    classes: list[ProbeClass] = []
    for group, members in groups:
        if not members:
            skipped.append(f"{group}: no nodes in the inventory")
            continue
        by_sc: dict[int, list[str]] = {}
        for m in members:
            by_sc.setdefault(node_cls[m][0], []).append(m)
        for nodes in by_sc.values():
            rng.shuffle(nodes)  # each class then takes the next nodes of this order: samples rotate
        # a class counts all its sources but samples only those a probe can run from (the lists are shared
        # when every node is reachable: a zone of thousands of nodes is not copied)
        pick = by_sc if reachable is None else {sc: [m for m in ns if m in reachable] for sc, ns in by_sc.items()}
        cursors = dict.fromkeys(by_sc, 0)
        for (dc, bucket, seg), (services, on, assumed) in dinfo.items():
            # verdict → the source nodes (kept as the per-class lists: a zone of 8,000 nodes is not copied)
            verdicts: dict[str | None, list[int]] = {}
            for sc in by_sc:
                rule = rules.get(((sc * ndc + dc) * 3 + bucket) * nseg + seg)
                verdicts.setdefault(rule, []).append(sc)
            first = services[0]
            for rule, scs in verdicts.items():
                probes = _sample(scs, pick, cursors, services, on, sample)
                if not probes:
                    unreached = reachable is not None and not any(pick[c] for c in scs)
                    skipped.append(f"{group} → {first.label}: " + (
                        "no source node of the class can be reached to probe from" if unreached
                        else "the only sources are the destination nodes"))
                    continue
                classes.append(
                    ProbeClass(
                        group=group,
                        destination=first.label,
                        proto=first.proto,
                        port=first.port,
                        verdict="allow" if rule is not None else "deny",
                        rule=rule,
                        sources=sum(len(by_sc[c]) for c in scs),
                        services=len(services),
                        probes=probes,
                        port_assumed=assumed,
                    )
                )
    return FleetPlan(tuple(classes), sample, seed, tuple(skipped))


def _sample(
    scs: list[int],
    by_sc: Mapping[int, list[str]],
    cursors: dict[int, int],
    services: list[_Dest],
    on: frozenset[str],
    k: int,
) -> tuple[PlannedProbe, ...]:
    """Up to ``k`` distinct source nodes of the source classes ``scs`` that have a service of the class
    on another node (``on``: the nodes the services run on), each against such a service.

    Nodes are taken round-robin over the source classes, each from its (shuffled) order at its cursor,
    and the cursors move on — so successive classes probe from different nodes, and one class's sample
    spreads over its source classes (over jobs, for a zone). O(k) per class: a quarter of a million
    classes at fleet scale must not each copy or scan a zone of thousands of nodes."""
    chosen: list[str] = []
    looked = dict.fromkeys(scs, 0)  # nodes of each source class looked at in this call
    active = [sc for sc in scs if by_sc[sc]]  # a source class none of whose nodes can be probed from gives none
    while active and len(chosen) < k:
        still: list[int] = []
        for sc in active:
            nodes = by_sc[sc]
            node = nodes[cursors[sc] % len(nodes)]
            cursors[sc] += 1
            looked[sc] += 1
            if (len(on) > 1 or node not in on) and node not in chosen:
                chosen.append(node)
                if len(chosen) == k:
                    break
            if looked[sc] < len(nodes):  # not yet gone round this class once
                still.append(sc)
        active = still
    out: list[PlannedProbe] = []
    for i, src in enumerate(chosen):
        for j in range(len(services)):
            d = services[(i + j + len(chosen)) % len(services)]
            if d.node != src:
                out.append(PlannedProbe(src, d.node, d.host, d.port, d.proto))
                break
    return tuple(out)


__all__ = ["DEFAULT_RENDEZVOUS", "FleetPlan", "PlannedProbe", "ProbeClass", "plan_fleet_probes"]
