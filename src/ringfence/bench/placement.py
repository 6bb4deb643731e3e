"""Where the benchmark's ranks run: loopback for development, the lab's namespaces, or any executors.

``--target local`` puts every rank on this machine's loopback (the development and CI default).
``--target lab`` resolves node names through :mod:`ringfence.lab` (``Lab.attach()``,
``lab.executor(node)`` and the topology's address and interface of each node). The lab is
imported only when asked for, so the benchmark works on machines without it.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

from ringfence.bench.driver import RankSpec
from ringfence.errors import EnvironmentProblem, InputError
from ringfence.targets.local import LocalExecutor

__all__ = ["lab_ranks", "local_ranks", "split_interfaces"]


def split_interfaces(text: str | None, nodes: Sequence[str]) -> list[str | None]:
    """``--iface wg0`` (every node) or ``--iface a=wg0,b=wg1`` (per node) → one entry per node."""
    if not text:
        return [None] * len(nodes)
    if "=" not in text:
        return [text] * len(nodes)
    pairs = dict(p.split("=", 1) for p in text.split(",") if "=" in p)
    unknown = sorted(set(pairs) - set(nodes))
    if unknown:
        raise InputError("--iface", f"names nodes that are not benchmarked: {', '.join(unknown)}")
    return [pairs.get(n) for n in nodes]


def local_ranks(nodes: Sequence[str], interfaces: Sequence[str | None] | None = None) -> list[RankSpec]:
    """Every rank on loopback (127.0.0.1); ``nodes`` only names the ranks."""
    ifaces = list(interfaces) if interfaces is not None else [None] * len(nodes)
    executor = LocalExecutor()
    return [RankSpec(node=n, executor=executor, address="127.0.0.1", interface=i) for n, i in zip(nodes, ifaces,
                                                                                                strict=True)]


def lab_ranks(nodes: Sequence[str], *, interfaces: Sequence[str | None] | None = None,
              lab_name: str | None = None) -> list[RankSpec]:
    """One rank per lab node, inside the node's namespace; address and interface from the lab's topology.

    An interface given in ``interfaces`` (a tunnel's, when the canary is tunnelled) replaces the
    node's veth for ``GLOO_SOCKET_IFNAME``.
    """
    try:
        lab_module = importlib.import_module("ringfence.lab")
    except ImportError as exc:
        raise EnvironmentProblem("the lab package ringfence.lab cannot be imported", hint="use --target local") from exc
    lab_cls: Any = getattr(lab_module, "Lab", None)
    if lab_cls is None or not hasattr(lab_cls, "attach"):
        raise EnvironmentProblem("ringfence.lab provides no Lab.attach() in this build", hint="use --target local")
    lab = lab_cls.attach(lab_name)
    topology = lab.topology
    ifaces = list(interfaces) if interfaces is not None else [None] * len(nodes)
    ranks = []
    for node, iface in zip(nodes, ifaces, strict=True):
        # topology raises LabError (a RingfenceError naming the known nodes) for an unknown node.
        ranks.append(RankSpec(node=node, executor=lab.executor(node), address=str(topology.address(node)),
                              interface=iface or str(topology.interface(node))))
    return ranks
