"""The report input model: computed summary, exit code, ordering and chart checks."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest

from ringfence.controls.interface import ControlResult, Finding, Verdict
from ringfence.evidence.report import DEFAULT_NAMES, RENDERERS, Assessment, ReportError, exit_code, write_report
from ringfence.evidence.report.interface import check_svg, human_bytes

Build = Callable[..., Assessment]


def test_summary_is_computed_per_control_and_per_finding(assessment: Assessment) -> None:
    s = assessment.summary
    assert s.controls.as_dict() == {"pass": 1, "fail": 1, "exempt": 1, "unknown": 2}
    assert s.findings.as_dict() == {"pass": 2, "fail": 1, "exempt": 1, "unknown": 1}
    assert s.controls.total == 5 and s.findings.total == 5


def test_exit_code_0_only_when_everything_is_proven(assessment: Assessment, build: Build) -> None:
    assert exit_code(assessment) == 1
    without_fail = tuple(c for c in assessment.controls if c.verdict is not Verdict.FAIL)
    # Unknowns remain: nothing fails, but not everything is proven — 3, and 0 only when accepted.
    assert exit_code(build(controls=without_fail)) == 3
    assert exit_code(build(controls=without_fail), allow_unknown=True) == 0
    proven = tuple(c for c in without_fail if c.verdict is not Verdict.UNKNOWN)
    assert proven and exit_code(build(controls=proven)) == 0
    assert exit_code(build(controls=())) == 3  # nothing judged is nothing proven
    # A failing finding under a control whose aggregate was (wrongly) not fail still fails the run.
    odd = ControlResult("x", "X", Verdict.PASS, (Finding("x", Verdict.FAIL, "s", "m"),))
    assert exit_code(build(controls=(odd,))) == 1


def test_class_bytes_are_ordered_and_read_only(assessment: Assessment) -> None:
    assert list(assessment.class_bytes) == ["storage", "collective", "unclassified"]
    assert list(assessment.class_bytes["storage"]) == ["encrypted", "plaintext"]
    with pytest.raises(TypeError):
        assessment.class_bytes["storage"]["plaintext"] = 0  # type: ignore[index]


def test_bad_assessments_are_refused(build: Build) -> None:
    with pytest.raises(ReportError, match="timezone"):
        build(generated=datetime(2025, 1, 1))
    with pytest.raises(ReportError, match="byte count"):
        build(class_bytes={"storage": {"plaintext": -1}})
    dup = ControlResult("zones", "Z", Verdict.PASS, ())
    with pytest.raises(ReportError, match="duplicate"):
        build(controls=(dup, dup))


@pytest.mark.parametrize(
    "svg",
    [
        "<svg><script>alert(1)</script></svg>",
        '<svg><image href="https://example.org/x.png"/></svg>',
        '<svg><a href="http://example.org">x</a></svg>',
        '<svg onload="alert(1)"></svg>',
        '<svg><rect style="fill:url(http://x/y)"/></svg>',
        "<svg><foreignObject><div>x</div></foreignObject></svg>",
        '<svg xmlns="http://www.w3.org/2000/svg"></svg>',
        "<div>not svg</div>",
    ],
)
def test_charts_must_be_inert_inline_svg(svg: str) -> None:
    with pytest.raises(ReportError):
        check_svg("t", svg)


def test_inert_chart_with_local_references_is_accepted() -> None:
    check_svg("t", '<svg><defs><linearGradient id="g"/></defs><rect fill="url(#g)"/><a href="#g">x</a></svg>')


def test_human_bytes() -> None:
    assert [human_bytes(n) for n in (0, 999, 1000, 1_500_000, 5_000_000_000, 7 * 10**15)] == [
        "0 B",
        "999 B",
        "1.00 kB",
        "1.50 MB",
        "5.00 GB",
        "7000.00 TB",
    ]


def test_every_renderer_is_deterministic_and_written_atomically(assessment: Assessment, tmp_path: Path) -> None:
    assert set(RENDERERS) == set(DEFAULT_NAMES)
    for fmt, render in RENDERERS.items():
        first = render(assessment)
        assert first == render(assessment), fmt
        path = write_report(assessment, fmt, tmp_path / DEFAULT_NAMES[fmt])
        assert path.read_bytes() == first
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(DEFAULT_NAMES.values())  # no temp files left
    with pytest.raises(ReportError, match="unknown report format"):
        write_report(assessment, "pdf", tmp_path / "x.pdf")
