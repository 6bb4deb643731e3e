"""An incident drill whose attack got through is a failure of the control point the attack tested.

Drill reports (``Facts.drills``, ``ringfence drill run -o``) only ever *add* failures here: a stopped
attack is the containment control's evidence (judged there, against the policy's required scenarios),
never a pass of another control — each control's own requirements decide its passes.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from ringfence.controls.interface import ControlMeta, Facts, Finding, Verdict

#: the control point a scenario's attempts test when an attempt names none
SCENARIO_CONTROL = {
    "credential-compromise": "workload_identity",
    "malicious-job": "training_traffic",
    "exfiltration": "egress",
    "management-plane-failure": "containment",
}


def finished_at(d: Mapping[str, object]) -> datetime | None:
    """When the drill report says it finished (timezone-aware), or None."""
    try:
        t = datetime.fromisoformat(str(d.get("finished")))
    except ValueError:
        return None
    return t if t.tzinfo is not None else None


def newest_reports(facts: Facts) -> dict[str, Mapping[str, object]]:
    """scenario → its newest drill report (a newer drill supersedes an older one of the same scenario)."""
    out: dict[str, tuple[datetime, Mapping[str, object]]] = {}
    for d in facts.drills or ():
        if not isinstance(d, Mapping):
            continue
        at, name = finished_at(d), str(d.get("scenario", ""))
        if at is not None and (name not in out or at > out[name][0]):
            out[name] = (at, d)
    return {k: v for k, (_, v) in out.items()}


def drill_failures(meta: ControlMeta, facts: Facts) -> list[Finding]:
    """A ``fail`` for every attempt of a newest drill report that got through and tested ``meta``'s control."""
    out: list[Finding] = []
    for name, d in sorted(newest_reports(facts).items()):
        attempts = d.get("attempts")
        for a in attempts if isinstance(attempts, list) else ():
            if not isinstance(a, Mapping) or a.get("got_through") is not True:
                continue
            if (str(a.get("control") or "") or SCENARIO_CONTROL.get(name, "")) != meta.id:
                continue
            raw = a.get("evidence", ())
            evidence = tuple(str(e) for e in raw) if isinstance(raw, list | tuple) else ()
            volume = a.get("bytes_out")
            moved = f"; {volume} bytes got out" if isinstance(volume, int) and not isinstance(volume, bool) else ""
            out.append(Finding(
                meta.id, Verdict.FAIL, f"{a.get('actor', '?')} → {a.get('target', '?')}",
                f"incident drill {name} ({d.get('target', '?')}, {d.get('finished', '?')}): {a.get('description', '')} "
                f"— got through: {a.get('stopped_by', '')}{moved}", evidence))
    return out


__all__ = ["SCENARIO_CONTROL", "drill_failures", "finished_at", "newest_reports"]
