"""What the two Kubernetes renderers share: pod labels, selectors, names, port lists and the output file.

Pods carry ``ringfence.io/zone``, ``ringfence.io/job`` and ``ringfence.io/node`` labels (the policy's
own names). A selector that names only nodes outside the trust boundary (or a CIDR) is not a pod: it
becomes an IP block, because those hosts are not in the cluster.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ringfence.enforce.interface import RenderedFile, RenderResult, Unsupported, dump_json
from ringfence.policy.matrix import Matrix, ResolvedFlow, Selector

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


@dataclass(frozen=True)
class FlowSide:
    """One policy object an approved flow needs: ``direction`` on the pods of ``selector``, allowing ``other``."""

    direction: str  # "ingress" (on the destination's pods) or "egress" (on the source's pods)
    name: str
    selector: dict[str, Any]
    other: Peer
    labels: dict[str, str]


def flow_sides(matrix: Matrix, flow: ResolvedFlow) -> list[FlowSide]:
    """Ingress on the destination and egress on the source, each only where that side is pods (not IP blocks)."""
    src, dst = peer(matrix, flow.source), peer(matrix, flow.destination)
    labels = {LABEL_FLOW: object_name(flow.id)}
    sides = []
    if dst.labels is not None:
        sides.append(FlowSide("ingress", object_name("rf", flow.id, "ingress"), dst.labels, src, labels))
    if src.labels is not None:
        sides.append(FlowSide("egress", object_name("rf", flow.id, "egress"), src.labels, dst, labels))
    return sides


def object_metadata(name: str, namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    """``metadata`` of a rendered object: its name, namespace and labels, marked as managed by ringfence."""
    return {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/managed-by": "ringfence", **labels}}


def list_result(target: str, filename: str, items: list[dict[str, Any]], notes: list[Unsupported],
                flows: int) -> RenderResult:
    """``items`` as a ``v1 List`` in ``filename`` (for ``kubectl apply -f``), with the object and flow counts."""
    doc = {"apiVersion": "v1", "kind": "List", "items": items}
    return RenderResult(target, (RenderedFile(filename, dump_json(doc)),), tuple(notes),
                        {"objects": len(items), "flows": flows})


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
    "FlowSide",
    "Peer",
    "flow_sides",
    "internal_zones",
    "k8s_ports",
    "list_result",
    "object_metadata",
    "object_name",
    "peer",
]
