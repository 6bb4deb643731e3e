"""The lab's telemetry daemons: one ulogd2 and one ``conntrack -E`` per namespace, dnsmasq in mgmt.

Every node's namespace resolves the lab's names (``NODE.PREFIX.lab``) through dnsmasq in the
management zone: ``/etc/netns/NS/resolv.conf``, which ``ip netns exec`` bind-mounts over
``/etc/resolv.conf`` for every process started there. Those files carry the lab's prefix and are
removed by ``lab down`` (:func:`remove_resolvers`). Logs go to ``<lab>/telemetry/<point>/``
(:data:`ringfence.observe.flows.events.deploy.FILES`), where ``ringfence trace`` collects them.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable
from pathlib import Path

from ringfence.lab.topology import Topology
from ringfence.observe.flows.events import deploy

NETNS_ETC = Path("/etc/netns")
DNS_NODE = "mgmt"

Spawn = Callable[[str, str, list[str]], int]  # (point, label, argv) → pid


def domain(topo: Topology) -> str:
    """The lab's DNS domain."""
    return f"{topo.prefix}.lab"


def dns_name(topo: Topology, node: str) -> str:
    """The name the lab's resolver answers for ``node``."""
    return f"{node}.{domain(topo)}"


def point_dir(base: Path, point: str) -> Path:
    """Where one enforcement point (a node or ``fabric``) keeps its telemetry."""
    return base / point


def start(topo: Topology, base: Path, spawn: Spawn) -> list[int]:
    """Write the resolver files and configs, start every daemon; returns their pids."""
    pids: list[int] = []
    hosts = base / "hosts"
    base.mkdir(parents=True, exist_ok=True, mode=0o700)
    hosts.write_text("".join(f"{topo.address(n)} {dns_name(topo, n)}\n" for n in topo.node_names()))
    for node in topo.node_names():
        etc = NETNS_ETC / topo.namespace(node)
        etc.mkdir(parents=True, exist_ok=True)
        # one try, one second: a node whose DNS is cut by policy falls back at once, and says so
        (etc / "resolv.conf").write_text(f"nameserver {topo.address(DNS_NODE)}\noptions timeout:1 attempts:1\n")
    for point in ("fabric", *topo.node_names()):
        d = point_dir(base, point)
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
        conf = d / "ulogd.conf"
        conf.write_text(deploy.ulogd_config(point, str(d)))
        pids.append(spawn(point, f"{point}-ulogd", deploy.ulogd_argv(str(conf), str(d / "ulogd.pid"))))
        pids.append(spawn(point, f"{point}-conntrack", deploy.conntrack_argv(str(d))))
    d = point_dir(base, DNS_NODE)
    pids.append(spawn(DNS_NODE, f"{DNS_NODE}-dnsmasq",
                      deploy.dnsmasq_argv(str(d), topo.address(DNS_NODE), str(hosts), domain(topo))))
    return pids


def remove_resolvers(namespaces: Iterable[str]) -> None:
    """Remove ``/etc/netns/NS`` of each of the lab's namespaces (only those: each name carries its prefix)."""
    for ns in namespaces:
        shutil.rmtree(NETNS_ETC / ns, ignore_errors=True)


__all__ = ["DNS_NODE", "NETNS_ETC", "dns_name", "domain", "point_dir", "remove_resolvers", "start"]
