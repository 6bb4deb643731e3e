"""Incident drills: the attacker really acts, then ringfence detects, contains and proves — the shared types.

A *scenario* (credential compromise, malicious job, exfiltration, management-plane failure) is played
on a running cluster through :class:`DrillContext`: the attacker's steps run through the site's
executors (so the drill on the lab is the drill on SSH hosts), each step is an :class:`Attempt` with
what stopped it and how it was detected, the bystander job's training is measured throughout
(:class:`Bystander`), and the whole is one :class:`DrillReport` whose verdict is derived, never set:

* ``fail`` when any attempt got through, containment did not hold, or the bystander left its budget;
* ``pass`` only when every attempt was really made and proven stopped, containment (where the scenario
  contains) held, detection named the actor, and the bystander was measured inside its budget;
* ``unknown`` otherwise — a drill that could not tell proves nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ringfence.controls.interface import Verdict
from ringfence.errors import RingfenceError

if TYPE_CHECKING:
    from ringfence.evidence import EvidenceStore
    from ringfence.policy import Policy
    from ringfence.secure.drills import Cluster

#: the report's format tag (see :mod:`ringfence.facts.drills`)
DRILL_FORMAT = "ringfence-drill/1"

Progress = Callable[[str], None]


class DrillError(RingfenceError):
    """A drill cannot be played here: no applied policy, no bystander job, a part the target lacks."""


@dataclass(frozen=True)
class Attempt:
    """One thing the attacker really tried, and what became of it.

    ``got_through``: True — the attack worked (the drill fails); False — it was made and proven stopped;
    None — it could not be told (the drill proves nothing for it). ``detected``: the attempt was seen by
    the site's telemetry (firewall decisions, flow logs) with the actor's identity; None when not looked for.
    """

    step: str  # a short id: "scan-ranks", "read-dataset", "stolen-cert-storage"
    actor: str  # the inventory name that acted ("aux", "job train-b")
    target: str  # what it acted on, inventory name and address ("storage (10.77.2.10:8080)")
    description: str  # what was done, in the user's terms
    got_through: bool | None
    stopped_by: str  # what stopped it (rule, refusal, alert) — or what got through
    detected: bool | None = None
    detection: str = ""  # how, with the identity it was attributed to
    seconds_to_detect: float | None = None
    bytes_out: int | None = None  # bytes of the attack's payload seen leaving (an independent capture)
    evidence: tuple[str, ...] = ()
    # the control point this attempt tests ("egress", "storage_flows"): an attempt that got through is a failure
    # of that control too; empty: the scenario's own (ringfence.controls._drills.SCENARIO_CONTROL)
    control: str = ""

    def to_json(self) -> dict[str, Any]:
        """The attempt as JSON."""
        return {
            "step": self.step, "actor": self.actor, "target": self.target, "description": self.description,
            "got_through": self.got_through, "stopped_by": self.stopped_by, "detected": self.detected,
            "detection": self.detection, "seconds_to_detect": self.seconds_to_detect, "bytes_out": self.bytes_out,
            "evidence": list(self.evidence), "control": self.control,
        }


@dataclass(frozen=True)
class Bystander:
    """The other job's training, measured throughout the drill from its own ranks' progress."""

    job: str
    ranks: tuple[str, ...]
    steps_before: int  # steps of the slowest rank in the baseline window
    steps_during: int  # steps of the slowest rank while the drill acted
    longest_stall_s: float | None  # the longest stretch with no step of some rank, during the drill
    budget_stall_s: float  # the stall the job tolerates (the policy's, or the drill's default)
    detail: str = ""
    busbw_before_Bps: float | None = None  # median bus bandwidth of its slowest rank, baseline (reported)
    busbw_during_Bps: float | None = None  # the same while the drill acted (reported, not judged)

    @property
    def within_budget(self) -> bool | None:
        """True when every rank kept stepping within the budget; None when it could not be measured."""
        if self.longest_stall_s is None:
            return None
        return self.steps_during > 0 and self.longest_stall_s <= self.budget_stall_s

    def to_json(self) -> dict[str, Any]:
        """The bystander's measurement as JSON."""
        return {
            "job": self.job, "ranks": list(self.ranks), "steps_before": self.steps_before,
            "steps_during": self.steps_during, "longest_stall_s": self.longest_stall_s,
            "budget_stall_s": self.budget_stall_s, "within_budget": self.within_budget, "detail": self.detail,
            "busbw_before_Bps": self.busbw_before_Bps, "busbw_during_Bps": self.busbw_during_Bps,
        }


@dataclass(frozen=True)
class DrillReport:
    """One played scenario: what was attempted, what stopped it, how long detection and containment took."""

    scenario: str
    target: str  # "lab:rf1234", "ssh:hosts.yaml"
    started: str  # ISO 8601, timezone-aware (UTC)
    finished: str
    attempts: tuple[Attempt, ...]
    bystander: Bystander | None
    contained: bool | None = None  # the scenario's containment held (None: the scenario does not contain)
    containment: str = ""  # what was contained, where, and how it was proven
    detection_seconds: float | None = None  # first attack step → first detection
    containment_seconds: float | None = None  # detection → containment proven
    notes: tuple[str, ...] = ()  # what the drill could not do here, and why (said, never pretended)
    evidence: tuple[str, ...] = ()  # evidence ids of every step, in the store below
    store: str = ""
    requires_containment: bool = True  # the scenario's acceptance includes a containment step

    @property
    def verdict(self) -> Verdict:
        """Derived from the facts above (see the module docstring)."""
        by = self.bystander.within_budget if self.bystander is not None else None
        if any(a.got_through is True for a in self.attempts) or self.contained is False or by is False:
            return Verdict.FAIL
        proven = (
            bool(self.attempts)
            and all(a.got_through is False and a.detected is not False for a in self.attempts)
            and any(a.detected is True for a in self.attempts)
            and (self.contained is True or not self.requires_containment)
            and by is True
        )
        return Verdict.PASS if proven else Verdict.UNKNOWN

    def why(self) -> str:
        """One line: what decided the verdict."""
        through = [a.step for a in self.attempts if a.got_through is True]
        if through:
            return f"got through: {', '.join(through)}"
        if self.contained is False:
            return "containment did not hold"
        if self.bystander is not None and self.bystander.within_budget is False:
            return f"bystander job {self.bystander.job} left its budget ({self.bystander.detail})"
        missing = [a.step for a in self.attempts if a.got_through is None]
        undetected = [a.step for a in self.attempts if a.detected is False]
        gaps = ([f"not told: {', '.join(missing)}"] if missing else []) + (
            [f"not detected: {', '.join(undetected)}"] if undetected else [])
        if not self.attempts:
            gaps.append("no attempt was made")
        elif not any(a.detected is True for a in self.attempts):
            gaps.append("no attempt was detected")
        if self.requires_containment and self.contained is None:
            gaps.append("containment not proven")
        if self.bystander is None or self.bystander.within_budget is None:
            gaps.append("bystander job not measured")
        return "; ".join(gaps) if gaps else "every attempt stopped and detected, contained, bystander in budget"

    def to_json(self) -> dict[str, Any]:
        """The report as written by ``ringfence drill run -o`` (format :data:`DRILL_FORMAT`)."""
        return {
            "format": DRILL_FORMAT, "scenario": self.scenario, "target": self.target, "started": self.started,
            "finished": self.finished, "verdict": self.verdict.value, "why": self.why(),
            "attempts": [a.to_json() for a in self.attempts],
            "bystander": self.bystander.to_json() if self.bystander is not None else None,
            "contained": self.contained, "containment": self.containment,
            "requires_containment": self.requires_containment,
            "detection_seconds": self.detection_seconds, "containment_seconds": self.containment_seconds,
            "notes": list(self.notes), "evidence": list(self.evidence), "store": self.store,
        }


@dataclass(frozen=True)
class DrillContext:
    """What a scenario acts through: the cluster (site, policy, job progress, capture), the evidence store."""

    cluster: Cluster
    policy: Policy
    store: EvidenceStore
    workdir: Path
    target: str  # "lab:NAME" or "ssh:HOSTS" (for the record)
    progress: Progress = field(default=lambda _msg: None)
    timeout: float = 30.0  # seconds any one wait of the drill may take
    options: Mapping[str, Any] = field(default_factory=dict)  # target-specific parts (e.g. the lab itself)


class Scenario(Protocol):
    """One incident scenario, played for real."""

    name: str  # the CLI name: credential-compromise, malicious-job, exfiltration, management-plane-failure
    summary: str  # one line for ``ringfence drill list``

    def run(self, ctx: DrillContext) -> DrillReport:
        """Play the scenario on ``ctx``'s cluster and return what happened (never raises for an attack that
        got through: that is a ``fail`` report). Raises :class:`DrillError` when it cannot be played."""
        ...


__all__ = ["DRILL_FORMAT", "Attempt", "Bystander", "DrillContext", "DrillError", "DrillReport", "Progress",
           "Scenario"]
