"""The lab as an enforcement target: its fabric namespace and node namespaces as executors, and its inventory."""

from __future__ import annotations

from ringfence.enforce.apply import FABRIC
from ringfence.lab import Lab
from ringfence.targets.interface import Executor
from ringfence.targets.lab import NamespaceExecutor


def lab_points(lab: Lab) -> dict[str, Executor]:
    """``fabric`` plus every node of ``lab``, each an executor inside its namespace."""
    points: dict[str, Executor] = {FABRIC: NamespaceExecutor(FABRIC, lab.topology.fabric_namespace)}
    for node in lab.topology.node_names():
        points[node] = lab.executor(node)
    return points


def lab_inventory(lab: Lab) -> dict[str, tuple[str, ...]]:
    """Node name → addresses, as the lab has them (for the unknown-node refusal)."""
    return {n.name: (n.address,) for n in lab.topology.nodes}


__all__ = ["lab_points", "lab_inventory"]
