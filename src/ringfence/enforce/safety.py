"""Checks that run before anything is applied: refuse a policy that is dangerous to enforce.

Refused, with every reason at once: a policy that would lock out the administrative path (an admin
service no approved flow reaches, or none declared at all), one that approves "any to any", and one
that names nodes the target does not have (or gives them other addresses than the target's).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence

from ringfence.enforce.interface import UnsafePolicy
from ringfence.policy import Policy
from ringfence.policy.matrix import Matrix, MatrixError, ResolvedFlow, Selector, resolve


def _is_any(sel: Selector, all_nodes: int) -> bool:
    if any(ipaddress.ip_network(c).prefixlen == 0 for c in sel.cidrs):
        return True
    return all_nodes > 1 and len(sel.nodes) == all_nodes


def _reaches(flow: ResolvedFlow, node: str, port: tuple[int, int], proto: str) -> bool:
    lo, hi = flow.ports
    return (node in flow.destination.nodes and lo <= port[0] and port[1] <= hi
            and proto in flow.protos and bool(flow.source.nodes or flow.source.cidrs))


def policy_problems(policy: Policy, matrix: Matrix | None = None,
                    inventory: Mapping[str, Sequence[str]] | None = None) -> list[str]:
    """Every reason to refuse ``policy``; empty when it is safe to apply.

    ``inventory`` maps the target's node names to their addresses (the lab's status, an SSH
    inventory); without it the unknown-node check is skipped.
    """
    try:
        m = matrix or resolve(policy)
    except MatrixError as exc:
        return [exc.message]
    problems: list[str] = []
    n_nodes = len(m.node_addresses)
    for i, f in enumerate(m.flows):
        if _is_any(f.source, n_nodes) and _is_any(f.destination, n_nodes):
            problems.append(f"approved[{i}] ({f.id}) approves any to any ({f.source.describe()} → "
                            f"{f.destination.describe()}): name the nodes, jobs or services that need the path")
    admin = [s for s in policy.services if s.admin]
    if not admin and n_nodes:
        problems.append("no administrative service is declared (a service with admin: true); default-drop would "
                        "leave no way in to administer the nodes")
    problems += [f"admin service {s.name} ({s.node}:{s.port}) is reached by no approved flow: "
                 "enforcing would lock out the administrative path"
                 for s in admin if not any(_reaches(f, s.node, s.port_range, s.proto) for f in m.flows)]
    if inventory is not None:
        for name, addrs in m.node_addresses.items():
            if name not in inventory:
                problems.append(f"node {name!r} is not in the target (known: {', '.join(sorted(inventory))})")
            elif set(addrs) - set(inventory[name]):
                problems.append(f"node {name!r} has addresses {', '.join(addrs)} in the policy but "
                                f"{', '.join(inventory[name])} in the target")
    return problems


def check_policy(policy: Policy, matrix: Matrix | None = None,
                 inventory: Mapping[str, Sequence[str]] | None = None, *, source: str = "policy") -> None:
    """Raise :class:`UnsafePolicy` listing every problem :func:`policy_problems` finds."""
    problems = policy_problems(policy, matrix, inventory)
    if problems:
        listing = "\n  - ".join(problems)
        raise UnsafePolicy(f"{source}: refused before anything was applied:\n  - {listing}",
                           hint="fix the policy; `ringfence compile` shows what it would render")


__all__ = ["check_policy", "policy_problems"]
