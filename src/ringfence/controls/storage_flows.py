"""Control point ``storage_flows``: only approved workloads read datasets and write checkpoints."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ringfence.controls._common import who
from ringfence.controls._drills import drill_failures
from ringfence.controls._flows import judge_paths, path_requirements
from ringfence.controls.interface import ControlMeta, Facts, Finding
from ringfence.policy import Policy

meta = ControlMeta(
    id="storage_flows",
    title="Dataset and checkpoint (storage) flows",
    objective="Storage services are reached only by the jobs approved to read their datasets and write "
    "their checkpoints.",
    acceptance="Permitted: a training rank reads a dataset shard from storage. Denied: a non-member "
    "(e.g. the auxiliary pod) reading datasets times out or is reset by policy.",
    facts=("flows", "probes", "drills"),
    remediation={
        "nftables": "on the storage node: accept the storage port only from the approved jobs' address sets",
        "networkpolicy": "ingress to storage pods only from pods labelled with the approved job",
        "cilium": "CiliumNetworkPolicy on storage endpoints: fromEndpoints matching the job identity",
        "process": "grant dataset access per job in `approved:`; revoke credentials of unapproved readers",
    },
    requirements=path_requirements(
        'a training rank reads a dataset shard from storage',
        'a non-member reading datasets times out or is reset by policy',
        'storage services',
    ),
)


def _message(row: Mapping[str, Any]) -> str:
    service = row.get("service") or "a storage service"
    return f"{who(row, 'src')} reached {service} ({who(row, 'dst')}) without an approved storage flow"


def evaluate(policy: Policy, facts: Facts) -> list[Finding]:
    """Unapproved access to storage services fails; approved dataset/checkpoint flows pass."""
    return judge_paths(meta, policy, facts, "storage services", _message) + drill_failures(meta, facts)
