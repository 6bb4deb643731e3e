"""The lab as an enforcement target: its fabric namespace and node namespaces as executors, and its inventory.

What ``apply``, ``probe`` and ``contain`` act on is a mapping of points (node or ``fabric``) to executors;
this is the lab's; an SSH hosts inventory gives the same mapping (``ringfence.cli._targets``).
"""

from __future__ import annotations

from collections.abc import Sequence

from ringfence.bench.driver import RankSpec
from ringfence.bench.placement import site_ranks
from ringfence.enforce.apply import FABRIC
from ringfence.enforce.partition_probe import ProveInputs
from ringfence.lab import Lab
from ringfence.targets.interface import Executor
from ringfence.targets.lab import NamespaceExecutor


def lab_points(lab: Lab) -> dict[str, Executor]:
    """``fabric`` plus every node of ``lab``, each an executor inside its namespace."""
    points: dict[str, Executor] = {FABRIC: NamespaceExecutor(FABRIC, lab.topology.fabric_namespace)}
    for node in lab.topology.node_names():
        points[node] = lab.executor(node)
    return points


def lab_ranks(nodes: Sequence[str], *, interfaces: Sequence[str | None] | None = None,
              lab_name: str | None = None) -> list[RankSpec]:
    """One benchmark rank per node of the lab ``lab_name`` (default: the only one), in its namespace."""
    return site_ranks(Lab.attach(lab_name).site(), nodes, interfaces)


def lab_inventory(lab: Lab) -> dict[str, tuple[str, ...]]:
    """Node name → addresses, as the lab has them (for the unknown-node refusal)."""
    return {n.name: (n.address,) for n in lab.topology.nodes}


def lab_fabric_ports(lab: Lab) -> dict[str, tuple[str, ...]]:
    """Node name → its port on its zone's bridge in the fabric namespace (what a job's partition is keyed by)."""
    return {n.name: (lab.topology.port(n.name),) for n in lab.topology.nodes}


def lab_steps(lab: Lab) -> dict[str, int]:
    """Worker node → its training rank's all-reduce step counter, as its agent last reported it."""
    status = lab.agent_status()
    out: dict[str, int] = {}
    for job in lab.topology.jobs:
        for w in job.members:
            steps = status.get(f"{w}-worker", {}).get("counters", {}).get("steps")
            if isinstance(steps, int):
                out[w] = steps
    return out


def lab_partition_inputs(lab: Lab) -> ProveInputs:
    """What the partition proof needs of the lab: its points, interfaces, each job's rendezvous, the step counters."""
    topo = lab.topology
    return ProveInputs(
        points=lab_points(lab),
        interfaces={n: topo.interface(n) for n in topo.node_names()},
        rendezvous={j.name: (j.members[0], j.master_port) for j in topo.jobs},
        gateways={n.name: topo.zone(n.zone).gateway() for n in topo.nodes},
        steps=lambda: lab_steps(lab),
    )


__all__ = ["lab_fabric_ports", "lab_inventory", "lab_partition_inputs", "lab_points", "lab_ranks", "lab_steps"]
