"""CiliumNetworkPolicy renderer (``cilium.io/v2``): the same matrix, enforced by Cilium's identities.

Per internal zone a default deny (``enableDefaultDeny`` both ways, empty rule lists); per approved
flow an ingress policy on the destination and an egress policy on the source, each tagged with a
Hubble ``log`` value naming the flow. Denials show in Hubble as ``POLICY_DENIED``. Reported as
unsupported: per-class encryption (Cilium encrypts cluster-wide, not per policy) and audit mode
(Cilium's policy audit mode is an agent/endpoint setting, not part of a policy object).
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

TARGET = "cilium"
_LOG_MAX = 32  # Hubble's limit on a policy's log value


def _peer_rule(p: Peer, direction: str) -> dict[str, Any]:
    rule: dict[str, Any] = {}
    if p.labels is not None:
        rule["fromEndpoints" if direction == "ingress" else "toEndpoints"] = [p.labels]
    if p.cidrs:
        rule["fromCIDR" if direction == "ingress" else "toCIDR"] = list(p.cidrs)
    return rule


def _cnp(name: str, namespace: str, selector: dict[str, Any], spec: dict[str, Any],
         labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "cilium.io/v2",
        "kind": "CiliumNetworkPolicy",
        "metadata": object_metadata(name, namespace, labels),
        "spec": {"endpointSelector": selector, **spec},
    }


def _flow_policies(matrix: Matrix, flow: ResolvedFlow, namespace: str) -> list[dict[str, Any]]:
    to_ports = [{"ports": k8s_ports(flow, as_string=True)}]
    log = {"value": f"rf:{flow.id}"[:_LOG_MAX]}
    return [
        _cnp(side.name, namespace, side.selector,
             {side.direction: [{**_peer_rule(side.other, side.direction), "toPorts": to_ports}], "log": log,
              "description": f"ringfence approved flow {flow.id} ({flow.traffic_class})"}, side.labels)
        for side in flow_sides(matrix, flow)
    ]


class CiliumRenderer:
    """``ciliumnetworkpolicy.json``: a ``v1 List`` of CiliumNetworkPolicy objects."""

    name = TARGET

    def __init__(self, namespace: str = "default") -> None:
        self.namespace = namespace

    def render(self, policy: Policy, options: RenderOptions = DEFAULT_OPTIONS) -> RenderResult:
        """Render the matrix, and list what a CiliumNetworkPolicy cannot express."""
        matrix = resolve(policy)
        notes = [
            Unsupported(TARGET, n.subject, n.reason,
                        "enable Cilium transparent encryption cluster-wide (encryption.enabled=true, "
                        "encryption.type=wireguard or ipsec) and verify it with captures")
            for n in encryption_notes(TARGET, policy)
        ]
        if options.audit:
            notes.append(Unsupported(TARGET, "option:audit", "audit mode is not part of a CiliumNetworkPolicy; "
                                     "these objects enforce unless the agent runs in policy audit mode",
                                     "set policyAuditMode=true on the Cilium agent before applying"))
        items = [
            _cnp(object_name("rf-default-deny", zone), self.namespace, {"matchLabels": {LABEL_ZONE: zone}},
                 {"enableDefaultDeny": {"ingress": True, "egress": True}, "ingress": [], "egress": [],
                  "description": f"ringfence default deny for zone {zone}"}, {})
            for zone in internal_zones(matrix)
        ]
        for f in matrix.flows:
            items += _flow_policies(matrix, f, self.namespace)
        return list_result(TARGET, "ciliumnetworkpolicy.json", items, notes, len(matrix.flows))


__all__ = ["CiliumRenderer"]
