"""A synthetic cluster policy of any size, for the scale benchmark and tests of growth.

``nodes`` workers split into ``jobs`` jobs, plus storage, management, a jump host, users and an
external replica. Each job gets three approved flows (collective among its ranks, storage reads,
progress reports), so approved flows = 3·jobs + 3 and do not depend on the node count.
"""

from __future__ import annotations

import ipaddress
import json
from typing import Any

from ringfence.policy import Policy

_BASE = int(ipaddress.ip_address("10.128.0.0"))


def _addr(i: int) -> str:
    return str(ipaddress.ip_address(_BASE + 256 + i))  # skip the .0.x network


def synthetic_policy(nodes: int, jobs: int, *, cluster: str = "synthetic") -> Policy:
    """A valid policy with ``nodes`` workers in ``jobs`` jobs (every job gets at least one rank)."""
    if jobs < 1 or nodes < jobs:
        raise ValueError(f"cannot split {nodes} nodes into {jobs} jobs")
    workers = [{"name": f"w{i}", "zone": "workload", "addresses": [_addr(i)]} for i in range(nodes)]
    infra = [
        {"name": "storage", "zone": "storage", "addresses": ["10.77.2.10"]},
        {"name": "mgmt", "zone": "management", "addresses": ["10.77.3.10"]},
        {"name": "user", "zone": "user", "addresses": ["10.77.4.10"]},
        {"name": "jump", "zone": "admin", "addresses": ["10.77.5.10"]},
        {"name": "external", "zone": "external", "addresses": ["10.77.9.10"]},
    ]
    base, extra = divmod(nodes, jobs)
    job_list: list[dict[str, Any]] = []
    start = 0
    for j in range(jobs):
        size = base + (1 if j < extra else 0)
        job_list.append({"name": f"job{j}", "identity": f"spiffe://synthetic/job/{j}",
                         "members": [f"w{k}" for k in range(start, start + size)], "collective_ports": "20000-20999"})
        start += size
    approved: list[dict[str, Any]] = []
    for job in job_list:
        n = job["name"]
        approved += [
            {"id": f"{n}-collective", "from": {"job": n}, "to": {"job": n}, "ports": "20000-20999",
             "class": "collective"},
            {"id": f"{n}-storage", "from": {"job": n}, "to": {"service": "storage-http"}, "class": "storage"},
            {"id": f"{n}-report", "from": {"job": n}, "to": {"service": "mgmt-api"}, "class": "management"},
        ]
    approved += [
        {"id": "user-submit", "from": {"zone": "user"}, "to": {"service": "mgmt-api"}, "class": "management"},
        {"id": "admin-ssh", "from": {"node": "jump"}, "to": {"service": "mgmt-ssh"}, "class": "management"},
        {"id": "replication", "from": {"node": "storage"}, "to": {"service": "replica-sink"}, "class": "replication"},
    ]
    required = {"protection": "required"}
    data = {
        "version": 1, "cluster": cluster,
        "zones": [{"name": z} for z in ("workload", "storage", "management", "user", "admin")]
        + [{"name": "external", "trust": "external"}],
        "nodes": workers + infra, "jobs": job_list,
        "services": [
            {"name": "storage-http", "node": "storage", "port": 8080, "class": "storage", "application": "http"},
            {"name": "mgmt-api", "node": "mgmt", "port": 8000, "class": "management", "application": "http"},
            {"name": "mgmt-ssh", "node": "mgmt", "port": 22, "class": "management", "application": "ssh",
             "admin": True},
            {"name": "replica-sink", "node": "external", "port": 9000, "class": "replication"},
        ],
        "approved": approved,
        "classes": {"storage": required, "collective": required, "management": required, "replication": required},
    }
    return Policy.model_validate_json(json.dumps(data))


__all__ = ["synthetic_policy"]
