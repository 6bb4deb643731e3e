"""Control point ``storage_flows``: only approved workloads read datasets and write checkpoints.

Besides the flows and probes every path control judges, its acceptance is a traced dataset read and an
unrelated workload that cannot repeat it (:mod:`._dataset_reads`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ringfence.controls import _dataset_reads
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
    acceptance="Permitted: a training rank reads a dataset shard from storage, and the read is traced end to end "
    "(the object server's record of it joined to its flow, with the reader's workload identity). Denied: an "
    "unrelated workload (e.g. the auxiliary pod) cannot repeat it — the object server refuses it, or its flow "
    "to storage times out or is reset by policy.",
    facts=("flows", "probes", "drills", "traces"),
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
    ) + _dataset_reads.requirements(),
)


def _message(row: Mapping[str, Any]) -> str:
    service = row.get("service") or "a storage service"
    return f"{who(row, 'src')} reached {service} ({who(row, 'dst')}) without an approved storage flow"


def evaluate(policy: Policy, facts: Facts) -> list[Finding]:
    """Unapproved access to storage services fails; approved dataset/checkpoint flows pass; a traced dataset
    read and its refused repetition by an unrelated workload prove the two sides end to end."""
    return (judge_paths(meta, policy, facts, "storage services", _message) + drill_failures(meta, facts)
            + _dataset_reads.judge(meta, policy, facts))
