"""The egress gateway's rules, rendered from the policy: a tinyproxy forward proxy that admits only approved clients
and forwards only to approved destinations beyond the trust boundary.

*How a policy says "egress goes through gateway G".* A node with the role :data:`ROLE` (``egress-gateway``) runs
the gateway; its service whose ``application`` is :data:`APPLICATION` (``http-proxy``) is where clients ask it.
Then

* an approved flow *to that service* makes its source nodes **clients** of the gateway (tinyproxy ``Allow``);
* an approved flow *from the gateway node* to a node in an external zone makes that node's addresses and the
  flow's ports **destinations** (tinyproxy ``Filter`` with ``FilterDefaultDeny Yes``, and ``ConnectPort``).

tinyproxy's filter is per destination, not per (client, destination): every admitted client may reach every
approved destination through it. The fabric's own rules (node → gateway, gateway → destination) are rendered
from the same approved flows by the nftables renderer, so the two layers agree.

*Fails closed.* tinyproxy without any ``Allow`` line serves every client, and without any ``ConnectPort`` line
tunnels to every port: a policy that gives the gateway no client or no destination is an error here
(:class:`GatewayError`), never an open proxy.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from ringfence.enforce.interface import EnforceError
from ringfence.enforce.matrix import resolve
from ringfence.policy import Policy

#: the node role that marks the site's egress gateway
ROLE = "egress-gateway"
#: the ``application`` of the gateway's proxy service
APPLICATION = "http-proxy"
#: the tinyproxy log's file name in the gateway's telemetry directory (beside ulogd.json, conntrack.log)
LOG_FILE = "tinyproxy.log"
#: tinyproxy's own binary (Debian ``tinyproxy-bin``)
TINYPROXY = "/usr/bin/tinyproxy"
_SAFE_PATH = re.compile(r"^/[A-Za-z0-9_./-]{1,400}$")


class GatewayError(EnforceError):
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


def _path(p: str) -> str:
    if not _SAFE_PATH.match(p):  # a quote or newline in a path would end the directive and start another
        raise GatewayError(f"unsafe path for the gateway's configuration: {p!r}")
    return p


def filter_text(gw: Gateway) -> str:
    """The ``Filter`` file: one anchored extended regex per approved destination address (hosts, not URLs)."""
    return "".join(f"^{re.escape(str(ipaddress.ip_address(a)))}$\n" for _, a in gw.destinations)


def tinyproxy_config(gw: Gateway, *, log: str, pidfile: str, filter_file: str, timeout: int = 30,
                     max_clients: int = 64) -> str:
    """tinyproxy.conf for ``gw`` (1.11 syntax). ``LogLevel Info``: the client address (``Connect``), the request
    (``Request``: method and destination), the decision (``Unauthorized connection``, ``Proxying refused on
    filtered domain``, ``Refused CONNECT method on port``, ``Established connection to host``) and the end are
    all logged; tinyproxy logs no byte counts (the volume comes from the site's capture)."""
    if not gw.clients or not gw.destinations or not gw.ports:
        raise GatewayError(f"egress gateway {gw.node}: no client, destination or port to render (never an open "
                           "proxy)")
    lines = [
        f"# egress gateway {gw.node} ({gw.address}:{gw.port}), rendered by ringfence from the policy: only the",
        "# approved clients (Allow) may ask it, only for the approved destinations (Filter) and ports (ConnectPort).",
        f"Port {gw.port}",
        f"Listen {ipaddress.ip_address(gw.address)}",
        f"Timeout {int(timeout)}",
        f'LogFile "{_path(log)}"',
        "LogLevel Info",
        f'PidFile "{_path(pidfile)}"',
        f"MaxClients {int(max_clients)}",
        "DisableViaHeader Yes",
        f'Filter "{_path(filter_file)}"',
        "FilterType ere",
        "FilterURLs No",
        "FilterDefaultDeny Yes",
    ]
    lines += [f"# client {n}\nAllow {ipaddress.ip_address(a)}" for n, a in gw.clients]
    lines += [f"ConnectPort {int(p)}" for p in gw.ports]
    return "\n".join(lines) + "\n"


def tinyproxy_argv(config: str) -> list[str]:
    """tinyproxy in the foreground (the caller supervises it and holds its pid)."""
    return [TINYPROXY, "-d", "-c", _path(config)]


__all__ = ["APPLICATION", "LOG_FILE", "ROLE", "TINYPROXY", "Gateway", "GatewayError", "filter_text", "find_gateway",
           "tinyproxy_argv", "tinyproxy_config"]
