"""Control point ``egress``: traffic leaves the trust boundary only along approved paths."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ringfence.controls._common import who
from ringfence.controls._drills import drill_failures
from ringfence.controls._flows import judge_paths, path_requirements
from ringfence.controls.interface import ControlMeta, Facts, Finding
from ringfence.policy import Policy

meta = ControlMeta(
    id="egress",
    title="Egress across the trust boundary",
    objective="Only approved flows (checkpoint replication to the off-site replica) leave the cluster; "
    "workloads cannot reach external or unknown destinations.",
    acceptance="Permitted: storage replicates a checkpoint to the external replica. Denied: a workload "
    "connecting to an external address times out or is reset by policy.",
    facts=("flows", "probes", "drills"),
    remediation={
        "nftables": "default-drop egress; accept only approved destination sets and ports, log the rest",
        "networkpolicy": "egress policies per namespace: only the approved external CIDRs and ports",
        "cilium": "CiliumNetworkPolicy egress with toCIDRSet/toFQDNs for the approved destinations only",
        "process": "route egress through an inspected gateway; approve each destination with an owner",
    },
    requirements=path_requirements(
        'storage replicates a checkpoint to the external replica along an approved egress flow',
        'a workload connecting to an external address times out or is reset by policy',
        'destinations outside the trust boundary',
    ),
)


def _message(row: Mapping[str, Any]) -> str:
    if row.get("dst_node"):
        target = f"external zone {row.get('dst_zone')} ({who(row, 'dst')})"
    else:
        target = f"{who(row, 'dst')}"
    return f"{who(row, 'src')} sent traffic to {target} without an approved egress flow"


def evaluate(policy: Policy, facts: Facts) -> list[Finding]:
    """Unapproved traffic to external zones or unknown addresses fails; approved egress passes; an
    exfiltration drill that got data out fails, naming the node."""
    found = judge_paths(meta, policy, facts, "destinations outside the trust boundary", _message)
    return found + drill_failures(meta, facts)
