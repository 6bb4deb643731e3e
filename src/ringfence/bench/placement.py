"""Where the benchmark's ranks run: loopback for development, the lab's namespaces, or any executors.

``--target local`` puts every rank on this machine's loopback (the development and CI default).
Any other target is a :class:`~ringfence.targets.interface.Site` — the lab's namespaces, SSH hosts —
and :func:`site_ranks` places one rank on each named node through that node's executor.
"""

from __future__ import annotations

from collections.abc import Sequence

from ringfence.bench.driver import RankSpec
from ringfence.errors import InputError
from ringfence.targets.interface import Site
from ringfence.targets.local import LocalExecutor

__all__ = ["local_ranks", "site_ranks", "split_interfaces"]


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


def site_ranks(site: Site, nodes: Sequence[str], interfaces: Sequence[str | None] | None = None) -> list[RankSpec]:
    """One rank per node of ``site`` (a lab, SSH hosts), through its executor, at its address and interface.

    An interface given in ``interfaces`` (a tunnel's, when the canary is tunnelled) replaces the
    host's own for ``GLOO_SOCKET_IFNAME``. Each rank starts with its host's interpreter and environment.
    An unknown node is a :class:`~ringfence.targets.interface.TargetError`
    naming the site's nodes.
    """
    ifaces = list(interfaces) if interfaces is not None else [None] * len(nodes)
    return [RankSpec(node=n, executor=site.executor(n), address=site.address(n),
                     interface=i or site.host(n).interface, python=tuple(site.host(n).python),
                     env=dict(site.host(n).env)) for n, i in zip(nodes, ifaces, strict=True)]
