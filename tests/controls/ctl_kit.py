"""Builders shared by the control tests: facts from hand-made flows, results keyed by control.

The lab policy, its variants and the flow-table builder come from ``tests/flow_kit.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from flow_kit import flows
from ringfence.analyze import classify
from ringfence.controls.interface import ControlResult, Facts
from ringfence.controls.registry import evaluate_all
from ringfence.policy import Policy

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
#: When the hand-made facts were "gathered": an hour before NOW, well inside the default maximum age.
TAKEN = NOW - timedelta(hours=1)


def facts_for(policy: Policy, rows: Sequence[dict[str, Any]], **extra: Any) -> Facts:
    """Facts with the given flows classified against ``policy`` (``now`` fixed: 2026-11-30), each fact
    given (flows and every ``extra``) stamped as gathered at :data:`TAKEN`."""
    taken = {name: TAKEN for name in ("flows", *extra) if name not in ("now", "taken")}
    return Facts(now=NOW, flows=classify(flows(rows), policy), flow_evidence=("ev-flows",), flow_sources=("test.pcap",),
                 taken=taken, **extra)


def by_control(policy: Policy, facts: Facts) -> dict[str, ControlResult]:
    """evaluate_all, keyed by control id."""
    return {r.id: r for r in evaluate_all(policy, facts)}


def verdicts(result: ControlResult) -> list[tuple[str, str]]:
    """(verdict, subject) of each finding."""
    return [(f.verdict.value, f.subject) for f in result.findings]
