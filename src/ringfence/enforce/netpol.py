"""Kubernetes NetworkPolicy renderer (``networking.k8s.io/v1``): the same matrix as nftables, for pods.

Per internal zone a default deny (ingress and egress); per approved flow an ingress policy on the
destination pods and an egress policy on the source pods. Everything plain NetworkPolicy cannot say
is reported: encryption requirements, deny logging and counters, an audit (staged) mode, protocols
other than TCP/UDP for ``proto: any``.
"""

from __future__ import annotations

from typing import Any

from ringfence.enforce.interface import DEFAULT_OPTIONS, RenderOptions, RenderResult, Unsupported, encryption_notes
from ringfence.enforce.k8s import (
    LABEL_ZONE,
    Peer,
    flow_sides,
    internal_zones,
    k8s_ports,
    list_result,
    object_metadata,
    object_name,
)
from ringfence.policy import Policy
from ringfence.policy.matrix import Matrix, ResolvedFlow, resolve

TARGET = "networkpolicy"


def _peers(p: Peer) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if p.labels is not None:
        # namespaceSelector {} with the pod selector: the peer may live in any namespace
        out.append({"namespaceSelector": {}, "podSelector": p.labels})
    out += [{"ipBlock": {"cidr": c}} for c in p.cidrs]
    return out


def _policy(name: str, namespace: str, selector: dict[str, Any], kind: str, rules: list[dict[str, Any]],
            labels: dict[str, str]) -> dict[str, Any]:
    spec: dict[str, Any] = {"podSelector": selector, "policyTypes": [kind], kind.lower(): rules}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": object_metadata(name, namespace, labels),
        "spec": spec,
    }


def _flow_policies(matrix: Matrix, flow: ResolvedFlow, namespace: str) -> list[dict[str, Any]]:
    ports = k8s_ports(flow)
    return [
        _policy(side.name, namespace, side.selector, side.direction.capitalize(),
                [{"from" if side.direction == "ingress" else "to": _peers(side.other), "ports": ports}], side.labels)
        for side in flow_sides(matrix, flow)
    ]


class NetworkPolicyRenderer:
    """``networkpolicy.json``: a ``v1 List`` of NetworkPolicy objects for ``kubectl apply -f``."""

    name = TARGET

    def __init__(self, namespace: str = "default") -> None:
        self.namespace = namespace

    def render(self, policy: Policy, options: RenderOptions = DEFAULT_OPTIONS) -> RenderResult:
        """Render the matrix, and list what NetworkPolicy cannot express."""
        matrix = resolve(policy)
        notes = encryption_notes(TARGET, policy)
        notes.append(Unsupported(TARGET, "denials", "NetworkPolicy has no deny logging or drop counters",
                                 "take denial evidence from the CNI's flow logs (e.g. Hubble POLICY_DENIED)"))
        notes += [Unsupported(TARGET, f"flow:{f.id}", "proto any is rendered as TCP and UDP; other protocols "
                              "(ICMP, SCTP) stay denied", "approve other protocols as separate flows")
                  for f in matrix.flows if f.proto == "any"]
        if options.audit:
            notes.append(Unsupported(TARGET, "option:audit", "NetworkPolicy has no audit (log-but-accept) mode, "
                                     "so nothing was rendered: applying these objects would enforce",
                                     "stage with nftables --audit or Cilium's policy audit mode"))
            return RenderResult(TARGET, (), tuple(notes), {"objects": 0, "flows": len(matrix.flows)})
        items = [
            _policy(object_name("rf-default-deny", zone), self.namespace, {"matchLabels": {LABEL_ZONE: zone}},
                    "Ingress", [], {})
            for zone in internal_zones(matrix)
        ]
        for it in items:  # default deny in both directions for the zone's pods
            it["spec"]["policyTypes"] = ["Ingress", "Egress"]
            it["spec"]["egress"] = []
        for f in matrix.flows:
            items += _flow_policies(matrix, f, self.namespace)
        return list_result(TARGET, "networkpolicy.json", items, notes, len(matrix.flows))


__all__ = ["NetworkPolicyRenderer"]
