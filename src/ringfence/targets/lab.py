"""Executor for a node of a lab: this machine, inside the node's network namespace (``ip netns exec NS``).

The namespace shares the file system, so copying is a plain local copy; only the network differs.
"""

from __future__ import annotations

from ringfence.targets.local import LocalExecutor


class NamespaceExecutor(LocalExecutor):
    """Runs commands inside network namespace ``namespace``; ``name`` is the node's name."""

    def __init__(self, name: str, namespace: str) -> None:
        super().__init__(name=name, prefix=("ip", "netns", "exec", namespace))
        self.namespace = namespace


__all__ = ["NamespaceExecutor"]
