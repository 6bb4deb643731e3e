"""Cross-reference checks the schema cannot express: every name a policy uses must exist."""

from __future__ import annotations

from ringfence.policy.model import Endpoint, Policy

Loc = tuple[str | int, ...]


def _endpoint_problems(policy: Policy, ep: Endpoint, loc: Loc, names: dict[str, set[str]]) -> list[tuple[Loc, str]]:
    out: list[tuple[Loc, str]] = []
    for kind in ("zone", "node", "job", "service"):
        value = getattr(ep, kind)
        if value is not None and value not in names[kind]:
            out.append(((*loc, kind), f"unknown {kind} {value!r}"))
    return out


def check_references(policy: Policy) -> list[tuple[Loc, str]]:
    """Every dangling or duplicate reference, as (location, message); empty when consistent."""
    names = {
        "zone": {z.name for z in policy.zones},
        "node": {n.name for n in policy.nodes},
        "job": {j.name for j in policy.jobs},
        "service": {s.name for s in policy.services},
    }
    out: list[tuple[Loc, str]] = []
    for section, items in (
        ("zones", policy.zones),
        ("nodes", policy.nodes),
        ("jobs", policy.jobs),
        ("services", policy.services),
        ("approved", policy.approved),
        ("exceptions", policy.exceptions),
    ):
        seen: set[str] = set()
        for i, item in enumerate(items):
            key = str(getattr(item, "name", None) or getattr(item, "id", ""))
            if key in seen:
                out.append(((section, i), f"duplicate name {key!r}"))
            seen.add(key)
    owner: dict[str, str] = {}
    for i, n in enumerate(policy.nodes):
        if n.zone not in names["zone"]:
            out.append((("nodes", i, "zone"), f"unknown zone {n.zone!r}"))
        for a in n.addresses:
            if a in owner:
                out.append((("nodes", i, "addresses"), f"address {a} is already node {owner[a]!r}'s"))
            owner[a] = n.name
    for i, j in enumerate(policy.jobs):
        for k, m in enumerate(j.members):
            if m not in names["node"]:
                out.append((("jobs", i, "members", k), f"unknown node {m!r}"))
    for i, s in enumerate(policy.services):
        if s.node not in names["node"]:
            out.append((("services", i, "node"), f"unknown node {s.node!r}"))
    for i, f in enumerate(policy.approved):
        out += _endpoint_problems(policy, f.source, ("approved", i, "from"), names)
        out += _endpoint_problems(policy, f.destination, ("approved", i, "to"), names)
        if f.ports is None and f.destination.service is None and f.proto != "any":
            out.append((("approved", i, "ports"), "give ports, or a destination service whose port is used"))
    return out


__all__ = ["check_references"]
