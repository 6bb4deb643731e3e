"""Control point ``admin_paths``: administrative services are reachable only along approved paths."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ringfence.controls._common import who
from ringfence.controls._drills import drill_failures
from ringfence.controls._flows import judge_paths, path_requirements
from ringfence.controls.interface import ControlMeta, Facts, Finding
from ringfence.policy import Policy

meta = ControlMeta(
    id="admin_paths",
    title="Administrative paths (sshd, BMC, consoles)",
    objective="Administrative services accept connections only from the approved administration path "
    "(jump host), never from workloads or user networks.",
    acceptance="Permitted: the jump host reaches sshd. Denied: a workload (e.g. the auxiliary pod) "
    "connecting to sshd times out or is reset by policy.",
    facts=("flows", "probes", "drills"),
    remediation={
        "nftables": "on the admin node: accept tcp dport 22 only from the jump host's address set, drop the rest",
        "networkpolicy": "ingress to the admin pods only from the jump host's namespace/pod selector",
        "cilium": "CiliumNetworkPolicy ingress to admin endpoints fromEndpoints: the jump host only",
        "process": "administration through the jump host only; remove keys and routes that allow other paths",
    },
    requirements=path_requirements(
        'the jump host reaches sshd along the approved administration path',
        'a workload connecting to an administrative service times out or is reset by policy',
        'administrative services',
    ),
)


def evaluate(policy: Policy, facts: Facts) -> list[Finding]:
    """Unapproved flows to administrative services fail (workload sources named); approved pass."""
    job_nodes = {m for j in policy.jobs for m in j.members}
    workload = frozenset(n.zone for n in policy.nodes if n.name in job_nodes)

    def message(row: Mapping[str, Any]) -> str:
        service = row.get("service") or "an administrative service"
        source = who(row, "src")
        if row.get("src_job") or row.get("src_zone") in workload:
            return f"administrative access to {service} from a workload: {source} — not an approved path"
        return f"administrative access to {service} from {source} is not an approved path"

    return judge_paths(meta, policy, facts, "administrative services", message) + drill_failures(meta, facts)
