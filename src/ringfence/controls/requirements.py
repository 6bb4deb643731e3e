"""Requirements as code: a control passes only when every requirement it declares is met by fresh facts.

A control's :class:`~ringfence.controls.interface.Requirement` names one piece of its acceptance (the
permitted side or the denied side), the :class:`~ringfence.controls.interface.Facts` fields that alone
can satisfy it and the verb that gathers them. Findings say which requirement they prove
(``Finding.requirement``). :func:`enforce_requirements` then applies the rule the whole tool rests on,
the same for every control, so no control can forget it:

* a requirement is **met** only by a ``pass`` or ``exempt`` finding tagged with it;
* a requirement whose facts are missing, or older than the policy's maximum age (or of no recorded
  age), is **not met**, and the ``pass`` findings that rest on them become ``unknown``;
* an unmet requirement without a failing finding adds an ``unknown`` finding naming it and the verb
  that gathers its facts — so the control's aggregate can be ``pass`` only when all are met.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from datetime import datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc

from ringfence.controls.interface import ControlMeta, Facts, Finding, Requirement, Verdict
from ringfence.policy import Policy

_DURATION = re.compile(r"^(\d+)([smhd])$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration(text: str) -> timedelta | None:
    """``12h`` → 12 hours; None if the text is not ``<n>[smhd]``."""
    m = _DURATION.match(text.strip())
    return timedelta(seconds=int(m.group(1)) * _UNIT[m.group(2)]) if m else None


def max_age(policy: Policy, fact: str) -> timedelta:
    """The policy's maximum age for ``fact`` (``facts.per_fact``, else ``facts.max_age``)."""
    # a drill is repeated at the cadence the policy sets for drills, not at the cadence of fresh captures
    default = policy.incident_drills.every if fact == "drills" else policy.facts.max_age
    text = policy.facts.per_fact.get(fact, default)
    age = duration(text)
    # The policy model validates the pattern; a zero or unreadable value admits nothing.
    return age if age is not None else timedelta(0)


def _present(facts: Facts, name: str) -> bool:
    value = getattr(facts, name)
    if value is None:
        return False
    if hasattr(value, "num_rows"):
        return bool(value.num_rows)
    try:
        return len(value) > 0
    except TypeError:
        return True


def fact_problem(policy: Policy, facts: Facts, name: str) -> str | None:
    """Why ``facts.<name>`` cannot prove anything (missing, empty, of unknown or excessive age), or None."""
    if not _present(facts, name):
        return f"no {name} facts" if getattr(facts, name) is None else f"the {name} facts are empty"
    taken = facts.taken.get(name)
    if taken is None and name == "flows":
        taken = observed_until(facts.flows)
    if taken is None or taken.tzinfo is None:
        return f"when the {name} facts were gathered is not recorded"
    limit = max_age(policy, name)
    age = facts.now - taken
    if age > limit:
        return f"the {name} facts are stale: gathered {taken.isoformat()}, older than the policy's maximum age"
    if age < -timedelta(minutes=5):
        return f"the {name} facts claim to come from the future ({taken.isoformat()})"
    return None


def observed_until(flows: pa.Table | None) -> datetime | None:
    """The latest ``last_seen`` of a flow table: flows carry their own observation time."""
    if flows is None or "last_seen" not in flows.column_names or not flows.num_rows:
        return None
    last = pc.max(flows.column("last_seen")).as_py()
    return last if isinstance(last, datetime) and last.tzinfo is not None else None


def requirement_problems(policy: Policy, facts: Facts, req: Requirement) -> list[str]:
    """Every reason the facts ``req`` needs cannot be used."""
    return [p for name in req.facts if (p := fact_problem(policy, facts, name)) is not None]


def _unmet(meta: ControlMeta, req: Requirement, why: str) -> Finding:
    return Finding(
        meta.id,
        Verdict.UNKNOWN,
        f"requirement {req.id} ({req.side.value})",
        f"not proven: {req.text} — {why}; gather with `{req.gather}`",
        requirement=req.id,
    )


def enforce_requirements(meta: ControlMeta, policy: Policy, facts: Facts, findings: Sequence[Finding]) -> list[Finding]:
    """``findings`` with the requirement rule applied (see the module docstring)."""
    asked = [r for r in meta.requirements if r.applies(policy)]
    problems = {r.id: requirement_problems(policy, facts, r) for r in asked}
    out: list[Finding] = []
    for f in findings:
        stale = problems.get(f.requirement)
        if stale and f.verdict in (Verdict.PASS, Verdict.EXEMPT):
            f = dataclasses.replace(f, verdict=Verdict.UNKNOWN, message=f"{f.message} — but {'; '.join(stale)}")
        out.append(f)
    for req in asked:
        mine = [f for f in out if f.requirement == req.id]
        if any(f.verdict in (Verdict.PASS, Verdict.EXEMPT) for f in mine):
            continue
        if any(f.verdict is Verdict.FAIL for f in mine):
            continue  # contradicted: the failure says why
        why = "; ".join(problems[req.id]) or "no recorded fact proves it"
        out.append(_unmet(meta, req, why))
    return out


__all__ = ["duration", "enforce_requirements", "fact_problem", "max_age", "observed_until",
           "requirement_problems"]
