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


def hosts_document(lab: Lab, nodes: list[str] | None = None) -> dict[str, Any]:
    """Start an sshd on every node of ``nodes`` (default: all but the jump host) and return the inventory."""
    chosen = nodes or [n for n in lab.topology.node_names() if n != JUMP]
    known = lab.ensure_sshd(chosen)
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
        }
        for node in chosen
    }
    # The same site name as the lab's own: layers enabled over SSH are the lab's layers, in one record.
    return {"site": lab.name, "fanout": 8, "timeout": 120.0, "hosts": hosts}


__all__ = ["JUMP", "hosts_document"]
