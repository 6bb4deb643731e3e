"""``ringfence lab hosts``: the lab's nodes as an SSH hosts inventory, so ``--target ssh`` can drive them.

Each node gets an sshd of its own (accepting only the lab's admin key, its host key pinned in a
known_hosts file of the lab); the inventory names, per node, the address its peers reach it at, the
key, the known_hosts, and runs the SSH client from the jump node's namespace — the one place of the
lab from which an administrator reaches the cluster. Nothing in it is specific to the lab beyond
that prefix: ``--target ssh`` then drives the lab exactly as it would drive a Slurm cluster.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import ringfence
from ringfence.lab import sshd
from ringfence.lab.lab import Lab

#: the node the SSH client runs in (the lab's administrative entry point)
JUMP = "jump"


#: the enforcement point between the zones, an SSH host like the nodes (a cluster's firewall or gateway)
FABRIC = "fabric"


def hosts_document(lab: Lab, nodes: list[str] | None = None, *, fabric: bool = True) -> dict[str, Any]:
    """Start an sshd on every node of ``nodes`` (default: all, the jump host included — the client runs
    there, and its own ruleset is applied like any other's) and on the fabric (unless ``fabric`` is
    False), and return the inventory.

    Each training rank's host names its ``progress`` file (the worker's status, which the rank rewrites
    as it steps), so a drill over SSH sees the job train exactly as a drill on the lab does.
    """
    chosen = nodes or list(lab.topology.node_names())
    known = lab.ensure_sshd([*chosen, *([FABRIC] if fabric else [])])
    key = sshd.SshMaterial(lab.paths.directory / "ssh").admin_key
    prefix = ["ip", "netns", "exec", lab.topology.namespace(JUMP)]
    checkout = str(Path(ringfence.__file__).resolve().parents[1])
    hosts = {
        node: {
            "address": lab.topology.address(node),
            "user": sshd.LOGIN_USER,
            "key": str(key),
            "known_hosts": str(known[node]),
            "python": [sys.executable],
            "env": {"PYTHONPATH": checkout},
            "client_prefix": prefix,
            "interface": str(lab.topology.interface(node)),
            **({"progress": str(lab.paths.status_dir / f"{node}-worker.json")}
               if lab.topology.job_of(node) is not None else {}),
        }
        for node in chosen
    }
    if fabric:
        # no interface: the fabric forwards what the nodes send, and a site capture records it at the senders
        hosts[FABRIC] = {"address": lab.sshd_address(FABRIC), "user": sshd.LOGIN_USER, "key": str(key),
                         "known_hosts": str(known[FABRIC]), "python": [sys.executable],
                         "env": {"PYTHONPATH": checkout}, "client_prefix": prefix}
    # The same site name as the lab's own: layers enabled over SSH are the lab's layers, in one record.
    return {"site": lab.name, "fanout": 8, "timeout": 120.0, "hosts": hosts}


__all__ = ["FABRIC", "JUMP", "hosts_document"]
