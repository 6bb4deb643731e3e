"""The terminal summary: a rich table; colour only on a terminal; markup in data is not markup."""

from __future__ import annotations

import io
from collections.abc import Callable

from rich.console import Console

from ringfence.controls.interface import ControlResult, Verdict
from ringfence.evidence.report import Assessment
from ringfence.evidence.report.terminal import print_summary, render


def test_plain_render(assessment: Assessment) -> None:
    text = render(assessment).decode()
    assert "\x1b[" not in text
    rows = {line.split("│")[1].strip(): line for line in text.splitlines() if line.startswith("│")}
    assert set(rows) == {c.id for c in assessment.controls}
    assert "FAIL" in rows["zones"] and "UNKNOWN" in rows["containment"] and "netops" in rows["zones"]
    assert "controls: 1 fail, 2 unknown, 1 exempt, 1 pass" in text
    assert "2 control(s) UNKNOWN" in text
    assert "warning: lab.pcap: 3 truncated packets skipped" in text
    assert "RESULT: FAIL (1 control(s) fail)" in text


def test_colour_only_on_a_terminal(assessment: Assessment) -> None:
    plain = io.StringIO()
    print_summary(assessment, Console(file=plain, width=120))  # a StringIO is not a TTY
    assert "\x1b[" not in plain.getvalue()
    tty = io.StringIO()
    print_summary(assessment, Console(file=tty, width=120, force_terminal=True, color_system="standard"))
    assert "\x1b[1;31mFAIL" in tty.getvalue()


def test_data_is_neither_markup_nor_control_sequences(build: Callable[..., Assessment]) -> None:
    a = build(controls=(ControlResult("x", "[red]title[/red] \x1b[31mesc", Verdict.PASS, (), owner="[b]o[/b]"),))
    text = render(a).decode()
    assert "[red]title[/red]" in text and "[b]o[/b]" in text
    assert "\x1b" not in text and "\ufffd[31mesc" in text
