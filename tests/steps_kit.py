"""The training job's progress as lab tests wait for it: the steps of the ranks that matter, each of them.

Imported as a top-level module (``from steps_kit import ...``), like ``flow_kit``. A sum over every worker
of the lab is not a wait for one job: with two jobs, the other job's steps satisfied "the job resumed
through the tunnel" while the tunnelled job had not yet stepped — CI then probed a tunnel that carried
nothing yet (`tests/assess/test_assess_loop_lab.py`, three permitted paths worker-1 → worker-0 timed out
twice).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from ringfence.lab import Lab


def member_steps(lab: Lab, members: Sequence[str]) -> dict[str, int]:
    """Each rank's step counter (0 for a rank whose status cannot be read yet)."""
    status = lab.agent_status()
    return {m: int(status.get(f"{m}-worker", {}).get("counters", {}).get("steps", 0)) for m in members}


def steps_advance(lab: Lab, members: Sequence[str], *, by: int, timeout: float) -> None:
    """Wait until every rank of ``members`` has taken ``by`` more steps; fail naming those that did not."""
    start, deadline = member_steps(lab, members), time.monotonic() + timeout
    while True:
        now = member_steps(lab, members)
        behind = [m for m in members if now[m] < start[m] + by]
        if not behind:
            return
        assert time.monotonic() < deadline, (
            f"{', '.join(behind)} took fewer than {by} steps in {timeout:.0f} s ({start} → {now}): "
            f"{lab.agent_status()}")
        time.sleep(0.5)


def stepped(lab: Lab, members: Sequence[str], before: dict[str, int], by: int) -> bool:
    """Whether every rank of ``members`` took ``by`` steps since ``before``."""
    now = member_steps(lab, members)
    return all(now[m] >= before[m] + by for m in members)


__all__ = ["member_steps", "stepped", "steps_advance"]
