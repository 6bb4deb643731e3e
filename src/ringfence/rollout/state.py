"""The persisted state of one canary rollout: a JSON file written atomically after every change.

Every event gets the next sequence number (``seq``), so "the budget was recorded before step 3"
is a comparison of integers, immune to clock changes. Evidence ids link each step to the records
that prove it; run files (baseline, candidate) are kept next to the state file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from ringfence.atomic import write_atomic
from ringfence.errors import InputError

__all__ = [
    "FORMAT",
    "STEP_TITLES",
    "BudgetRecord",
    "Event",
    "RolloutState",
    "RunRecord",
    "StepRecord",
    "StepStatus",
    "load_state",
    "new_state",
    "save_state",
    "state_to_dict",
]

FORMAT = "ringfence.rollout/1"

#: The five steps of DESIGN.md, in order.
STEP_TITLES: dict[int, str] = {
    1: "TLS on storage, management and replication",
    2: "key management and rotation verified",
    3: "collective-path encryption on the canary pair",
    4: "the same all-reduce benchmark before and after on the canary pair",
    5: "collective-path encryption fleet-wide",
}


class StepStatus(StrEnum):
    """Where a step stands."""

    PENDING = "pending"
    DONE = "done"
    FAILED = "failed"
    INCONCLUSIVE = "inconclusive"  # step 4 only: rerun to add repeats
    ROLLED_BACK = "rolled-back"


@dataclass(frozen=True)
class StepRecord:
    """One step: its status, when it last changed (``seq``), its evidence and a one-line why."""

    number: int
    title: str
    status: StepStatus = StepStatus.PENDING
    seq: int = 0
    evidence: tuple[str, ...] = ()
    detail: str = ""


@dataclass(frozen=True)
class BudgetRecord:
    """The performance budget as recorded, and when (``seq``)."""

    budget: dict[str, Any]
    seq: int
    evidence: str
    source: str


@dataclass(frozen=True)
class RunRecord:
    """A benchmark run kept for the gate: its file (relative to the state file) and evidence."""

    path: str
    config_hash: str
    seq: int
    evidence: str


@dataclass(frozen=True)
class Event:
    """One line of the history: what was asked, what happened."""

    seq: int
    at: str
    action: str  # plan, budget, baseline, advance, refused, abort
    step: int | None
    outcome: str
    detail: str
    evidence: tuple[str, ...] = ()


@dataclass(frozen=True)
class RolloutState:
    """Everything about one rollout."""

    id: str
    created: str
    pair: tuple[str, str]
    fleet: tuple[str, ...]
    layer: str
    seq: int
    steps: tuple[StepRecord, ...]
    budget: BudgetRecord | None = None
    baseline: RunRecord | None = None
    candidate: RunRecord | None = None
    verdict: str | None = None  # the gate's answer at step 4
    aborted: str | None = None  # why, when aborted
    history: tuple[Event, ...] = ()
    bench: dict[str, Any] = field(default_factory=dict)  # benchmark settings fixed at plan time

    def step(self, n: int) -> StepRecord:
        """Step ``n`` (1–5)."""
        return self.steps[n - 1]

    def with_step(self, rec: StepRecord) -> RolloutState:
        """A copy with step ``rec.number`` replaced."""
        steps = list(self.steps)
        steps[rec.number - 1] = rec
        return replace(self, steps=tuple(steps))

    def next_step(self) -> int | None:
        """The first step not done (None when all are)."""
        return next((s.number for s in self.steps if s.status is not StepStatus.DONE), None)


def new_state(rollout_id: str, created: str, pair: tuple[str, str], fleet: tuple[str, ...], layer: str) -> RolloutState:
    """A fresh plan: five pending steps."""
    steps = tuple(StepRecord(n, t) for n, t in STEP_TITLES.items())
    return RolloutState(id=rollout_id, created=created, pair=pair, fleet=fleet, layer=layer, seq=0, steps=steps)


# --- on disk (pydantic at the edge) -------------------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class _Step(_Strict):
    number: int
    title: str
    status: str
    seq: int
    evidence: list[str]
    detail: str


class _Budget(_Strict):
    budget: dict[str, Any]
    seq: int
    evidence: str
    source: str


class _Run(_Strict):
    path: str
    config_hash: str
    seq: int
    evidence: str


class _Event(_Strict):
    seq: int
    at: str
    action: str
    step: int | None
    outcome: str
    detail: str
    evidence: list[str]


class _State(_Strict):
    format: str
    id: str
    created: str
    pair: list[str]
    fleet: list[str]
    layer: str
    seq: int
    steps: list[_Step]
    budget: _Budget | None
    baseline: _Run | None
    candidate: _Run | None
    verdict: str | None
    aborted: str | None
    history: list[_Event]
    bench: dict[str, Any]


def state_to_dict(state: RolloutState) -> dict[str, Any]:
    def run(r: RunRecord | None) -> dict[str, Any] | None:
        return None if r is None else {"path": r.path, "config_hash": r.config_hash, "seq": r.seq,
                                       "evidence": r.evidence}

    b = state.budget
    return {
        "format": FORMAT, "id": state.id, "created": state.created, "pair": list(state.pair),
        "fleet": list(state.fleet), "layer": state.layer, "seq": state.seq,
        "steps": [{"number": s.number, "title": s.title, "status": s.status.value, "seq": s.seq,
                   "evidence": list(s.evidence), "detail": s.detail} for s in state.steps],
        "budget": None if b is None else {"budget": b.budget, "seq": b.seq, "evidence": b.evidence,
                                          "source": b.source},
        "baseline": run(state.baseline), "candidate": run(state.candidate), "verdict": state.verdict,
        "aborted": state.aborted,
        "history": [{"seq": e.seq, "at": e.at, "action": e.action, "step": e.step, "outcome": e.outcome,
                     "detail": e.detail, "evidence": list(e.evidence)} for e in state.history],
        "bench": state.bench,
    }


def save_state(state: RolloutState, path: Path) -> None:
    """Write the state file atomically."""
    write_atomic(path, (json.dumps(state_to_dict(state), indent=1) + "\n").encode())


def load_state(path: Path) -> RolloutState:
    """Read a state file; errors name the file and the field."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(str(path), f"cannot read the rollout state: {exc.strerror or exc}",
                         hint="create it with `ringfence rollout plan`") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(str(path), f"not a JSON rollout state: {exc}") from exc
    try:
        m = _State.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise InputError(str(path), f"{'.'.join(map(str, first['loc']))}: {first['msg']}") from exc
    if m.format != FORMAT or len(m.pair) != 2 or [s.number for s in m.steps] != list(STEP_TITLES):
        raise InputError(str(path), f"not a {FORMAT} state with a pair and five steps")
    try:
        steps = tuple(StepRecord(s.number, s.title, StepStatus(s.status), s.seq, tuple(s.evidence), s.detail)
                      for s in m.steps)
    except ValueError as exc:
        raise InputError(str(path), f"steps: {exc}") from exc

    def run(r: _Run | None) -> RunRecord | None:
        return None if r is None else RunRecord(r.path, r.config_hash, r.seq, r.evidence)

    return RolloutState(
        id=m.id, created=m.created, pair=(m.pair[0], m.pair[1]), fleet=tuple(m.fleet), layer=m.layer, seq=m.seq,
        steps=steps,
        budget=None if m.budget is None else BudgetRecord(m.budget.budget, m.budget.seq, m.budget.evidence,
                                                           m.budget.source),
        baseline=run(m.baseline), candidate=run(m.candidate), verdict=m.verdict, aborted=m.aborted,
        history=tuple(Event(e.seq, e.at, e.action, e.step, e.outcome, e.detail, tuple(e.evidence))
                      for e in m.history),
        bench=dict(m.bench),
    )
