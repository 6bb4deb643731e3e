"""The iproute2 boundary: namespaces, bridges, veths, addresses. OS and ``ip`` failures become :class:`LabError`.

Links are created *directly* inside their namespaces (``ip -n FABRIC link add PORT type veth peer
name IF netns NODE``), so nothing ever appears in the host's own namespace, and deleting a lab's
namespaces removes every one of its links with them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from ringfence.errors import EnvironmentProblem
from ringfence.lab.topology import LabError, Topology

NETNS_DIR = Path("/run/netns")


def require_privileges() -> None:
    """Fail with a clear message unless we are root and iproute2 is installed."""
    missing = [tool for tool in ("ip", "tcpdump", "mergecap", "ssh", "ssh-keygen") if shutil.which(tool) is None]
    if not Path("/usr/sbin/sshd").exists():
        missing.append("/usr/sbin/sshd")
    if os.geteuid() != 0 or missing:
        why = "not running as root" if os.geteuid() != 0 else f"missing {', '.join(missing)}"
        raise EnvironmentProblem(
            f"the lab needs root and iproute2 (network namespaces, veth, bridges): {why}",
            hint="run as root on Linux with iproute2, tcpdump, tshark (mergecap) and openssh-server/client installed",
        )


def _run(argv: Sequence[str], *, stdin: str | None = None, timeout: float = 30.0) -> str:
    try:
        proc = subprocess.run(list(argv), input=stdin, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LabError(f"cannot run {' '.join(argv)}: {exc}") from exc
    if proc.returncode != 0:
        raise LabError(f"{' '.join(argv[:6])}{' …' if len(argv) > 6 else ''} failed: {proc.stderr.strip()}")
    return proc.stdout


def ip(*args: str, namespace: str | None = None) -> str:
    """Run ``ip [-n NS] ARGS``; its stdout."""
    return _run(["ip", *(["-n", namespace] if namespace else []), *args])


def ip_batch(commands: Sequence[str], *, namespace: str | None = None) -> None:
    """Run many ``ip`` commands in one process (``ip -batch -``), all inside ``namespace``."""
    if commands:
        _run(["ip", *(["-n", namespace] if namespace else []), "-batch", "-"], stdin="\n".join(commands) + "\n")


def netns_exec(namespace: str, argv: Sequence[str], *, timeout: float = 30.0) -> str:
    """Run a short command inside ``namespace``; its stdout."""
    return _run(["ip", "netns", "exec", namespace, *argv], timeout=timeout)


def list_namespaces() -> set[str]:
    """Names of every named network namespace on the host."""
    out = _run(["ip", "netns", "list"])
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def add_namespace(name: str) -> None:
    """Create a namespace with loopback up and IPv6 off (so captures hold no router solicitations)."""
    ip("netns", "add", name)
    netns_exec(name, ["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"])
    ip("link", "set", "lo", "up", namespace=name)


def delete_namespace(name: str) -> bool:
    """Delete a namespace (and with it every link inside); False if it was already gone."""
    if not (NETNS_DIR / name).exists():
        return False
    try:
        ip("netns", "delete", name)
    except LabError:
        if (NETNS_DIR / name).exists():
            raise
        return False
    return True


def namespace_pids(name: str) -> set[int]:
    """Pids of processes inside ``namespace`` (empty if the namespace is gone)."""
    if not (NETNS_DIR / name).exists():
        return set()
    try:
        out = _run(["ip", "netns", "pids", name])
    except LabError:
        return set()
    return {int(x) for x in out.split()}


def link_names(namespace: str | None = None) -> set[str]:
    """Names of the links in ``namespace`` (``None``: the host's own namespace)."""
    out = ip("-o", "link", "show", namespace=namespace)
    names = set()
    for line in out.splitlines():
        parts = line.split(":", 2)
        if len(parts) >= 2:
            names.add(parts[1].strip().split("@", 1)[0])
    return names


def build_fabric(topo: Topology) -> None:
    """Bridges with the zone gateways, forwarding on, one veth per node into its namespace and bridge.

    Expects every namespace to exist already.
    """
    fabric = topo.fabric_namespace
    netns_exec(fabric, ["sysctl", "-qw", "net.ipv4.ip_forward=1"])
    cmds: list[str] = []
    for z in topo.zones:
        br = topo.bridge(z.name)
        cmds += [f"link add {br} type bridge", f"address add {z.gateway()}/24 dev {br}", f"link set {br} up"]
    for n in topo.nodes:
        port, ifname = topo.port(n.name), topo.interface(n.name)
        cmds += [
            f"link add {port} type veth peer name {ifname} netns {topo.namespace(n.name)}",
            f"link set {port} master {topo.bridge(n.zone)} up",
        ]
    ip_batch(cmds, namespace=fabric)
    for n in topo.nodes:
        ifname, zone = topo.interface(n.name), topo.zone(n.zone)
        ip_batch(
            [f"address add {n.address}/24 dev {ifname}", f"link set {ifname} up",
             f"route add default via {zone.gateway()}"],
            namespace=topo.namespace(n.name),
        )


__all__ = [
    "NETNS_DIR",
    "add_namespace",
    "build_fabric",
    "delete_namespace",
    "ip",
    "ip_batch",
    "link_names",
    "list_namespaces",
    "namespace_pids",
    "netns_exec",
    "require_privileges",
]
