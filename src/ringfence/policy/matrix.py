"""The approved communication matrix, resolved: every endpoint selector turned into concrete addresses.

Every renderer, probe planner and control starts here, so the targets agree on what a flow means. It
belongs to the policy, not to enforcement, so that controls may use it too. Lookups are built once as
dicts (a policy of 10,000 nodes and 500 jobs resolves in well under a second); selectors keep the *kind*
they were written with (zone, job, node, service, identity, cidr) so a renderer can key its sets by that
name rather than by addresses, which is what keeps rule counts linear in flows.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass

from ringfence.errors import RingfenceError
from ringfence.policy.model import ApprovedFlow, Endpoint, Policy, Trust


class MatrixError(RingfenceError):
    """The approved matrix cannot be resolved: a flow names a zone, node, job, service or identity the policy
    does not have."""


#: Every TCP/UDP port: what ``proto: any`` without ``ports`` means.
ALL_PORTS: tuple[int, int] = (1, 65535)


@dataclass(frozen=True)
class Selector:
    """One side of a resolved flow.

    ``kind``/``name`` is what the policy said (``job``/``train-a``); ``nodes`` the policy nodes it
    covers (empty for a pure CIDR), ``addresses`` their addresses, ``cidrs`` any networks named
    directly. ``key`` is a stable, nftables-safe name for a set holding this selector's addresses.
    """

    kind: str
    name: str
    nodes: tuple[str, ...]
    addresses: tuple[str, ...]
    cidrs: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """A set name: ``job_train-a``, ``zone_user``; identities and CIDRs are made safe."""
        return f"{self.kind}_{_safe(self.name)}"

    def describe(self) -> str:
        """``job:train-a`` — as the policy wrote it."""
        return f"{self.kind}:{self.name}"


@dataclass(frozen=True)
class ResolvedFlow:
    """An approved flow with both ends resolved and its ports fixed."""

    id: str
    traffic_class: str
    proto: str  # "tcp" | "udp" | "any"
    ports: tuple[int, int]
    source: Selector
    destination: Selector
    description: str = ""

    @property
    def protos(self) -> tuple[str, ...]:
        """The transport protocols it covers (``any`` means TCP and UDP: the ones with ports)."""
        return ("tcp", "udp") if self.proto == "any" else (self.proto,)


@dataclass(frozen=True)
class Matrix:
    """The whole resolved policy: flows, node addresses by zone, and which zones are external."""

    cluster: str
    flows: tuple[ResolvedFlow, ...]
    node_zone: Mapping[str, str]
    node_addresses: Mapping[str, tuple[str, ...]]
    zone_nodes: Mapping[str, tuple[str, ...]]
    external_zones: frozenset[str]

    def covered_addresses(self) -> tuple[str, ...]:
        """Every node address: the default-drop applies to traffic from or to these."""
        return tuple(a for addrs in self.node_addresses.values() for a in addrs)

    def external_addresses(self) -> tuple[str, ...]:
        """Addresses of nodes outside the trust boundary (egress destinations)."""
        return tuple(a for z in sorted(self.external_zones) for n in self.zone_nodes.get(z, ()) for a in
                     self.node_addresses[n])

    def flows_from(self, node: str) -> tuple[ResolvedFlow, ...]:
        """Flows in which ``node`` may open connections."""
        addrs = set(self.node_addresses.get(node, ()))
        return tuple(f for f in self.flows if node in f.source.nodes or _in_cidrs(addrs, f.source.cidrs))

    def flows_to(self, node: str) -> tuple[ResolvedFlow, ...]:
        """Flows in which ``node`` accepts connections."""
        addrs = set(self.node_addresses.get(node, ()))
        return tuple(f for f in self.flows if node in f.destination.nodes or _in_cidrs(addrs, f.destination.cidrs))


_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def _safe(name: str) -> str:
    # nftables set names: letters, digits, '_', '.', '-' (and short). Identities are URIs: keep them readable.
    safe = _UNSAFE.sub("_", name.removeprefix("spiffe://"))
    return safe[:200]


def _in_cidrs(addresses: set[str], cidrs: tuple[str, ...]) -> bool:
    nets = [ipaddress.ip_network(c, strict=False) for c in cidrs]
    return any(ipaddress.ip_address(a) in n for a in addresses for n in nets)


class _Index:
    """Dict lookups over a policy, built once (Policy's own lookups are linear scans)."""

    def __init__(self, policy: Policy) -> None:
        self.nodes = {n.name: n for n in policy.nodes}
        self.jobs = {j.name: j for j in policy.jobs}
        self.services = {s.name: s for s in policy.services}
        self.zone_nodes: dict[str, list[str]] = {z.name: [] for z in policy.zones}
        self.identity_nodes: dict[str, list[str]] = {}
        for n in policy.nodes:
            self.zone_nodes.setdefault(n.zone, []).append(n.name)
            if n.identity:
                self.identity_nodes.setdefault(n.identity, []).append(n.name)
        for j in policy.jobs:
            # a job's identity names its ranks: the workload identity the job runs as
            self.identity_nodes.setdefault(j.identity, []).extend(j.members)

    def selector(self, ep: Endpoint, where: str) -> Selector:
        kind = next(k for k in ("zone", "node", "job", "service", "identity", "cidr") if getattr(ep, k))
        name = str(getattr(ep, kind))
        nodes: list[str]
        if kind == "zone":
            if name not in self.zone_nodes:
                raise MatrixError(f"{where}: unknown zone {name!r}")
            nodes = self.zone_nodes[name]
        elif kind == "node":
            if name not in self.nodes:
                raise MatrixError(f"{where}: unknown node {name!r}")
            nodes = [name]
        elif kind == "job":
            if name not in self.jobs:
                raise MatrixError(f"{where}: unknown job {name!r}")
            nodes = list(self.jobs[name].members)
        elif kind == "service":
            if name not in self.services:
                raise MatrixError(f"{where}: unknown service {name!r}")
            nodes = [self.services[name].node]
        elif kind == "identity":
            if name not in self.identity_nodes:
                raise MatrixError(f"{where}: no node or job has identity {name!r}")
            nodes = self.identity_nodes[name]
        else:
            net = ipaddress.ip_network(name, strict=False)
            return Selector("cidr", str(net), (), (), (str(net),))
        unknown = [n for n in nodes if n not in self.nodes]
        if unknown:
            raise MatrixError(f"{where}: {kind} {name!r} names unknown node(s) {', '.join(unknown)}")
        ordered = tuple(dict.fromkeys(nodes))
        addrs = tuple(dict.fromkeys(a for n in ordered for a in self.nodes[n].addresses))
        return Selector(kind, name, ordered, addrs)

    def ports(self, flow: ApprovedFlow) -> tuple[int, int]:
        if flow.port_range is not None:
            return flow.port_range
        if flow.destination.service is not None:
            return self.services[flow.destination.service].port_range
        return ALL_PORTS  # only proto "any" gets here (the policy loader demands ports otherwise)


def resolve(policy: Policy) -> Matrix:
    """Resolve every approved flow of ``policy``; :class:`MatrixError` on a dangling reference."""
    idx = _Index(policy)
    flows = []
    for i, f in enumerate(policy.approved):
        where = f"approved[{i}] ({f.id})"
        src = idx.selector(f.source, f"{where}.from")
        dst = idx.selector(f.destination, f"{where}.to")
        proto = f.proto
        if f.destination.service is not None and f.proto == "tcp" and f.ports is None:
            proto = idx.services[f.destination.service].proto  # a UDP service approved without ports
        flows.append(ResolvedFlow(f.id, f.traffic_class.value, proto, idx.ports(f), src, dst, f.description))
    return Matrix(
        cluster=policy.cluster,
        flows=tuple(flows),
        node_zone={n.name: n.zone for n in policy.nodes},
        node_addresses={n.name: n.addresses for n in policy.nodes},
        zone_nodes={z: tuple(ns) for z, ns in idx.zone_nodes.items()},
        external_zones=frozenset(z.name for z in policy.zones if z.trust is Trust.EXTERNAL),
    )


__all__ = ["ALL_PORTS", "Matrix", "MatrixError", "ResolvedFlow", "Selector", "resolve"]
