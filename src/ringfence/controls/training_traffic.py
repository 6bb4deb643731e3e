"""Control point ``training_traffic``: collective traffic stays between the ranks of one job."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ringfence.controls._common import who
from ringfence.controls._drills import drill_failures
from ringfence.controls._fabric import (
    PARTITION_REQUIREMENTS,
    job_partition_findings,
    partition_findings,
    rdma_findings,
)
from ringfence.controls._flows import judge_paths, path_requirements
from ringfence.controls.interface import ControlMeta, Facts, Finding
from ringfence.policy import Policy

meta = ControlMeta(
    id="training_traffic",
    title="Distributed-training (collective) traffic",
    objective="All-reduce and rendezvous traffic flows only between members of the same job, on the "
    "job's collective ports; no cross-job or outsider traffic reaches ranks.",
    acceptance="Permitted: ranks of a job exchange gradients (all-reduce completes). Denied: a "
    "non-member or another job's rank connecting to a rank's collective port times out or is reset by policy.",
    facts=("flows", "probes", "drills", "partitions"),
    remediation={
        "nftables": "on each rank: accept the collective port range only from the job's member address set",
        "networkpolicy": "ingress to rank pods only from pods of the same job (job label selector)",
        "cilium": "CiliumNetworkPolicy per job: fromEndpoints with the job identity, ports = collective range",
        "process": "partition the fabric per job (PKEY/VLAN/VRF) and keep job membership in the policy current",
    },
    requirements=path_requirements(
        'ranks of a job exchange gradients on its collective ports',
        "a non-member or another job's rank connecting to a collective port times out or is reset by policy",
        "a job's collective ports",
    ) + PARTITION_REQUIREMENTS,
)


def _message(row: Mapping[str, Any]) -> str:
    src_job, dst_job = row.get("src_job"), row.get("dst_job")
    if src_job and dst_job and src_job != dst_job:
        what = f"cross-job traffic ({src_job} → {dst_job})"
    elif not (src_job and dst_job):
        what = f"traffic between a member of job {src_job or dst_job} and a non-member"
    else:
        what = f"collective traffic of job {src_job} outside its approved entries"
    return f"{what}: {who(row, 'src')} → {who(row, 'dst')} on a collective port"


def evaluate(policy: Policy, facts: Facts) -> list[Finding]:
    """Cross-job and outsider traffic on collective ports fails; approved collectives pass; a job's collective
    flows outside its declared partition, and RDMA key-hygiene findings of the captures, fail; a declared partition
    passes only when probed both ways on the fabric (``facts.partitions``)."""
    found = judge_paths(meta, policy, facts, "job collective ports", _message)
    return (found + partition_findings(meta, policy, facts) + job_partition_findings(meta, policy, facts)
            + rdma_findings(meta, facts) + drill_failures(meta, facts))


def job_partitions(policy: Policy, facts: Facts) -> list[Finding]:
    """The job-partition findings alone (both sides per declared partition), as ``ringfence partition`` prints them."""
    return job_partition_findings(meta, policy, facts)
