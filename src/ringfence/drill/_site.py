"""What the credential-compromise and management-plane drills share: the site's enforcement points, names
beside addresses, the drop counters that moved for one actor, and the control host's own address.

Nothing here knows the lab: on ``--target lab`` the fabric's executor is the lab's own (its namespace is
not a host of the site), on SSH it is the host named ``fabric``, like every other point.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ringfence.drill.interface import DrillContext, DrillError
from ringfence.enforce.apply import FABRIC
from ringfence.enforce.probe_matrix import DeniedKey
from ringfence.policy import Policy
from ringfence.targets.interface import Executor


def points(ctx: DrillContext) -> dict[str, Executor]:
    """Every enforcement point (``fabric`` and each node) behind its executor."""
    site = ctx.cluster.site()
    out: dict[str, Executor] = {n: site.executor(n) for n in sorted(site.hosts)}
    lab = ctx.options.get("lab")
    if lab is not None:
        out[FABRIC] = lab.fabric_executor()
    return out


def named(policy: Policy, node: str, port: int | None = None) -> str:
    """``storage (10.77.2.10:8080)``: the inventory name beside its address."""
    spec = policy.node(node)
    addr = spec.addresses[0] if spec is not None else "?"
    return f"{node} ({addr}{f':{port}' if port is not None else ''})"


def address(policy: Policy, node: str) -> str:
    """The first address of ``node``; :class:`DrillError` if the policy has no such node."""
    spec = policy.node(node)
    if spec is None:
        raise DrillError(f"policy {policy.cluster} has no node {node!r}",
                         hint=f"known: {', '.join(n.name for n in policy.nodes)}")
    return spec.addresses[0]


def moved(before: Mapping[str, Mapping[DeniedKey, int]], after: Mapping[str, Mapping[DeniedKey, int]], *,
          saddr: str, daddr: str, dport: int, sport: int | None) -> dict[str, int]:
    """``point/family`` → packets dropped from ``saddr:sport`` to ``daddr:dport`` between two counter reads,
    only where the count grew. The source port ties the drop to one connection (other traffic of the
    same node to the same service is not it); ``None`` matches any — and proves less."""
    out: dict[str, int] = {}
    for where, elems in after.items():
        grown = sum(n - before.get(where, {}).get(k, 0) for k, n in elems.items()
                    if k[0] == saddr and k[1] == daddr and k[4] == dport and (sport is None or k[3] == sport)
                    and n > before.get(where, {}).get(k, 0))
        if grown:
            out[where] = grown
    return out


def capture_path(result: Any, fallback: Path) -> Path:
    """The pcap a cluster's ``capture`` wrote (the lab and a site both answer with ``.path``)."""
    path = getattr(result, "path", None)
    return Path(path) if path is not None else fallback


__all__ = ["address", "capture_path", "moved", "named", "points"]
