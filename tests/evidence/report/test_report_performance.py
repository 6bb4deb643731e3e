"""The headline joins both sides; the exit code counts a regression as a failure."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ringfence.controls.interface import ControlResult, Verdict
from ringfence.evidence.report import Assessment, exit_code
from ringfence.evidence.report.performance import Headline, LayerPerformance, SizePerformance, headline

SIZE = SizePerformance(64 << 20, "pass", 1.2, 1.18, 1.6, 5.0, 900.0, 950.0, 5.5, 25.0)


def _layer(verdict: str) -> LayerPerformance:
    return LayerPerformance("wireguard", "none", verdict, ("reason",), (SIZE,))


def _controls(*verdicts: Verdict) -> tuple[ControlResult, ...]:
    return tuple(ControlResult(f"c{i}", "C", v, ()) for i, v in enumerate(verdicts))


@pytest.mark.parametrize(
    ("controls", "perf", "expected"),
    [
        ((Verdict.PASS, Verdict.EXEMPT), ("pass",), Headline.DONE),
        ((Verdict.PASS, Verdict.FAIL), ("pass",), Headline.COMPLIANCE_GAP),
        ((Verdict.PASS, Verdict.FAIL), ("fail",), Headline.COMPLIANCE_GAP),
        ((Verdict.PASS,), ("fail",), Headline.REGRESSION),
        ((Verdict.PASS, Verdict.UNKNOWN), ("fail",), Headline.REGRESSION),
        ((Verdict.PASS,), ("pass", "inconclusive"), Headline.NOT_PROVEN),
        ((Verdict.PASS,), (), Headline.NOT_PROVEN),
        ((Verdict.UNKNOWN,), ("pass",), Headline.NOT_PROVEN),
    ],
)
def test_headline(controls: tuple[Verdict, ...], perf: tuple[str, ...], expected: Headline) -> None:
    head, text = headline(_controls(*controls), [_layer(v) for v in perf])
    assert head is expected and "security:" in text and "performance:" in text


def test_exit_code_counts_the_performance_side(build: Callable[..., Assessment]) -> None:
    proven = _controls(Verdict.PASS)
    assert exit_code(build(controls=proven, performance=(_layer("pass"),))) == 0
    assert exit_code(build(controls=proven, performance=(_layer("fail"),))) == 1
    assert exit_code(build(controls=proven, performance=(_layer("inconclusive"),))) == 3
    assert exit_code(build(controls=proven)) == 0  # no bench given: the controls decide
