"""The policy's egress gateway: which node it is, where clients ask it, whom it admits and where it may forward.

*How a policy says "egress goes through gateway G".* A node with the role :data:`ROLE` (``egress-gateway``) runs
the gateway; its service whose ``application`` is :data:`APPLICATION` (``http-proxy``) is where clients ask it.
An approved flow *to that service* makes its source nodes **clients**; an approved flow *from the gateway node*
to a node in an external zone makes that node's addresses and the flow's ports **destinations**. Read from the
policy alone, so the renderer (:mod:`ringfence.enforce.egress_gateway`), the drills and the egress control agree.

*Fails closed.* A policy that gives the gateway no client or no destination is an error (:class:`GatewayError`):
rendered, it would be an open proxy.
"""

from __future__ import annotations

from dataclasses import dataclass

from ringfence.errors import RingfenceError
from ringfence.policy.matrix import resolve
from ringfence.policy.model import Policy

#: the node role that marks the site's egress gateway
ROLE = "egress-gateway"
#: the ``application`` of the gateway's proxy service
APPLICATION = "http-proxy"
class GatewayError(RingfenceError):
    """The gateway's configuration cannot be rendered from this policy (and no open proxy is ever rendered)."""


@dataclass(frozen=True)
class Gateway:
    """The egress gateway the policy names, with what it may do."""

    node: str
    address: str  # where it listens
    port: int
    service: str
    clients: tuple[tuple[str, str], ...]  # (node, address) admitted to ask it
    destinations: tuple[tuple[str, str], ...]  # (node, address) it may forward to
    ports: tuple[int, ...]  # destination ports it may forward/tunnel to

    def client_node(self, address: str) -> str | None:
        """The inventory name of an admitted client at ``address``."""
        return next((n for n, a in self.clients if a == address), None)


def find_gateway(policy: Policy) -> Gateway | None:
    """The policy's egress gateway (None when it names none); :class:`GatewayError` when it names one badly."""
    nodes = [n for n in policy.nodes if ROLE in n.roles]
    if not nodes:
        return None
    if len(nodes) > 1:
        raise GatewayError(f"policy {policy.cluster} names {len(nodes)} egress gateways "
                           f"({', '.join(n.name for n in nodes)}); the lab and this renderer support one")
    gw = nodes[0]
    services = [s for s in policy.services if s.node == gw.name and s.application == APPLICATION]
    if len(services) != 1 or services[0].proto != "tcp" or services[0].port_range[0] != services[0].port_range[1]:
        raise GatewayError(f"egress gateway {gw.name} needs exactly one TCP service on one port with application "
                           f"{APPLICATION!r} (found {len(services)})")
    svc = services[0]
    m = resolve(policy)
    port = svc.port_range[0]
    clients: dict[str, str] = {}
    for f in m.flows:
        lo, hi = f.ports
        if "tcp" in f.protos and lo <= port <= hi and gw.name in f.destination.nodes:
            for n in f.source.nodes:
                if n != gw.name:
                    clients.setdefault(n, m.node_addresses[n][0])
            if f.source.cidrs:
                raise GatewayError(f"approved flow {f.id} admits a CIDR to the egress gateway: tinyproxy would "
                                   "admit addresses the inventory cannot name; approve nodes, zones or jobs")
    dests: dict[str, str] = {}
    ports: set[int] = set()
    for f in m.flows_from(gw.name):
        ext = [n for n in f.destination.nodes if m.node_zone.get(n) in m.external_zones]
        if not ext or "tcp" not in f.protos:
            continue
        lo, hi = f.ports
        if hi - lo > 64:
            raise GatewayError(f"approved flow {f.id} gives the gateway {lo}-{hi}: list the destination ports")
        ports.update(range(lo, hi + 1))
        for n in ext:
            dests.setdefault(n, m.node_addresses[n][0])
    if not clients:
        raise GatewayError(f"no approved flow admits any client to the egress gateway {gw.name} ({svc.name}): "
                           "tinyproxy without an Allow line serves everyone", hint=f"approve a flow to {svc.name}")
    if not dests or not ports:
        raise GatewayError(f"no approved flow lets the egress gateway {gw.name} reach a destination outside the "
                           "trust boundary: tinyproxy without ConnectPort tunnels to every port",
                           hint=f"approve a flow from node {gw.name} to the external service")
    return Gateway(gw.name, gw.addresses[0], port, svc.name, tuple(sorted(clients.items())),
                   tuple(sorted(dests.items())), tuple(sorted(ports)))


__all__ = ["APPLICATION", "ROLE", "Gateway", "GatewayError", "find_gateway"]
