"""Selector synthesis for discovery: the narrowest endpoint selectors that still cover what was seen.

Rules, in order, over a set of observed nodes on one side of one (destination, protocol, ports,
class) group:

1. **job** — nodes that are members of exactly one job are grouped by that job, and the group gets
   ``job: NAME``. Ranks of a job are interchangeable (rank placement changes between runs), so a
   path one rank was seen taking is a path every rank of that job may take next run.
2. **zone** — of the remaining nodes, a zone all of whose inventory nodes were seen (and that has at
   least ``min_zone_nodes`` nodes) becomes ``zone: NAME``. One node seen is evidence about that node,
   not about its zone, so a one-node zone stays a node selector.
3. **node** — everything else is ``node: NAME``, one entry each.

Services are chosen for destinations by the caller (a known service port is always ``service:``).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from ringfence.policy import ApprovedFlow, Endpoint, Policy, Service, TrafficClass

_PROTO_NAMES = {6: "tcp", 17: "udp"}
_ID_BAD = re.compile(r"[^a-z0-9._-]+")
_ID_MAX = 64


def proto_name(proto: int) -> str:
    """``tcp``/``udp`` for 6/17, ``any`` for every other IP protocol (the policy has no other words)."""
    return _PROTO_NAMES.get(proto, "any")


@dataclass(frozen=True)
class Group:
    """One synthesized endpoint and the observed nodes it stands for."""

    endpoint: Endpoint
    members: tuple[str, ...]
    rationale: str


@dataclass
class Inventory:
    """Lookups over the inventory policy, built once (the policy's own lookups are linear)."""

    policy: Policy
    zone_of: dict[str, str] = field(default_factory=dict)
    nodes_of_zone: dict[str, set[str]] = field(default_factory=dict)
    jobs_of: dict[str, list[str]] = field(default_factory=dict)
    services_at: dict[tuple[str, str], list[Service]] = field(default_factory=dict)
    external: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, policy: Policy) -> Inventory:
        """Index ``policy``."""
        inv = cls(policy)
        for n in policy.nodes:
            inv.zone_of[n.name] = n.zone
            inv.nodes_of_zone.setdefault(n.zone, set()).add(n.name)
        for j in policy.jobs:
            for m in j.members:
                inv.jobs_of.setdefault(m, []).append(j.name)
        for s in policy.services:
            inv.services_at.setdefault((s.node, s.proto), []).append(s)
        inv.external = {z.name for z in policy.zones if z.trust.value == "external"}
        return inv

    def service(self, node: str | None, proto: int, port: int | None) -> Service | None:
        """The first declared service listening on ``node`` at ``port`` (None without a port)."""
        if node is None or port is None or port < 0:
            return None
        for s in self.services_at.get((node, proto_name(proto)), ()):
            lo, hi = s.port_range
            if lo <= port <= hi:
                return s
        return None

    def shares_job(self, a: str | None, b: str | None) -> bool:
        """Whether nodes ``a`` and ``b`` are members of one job."""
        if a is None or b is None:
            return False
        return bool(set(self.jobs_of.get(a, ())) & set(self.jobs_of.get(b, ())))


def group_nodes(nodes: Iterable[str], inv: Inventory, min_zone_nodes: int, side: str = "source") -> list[Group]:
    """Cover ``nodes`` (one ``side`` of a path) with job, zone and node selectors (module doc), most general first."""
    remaining = set(nodes)
    groups: list[Group] = []
    by_job: dict[str, list[str]] = {}
    for n in sorted(remaining):
        jobs = inv.jobs_of.get(n, [])
        if len(jobs) == 1:
            by_job.setdefault(jobs[0], []).append(n)
    for job in (j.name for j in inv.policy.jobs):
        members = by_job.get(job)
        if members:
            groups.append(Group(Endpoint(job=job), tuple(members), f"every {side} seen is a rank of job {job}"))
            remaining.difference_update(members)
    for zone in sorted({inv.zone_of[n] for n in remaining if n in inv.zone_of}):
        everyone = inv.nodes_of_zone.get(zone, set())
        if len(everyone) >= min_zone_nodes and everyone <= remaining:
            groups.append(Group(Endpoint(zone=zone), tuple(sorted(everyone)), f"every node of zone {zone} was seen"))
            remaining.difference_update(everyone)
    groups.extend(Group(Endpoint(node=n), (n,), f"{side} node {n}") for n in sorted(remaining))
    return groups


def address_endpoint(address: str, identity: str | None) -> Endpoint:
    """An address outside the inventory: its workload identity if the flow record carried one, else a host CIDR."""
    if identity:
        return Endpoint(identity=identity)
    ip = ipaddress.ip_address(address)
    return Endpoint(cidr=f"{ip}/{ip.max_prefixlen}")


def compact_ports(ports: Iterable[int]) -> list[tuple[int, int]]:
    """Sorted distinct ports as maximal runs of consecutive ports: 5, 6, 7, 9 → (5, 7), (9, 9)."""
    runs: list[tuple[int, int]] = []
    for p in sorted(set(ports)):
        if runs and p == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], p)
        else:
            runs.append((p, p))
    return runs


def port_text(lo: int, hi: int) -> int | str:
    """A policy port spec: ``8080`` or ``"32768-60999"``."""
    return lo if lo == hi else f"{lo}-{hi}"


def endpoint_word(ep: Endpoint) -> str:
    """The selector's value, for ids: ``train-a``, ``storage-http``, ``10.0.0.1-32``."""
    return ep.describe().split(":", 1)[1]


def approved_flow(
    rule_id: str, source: Endpoint, destination: Endpoint, proto: str, ports: int | str | None, cls: str, why: str
) -> ApprovedFlow:
    """An approved flow, validated like one read from a policy file."""
    return ApprovedFlow.model_validate(
        {"id": rule_id, "from": source, "to": destination, "proto": proto, "ports": ports,
         "class": TrafficClass(cls), "description": why}
    )


def make_id(parts: Iterable[str], taken: set[str]) -> str:
    """A policy id from ``parts`` (lower-case, ``[a-z0-9._-]``, ≤ 64), unique in ``taken`` (then added)."""
    text = "-".join(p for p in parts if p)
    base = _ID_BAD.sub("-", text.lower()).strip("-._") or "flow"
    base = base[: _ID_MAX - 4].rstrip("-._") or "flow"
    candidate, n = base, 2
    while candidate in taken:
        candidate = f"{base}-{n}"
        n += 1
    taken.add(candidate)
    return candidate


__all__ = [
    "Group",
    "Inventory",
    "address_endpoint",
    "approved_flow",
    "compact_ports",
    "endpoint_word",
    "group_nodes",
    "make_id",
    "port_text",
    "proto_name",
]
