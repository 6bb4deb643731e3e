"""Incident-drill facts (``ringfence drill run SCENARIO -o drill.json``), one report per file.

The verdict a report states is not trusted: it is derived again from the report's own facts (its
attempts, containment and bystander measurement, by :class:`ringfence.drill.interface.DrillReport`), and a
file whose stated verdict differs from what its facts give is refused — an edited ``"verdict": "pass"``
proves nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import AwareDatetime

from ringfence.drill.interface import DRILL_FORMAT, Attempt, Bystander, DrillReport
from ringfence.facts.interface import FactsFileError, Loaded, Strict, parse
from ringfence.policy.model import DrillScenario

HINT = "write it with: ringfence drill run SCENARIO --target lab -o drill.json"


class AttemptModel(Strict):
    """One attacker step."""

    step: str
    actor: str
    target: str
    description: str
    got_through: bool | None
    stopped_by: str
    detected: bool | None
    detection: str
    seconds_to_detect: float | None
    bytes_out: int | None
    evidence: list[str]
    control: Literal["", "zones", "workload_identity", "admin_paths", "storage_flows", "training_traffic", "egress",
                     "encryption_keys", "telemetry", "change_control", "containment"] = ""


class BystanderModel(Strict):
    """The bystander job's measurement."""

    job: str
    ranks: list[str]
    steps_before: int
    steps_during: int
    longest_stall_s: float | None
    budget_stall_s: float
    within_budget: bool | None
    detail: str
    busbw_before_Bps: float | None = None
    busbw_during_Bps: float | None = None


class DrillDoc(Strict):
    """One drill report."""

    format: Literal["ringfence-drill/1"]
    scenario: DrillScenario
    target: str
    started: AwareDatetime
    finished: AwareDatetime
    verdict: Literal["pass", "fail", "unknown"]
    why: str
    attempts: list[AttemptModel]
    bystander: BystanderModel | None
    contained: bool | None
    containment: str
    requires_containment: bool
    detection_seconds: float | None
    containment_seconds: float | None
    notes: list[str]
    evidence: list[str]
    store: str


def report_of(doc: DrillDoc) -> DrillReport:
    """The report the document describes (its verdict derived from its facts)."""
    by = doc.bystander
    return DrillReport(
        doc.scenario, doc.target, doc.started.isoformat(), doc.finished.isoformat(),
        tuple(Attempt(a.step, a.actor, a.target, a.description, a.got_through, a.stopped_by, a.detected,
                      a.detection, a.seconds_to_detect, a.bytes_out, tuple(a.evidence), a.control)
              for a in doc.attempts),
        None if by is None else Bystander(by.job, tuple(by.ranks), by.steps_before, by.steps_during,
                                          by.longest_stall_s, by.budget_stall_s, by.detail, by.busbw_before_Bps,
                                          by.busbw_during_Bps),
        doc.contained, doc.containment, doc.detection_seconds, doc.containment_seconds, tuple(doc.notes),
        tuple(doc.evidence), doc.store, doc.requires_containment,
    )


def load(path: str | Path, data: bytes | None = None) -> Loaded:
    """``Facts.drills`` gets one report per file, its verdict re-derived; its age is when the drill finished."""
    doc = parse(path, DrillDoc, "drill report", HINT, fmt=DRILL_FORMAT, data=data)
    if doc.finished < doc.started:
        raise FactsFileError(f"{path}: finished", "is before started", hint=HINT)
    report = report_of(doc)
    if report.verdict.value != doc.verdict:
        raise FactsFileError(f"{path}: verdict", f"says {doc.verdict!r} but its facts give "
                             f"{report.verdict.value!r} ({report.why()})", hint=HINT)
    by = doc.bystander
    if by is not None and report.bystander is not None and by.within_budget != report.bystander.within_budget:
        raise FactsFileError(f"{path}: bystander.within_budget", f"says {by.within_budget!r} but its measurement "
                             f"gives {report.bystander.within_budget!r}", hint=HINT)
    value: dict[str, Any] = report.to_json()
    return Loaded("drills", str(path), value, doc.finished)


__all__ = ["HINT", "DrillDoc", "load", "report_of"]
