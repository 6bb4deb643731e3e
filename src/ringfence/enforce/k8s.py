"""What the two Kubernetes renderers share: pod labels, selectors, names and port lists.

Pods carry ``ringfence.io/zone``, ``ringfence.io/job`` and ``ringfence.io/node`` labels (the policy's
own names). A selector that names only nodes outside the trust boundary (or a CIDR) is not a pod: it
becomes an IP block, because those hosts are not in the cluster.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ringfence.enforce.matrix import Matrix, ResolvedFlow, Selector

LABEL_ZONE = "ringfence.io/zone"
LABEL_JOB = "ringfence.io/job"
LABEL_NODE = "ringfence.io/node"
LABEL_FLOW = "ringfence.io/flow"
_DNS_UNSAFE = re.compile(r"[^a-z0-9.-]")


@dataclass(frozen=True)
class Peer:
    """A selector as Kubernetes sees it: a label selector of pods, or IP blocks (``cidrs``)."""

    labels: dict[str, Any] | None  # {"matchLabels": …} or {"matchExpressions": …}
    cidrs: tuple[str, ...]


def object_name(*parts: str) -> str:
    """A DNS-1123 name (lower case, '-' for anything else, at most 253 characters)."""
    name = _DNS_UNSAFE.sub("-", "-".join(parts).lower()).strip("-.")
    return name[:253].rstrip("-.")


def peer(matrix: Matrix, sel: Selector) -> Peer:
    """The pods (or IP blocks) ``sel`` covers."""
    if sel.kind == "cidr":
        return Peer(None, sel.cidrs)
    external = [n for n in sel.nodes if matrix.node_zone[n] in matrix.external_zones]
    if external and len(external) == len(sel.nodes):
        return Peer(None, tuple(f"{a}/32" for n in sel.nodes for a in matrix.node_addresses[n]))
    if sel.kind == "zone":
        return Peer({"matchLabels": {LABEL_ZONE: sel.name}}, ())
    if sel.kind == "job":
        return Peer({"matchLabels": {LABEL_JOB: sel.name}}, ())
    internal = [n for n in sel.nodes if n not in external]
    if len(internal) == 1:
        labels: dict[str, Any] = {"matchLabels": {LABEL_NODE: internal[0]}}
    else:
        labels = {"matchExpressions": [{"key": LABEL_NODE, "operator": "In", "values": sorted(internal)}]}
    return Peer(labels, tuple(f"{a}/32" for n in external for a in matrix.node_addresses[n]))


def internal_zones(matrix: Matrix) -> tuple[str, ...]:
    """Zones inside the trust boundary that hold nodes: the ones that get a default deny."""
    return tuple(z for z, nodes in matrix.zone_nodes.items() if nodes and z not in matrix.external_zones)


def k8s_ports(flow: ResolvedFlow, port_key: str = "port", *, as_string: bool = False) -> list[dict[str, Any]]:
    """Port entries (``protocol``, ``port``, ``endPort`` for a range) for each protocol of ``flow``."""
    lo, hi = flow.ports
    out: list[dict[str, Any]] = []
    for proto in flow.protos:
        entry: dict[str, Any] = {"protocol": proto.upper(), port_key: str(lo) if as_string else lo}
        if hi != lo:
            entry["endPort"] = hi
        out.append(entry)
    return out


__all__ = [
    "LABEL_FLOW",
    "LABEL_JOB",
    "LABEL_NODE",
    "LABEL_ZONE",
    "Peer",
    "internal_zones",
    "k8s_ports",
    "object_name",
    "peer",
]
