"""change_control: a traced change passes; each step of the trace removed makes it not pass; the
findings for self-approval, unreviewed emergency changes and overdue rule reviews."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest
from ctl_kit import NOW, by_control
from test_controls_requirements import CHANGES, POLICY, complete

from ringfence.controls.interface import Verdict


def _result(changes: list[dict[str, Any]]) -> Any:
    return by_control(POLICY, dataclasses.replace(complete(), changes=changes))["change_control"]


def test_the_traced_change_passes() -> None:
    result = _result([dict(c) for c in CHANGES])
    assert result.verdict is Verdict.PASS
    assert any(f.requirement == "change-traced" and f.verdict is Verdict.PASS for f in result.findings)


@pytest.mark.parametrize(("step", "edit"), [
    ("request", lambda cs: [{**cs[0], "request": None}, cs[1]]),
    ("approval", lambda cs: [{**cs[0], "approved_by": None}, cs[1]]),
    ("approval by another", lambda cs: [{**cs[0], "approved_by": "dev@lab"}, cs[1]]),
    ("requester", lambda cs: [{**cs[0], "requested_by": None}, cs[1]]),
    ("deploy", lambda cs: [cs[1]]),
    ("probe after deploy", lambda cs: [{**cs[0], "verified": None}, cs[1]]),
    ("live ruleset after deploy", lambda cs: [{**cs[0], "live": None}, cs[1]]),
    ("rollback", lambda cs: [cs[0]]),
    ("live ruleset after rollback", lambda cs: [cs[0], {**cs[1], "live": None}]),
    ("rollback of this change", lambda cs: [cs[0], {**cs[1], "previous": "other"}]),
])
def test_each_step_removed_makes_it_not_pass(step: str, edit: Any) -> None:
    result = _result(edit([dict(c) for c in CHANGES]))
    assert result.verdict is not Verdict.PASS, step
    assert not any(f.requirement == "change-traced" and f.verdict is Verdict.PASS for f in result.findings), step


def test_approval_by_the_requester_fails() -> None:
    result = _result([{**CHANGES[0], "approved_by": "dev@lab"}, CHANGES[1]])
    assert result.verdict is Verdict.FAIL
    assert any("own requester" in f.message for f in result.findings if f.verdict is Verdict.FAIL)


def test_an_emergency_change_fails_until_reviewed_by_someone_else() -> None:
    emergency = {"id": "e1", "action": "apply", "version": "e", "applied_at": (NOW - timedelta(hours=1)).isoformat(),
                 "emergency": True, "deployed_by": "oncall@lab", "verified": True, "verified_by": "ev-p",
                 "evidence": "ev-e"}
    unreviewed = _result([*CHANGES, emergency])
    assert unreviewed.verdict is Verdict.FAIL
    assert any("not reviewed afterwards" in f.message for f in unreviewed.findings)
    self_reviewed = _result([*CHANGES, {**emergency, "reviewed_by": "oncall@lab",
                                        "reviewed_at": NOW.isoformat()}])
    assert any("reviewed by whoever deployed it" in f.message for f in self_reviewed.findings)
    reviewed = _result([*CHANGES, {**emergency, "reviewed_by": "cab@lab", "reviewed_at": NOW.isoformat()}])
    assert reviewed.verdict is Verdict.PASS


def test_rules_not_reviewed_within_the_interval_fail() -> None:
    old = (NOW - timedelta(days=200)).isoformat()
    stale = [{**CHANGES[0], "applied_at": old}, {**CHANGES[1], "applied_at": old}]
    # the facts are fresh (gathered now); the last review is 200 days ago, beyond the default 183 days
    result = _result(stale)
    assert result.verdict is Verdict.FAIL
    assert any(f.requirement == "rules-reviewed" and "PCI DSS 1.2.7" in f.message for f in result.findings)
    never = _result([{**CHANGES[0], "approved_by": None}])
    assert any(f.requirement == "rules-reviewed" and f.verdict is Verdict.FAIL for f in never.findings)
