"""What a proposal would add to, remove from and change in an existing approved matrix.

Entries are matched by meaning, never by id: an entry's key is (source selector, destination
selector, protocol, effective port range) — ports default to the destination service's, as the
classifier reads them — and its class. Matching runs in passes, each over what the previous left:

1. same key → *unchanged*, or *changed* when only the class differs;
2. same source, destination and class → *changed* protocol/ports;
3. same destination, protocol, ports and class → *changed* source;
4. same source, protocol, ports and class → *changed* destination;

whatever is left is *removed* (existing only) or *added* (proposal only).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass

from ringfence.analyze.plan import rule_range
from ringfence.policy import ApprovedFlow, Policy


@dataclass(frozen=True)
class RuleChange:
    """An existing entry and the proposed entry that replaces it, with what differs."""

    old: ApprovedFlow
    new: ApprovedFlow
    what: tuple[str, ...]


@dataclass(frozen=True)
class PolicyDiff:
    """Differences between two approved matrices (see the module doc for the matching)."""

    added: tuple[ApprovedFlow, ...]
    removed: tuple[ApprovedFlow, ...]
    changed: tuple[RuleChange, ...]
    unchanged: tuple[tuple[ApprovedFlow, ApprovedFlow], ...]

    @property
    def empty(self) -> bool:
        """Nothing added, removed or changed."""
        return not (self.added or self.removed or self.changed)


@dataclass(frozen=True)
class _Sem:
    rule: ApprovedFlow
    src: str
    dst: str
    proto: str
    ports: str
    cls: str


def _sem(policy: Policy, rule: ApprovedFlow) -> _Sem:
    rr = rule_range(policy, rule)
    ports = "all" if (rr.lo, rr.hi) == (0, 65535) else str(rr.lo) if rr.lo == rr.hi else f"{rr.lo}-{rr.hi}"
    return _Sem(rule, rule.source.describe(), rule.destination.describe(), rule.proto, ports,
                rule.traffic_class.value)


def _what(a: _Sem, b: _Sem) -> tuple[str, ...]:
    out = []
    if a.src != b.src:
        out.append(f"from {a.src} → {b.src}")
    if a.dst != b.dst:
        out.append(f"to {a.dst} → {b.dst}")
    if (a.proto, a.ports) != (b.proto, b.ports):
        out.append(f"ports {a.proto}/{a.ports} → {b.proto}/{b.ports}")
    if a.cls != b.cls:
        out.append(f"class {a.cls} → {b.cls}")
    return tuple(out)


def diff_approved(existing: Policy, proposed: Policy) -> PolicyDiff:
    """Compare the ``approved`` entries of ``existing`` with those of ``proposed``."""
    old = [_sem(existing, r) for r in existing.approved]
    new = [_sem(proposed, r) for r in proposed.approved]
    changed: list[RuleChange] = []
    unchanged: list[tuple[ApprovedFlow, ApprovedFlow]] = []
    passes: list[Callable[[_Sem], Hashable]] = [
        lambda s: (s.src, s.dst, s.proto, s.ports),
        lambda s: (s.src, s.dst, s.cls),
        lambda s: (s.dst, s.proto, s.ports, s.cls),
        lambda s: (s.src, s.proto, s.ports, s.cls),
    ]
    for key in passes:
        pool: dict[Hashable, list[_Sem]] = {}
        for s in new:
            pool.setdefault(key(s), []).append(s)
        left_old: list[_Sem] = []
        for o in old:
            match = pool.get(key(o))
            if not match:
                left_old.append(o)
                continue
            n = match.pop(0)
            what = _what(o, n)
            if what:
                changed.append(RuleChange(o.rule, n.rule, what))
            else:
                unchanged.append((o.rule, n.rule))
        matched = {id(s) for s in new} - {id(s) for group in pool.values() for s in group}
        new = [s for s in new if id(s) not in matched]
        old = left_old
    return PolicyDiff(tuple(s.rule for s in new), tuple(s.rule for s in old), tuple(changed), tuple(unchanged))


def _one(r: ApprovedFlow, policy: Policy) -> str:
    s = _sem(policy, r)
    return f"{r.id}: {s.src} → {s.dst} {s.proto}/{s.ports} {s.cls}"


def render_diff(
    diff: PolicyDiff, existing: Policy, proposed: Policy, *, names: tuple[str, str] = ("existing", "proposal")
) -> str:
    """Text: ``+`` added, ``-`` removed, ``~`` changed, ``=`` unchanged, then a summary line."""
    lines = [
        f"--- {names[0]} ({len(existing.approved)} approved)",
        f"+++ {names[1]} ({len(proposed.approved)} approved)",
    ]
    lines += [f"+ {_one(r, proposed)}" for r in diff.added]
    lines += [f"- {_one(r, existing)}" for r in diff.removed]
    for c in diff.changed:
        ids = c.old.id if c.old.id == c.new.id else f"{c.old.id} → {c.new.id}"
        lines.append(f"~ {ids}: {'; '.join(c.what)}")
    for a, b in diff.unchanged:
        ids = a.id if a.id == b.id else f"{a.id} (proposed as {b.id})"
        lines.append(f"= {ids}")
    lines.append(
        f"{len(diff.added)} added, {len(diff.removed)} removed, {len(diff.changed)} changed, "
        f"{len(diff.unchanged)} unchanged"
    )
    return "\n".join(lines) + "\n"


def diff_json(diff: PolicyDiff, existing: Policy, proposed: Policy) -> dict[str, object]:
    """The diff as JSON-ready data."""
    return {
        "added": [_one(r, proposed) for r in diff.added],
        "removed": [_one(r, existing) for r in diff.removed],
        "changed": [{"old": c.old.id, "new": c.new.id, "what": list(c.what)} for c in diff.changed],
        "unchanged": [{"old": a.id, "new": b.id} for a, b in diff.unchanged],
    }


__all__ = ["PolicyDiff", "RuleChange", "diff_approved", "diff_json", "render_diff"]
