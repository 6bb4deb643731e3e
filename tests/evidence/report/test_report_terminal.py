"""The terminal summary: readable at 80 columns, colour only on a terminal, markup in data is not markup."""

from __future__ import annotations

import io
from collections.abc import Callable

from rich.console import Console

from ringfence.controls.interface import ControlResult, Verdict
from ringfence.evidence.report import Assessment
from ringfence.evidence.report.terminal import print_summary, render


def _plain(a: Assessment, width: int) -> str:
    buf = io.StringIO()  # not a TTY: what `ringfence assess … | cat` gets
    print_summary(a, Console(file=buf, width=width))
    return buf.getvalue()


def _table_rows(text: str, a: Assessment) -> dict[str, str]:
    ids = {c.id for c in a.controls}
    verdicts = {v.value.upper() for v in Verdict}
    return {
        words[0]: line
        for line in text.splitlines()
        if len(words := line.split()) > 1 and words[0] in ids and words[1] in verdicts
    }


def test_plain_render(assessment: Assessment) -> None:
    text = render(assessment).decode()
    assert "\x1b[" not in text
    rows = _table_rows(text, assessment)
    assert set(rows) == {c.id for c in assessment.controls}
    assert "FAIL" in rows["zones"] and "UNKNOWN" in rows["containment"] and "netops" in rows["zones"]
    assert "Zones and segmentation" in rows["zones"]  # the file is wide enough for titles and owners
    assert "controls: 1 fail, 2 unknown, 1 exempt, 1 pass" in text
    assert "2 control(s) UNKNOWN" in text
    assert "warning: lab.pcap: 3 truncated packets skipped" in text
    assert f"chain head: 7:{'ef' * 32}" in text
    assert "RESULT: FAIL (1 control(s) fail, 2 not proven)" in text


def test_narrow_output_does_not_wrap_the_table(many_flows: Assessment) -> None:
    text = _plain(many_flows, 80)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    header = next(i for i, line in enumerate(lines) if line.startswith("control "))
    table = lines[header + 2 : header + 2 + len(many_flows.controls)]
    # one line per control, each starting with its whole id: no title wrapped into continuation lines
    assert [line.split()[0] for line in table] == [c.id for c in many_flows.controls]
    assert lines[header + 2 + len(many_flows.controls)].startswith("controls: ")
    assert "Encryption per tra" in table[0] and table[0].rstrip().endswith("…")
    assert "ml-platform-security@lab" not in table[0]  # no room for the owner column at 80
    assert table[0].split()[1:7] == ["FAIL", "190", "1", "·", "1", "Encryption"]


def test_narrow_output_lists_top_failures_and_what_to_run(many_flows: Assessment) -> None:
    text = _plain(many_flows, 80)
    assert "  encryption_keys: 190 failing findings in 2 groups — owner ml-platform-securit…\n" in text
    assert "    ✗ 10.77.2.10:8080 (storage): 180 flows, ≈34.42 MB from 10.77.1.10, 10.77.1.…\n" in text
    assert "    ✗ 10.77.9.10:9000 (replication): 10 flows, ≈2.64 MB from 10.77.2.10\n" in text
    assert "      plaintext payload on class storage, which requires protection (tls)\n" in text
    assert text.index("(storage): 180 flows") < text.index("(replication): 10 flows")
    # the missing fact is said once, with every control it leaves unknown; commands are never cut
    assert text.count("ringfence probe POLICY") == 1
    assert "  zones, egress:\n    no denied behaviour proven: run `ringfence probe POLICY --target lab -o\n" in text
    assert "  containment:\n    no findings: the control judged nothing\n" in text


def test_wide_output_shows_titles_and_owners(many_flows: Assessment) -> None:
    rows = _table_rows(_plain(many_flows, 160), many_flows)
    assert "ml-platform-security@lab" in rows["encryption_keys"]
    assert "Encryption per traffic class, and key management with a long title" in rows["encryption_keys"]
    assert len(rows) == len(many_flows.controls)


def test_very_narrow_output_drops_the_title(many_flows: Assessment) -> None:
    rows = _table_rows(_plain(many_flows, 60), many_flows)
    assert len(rows) == len(many_flows.controls) and "Encryption" not in rows["encryption_keys"]


def test_colour_only_on_a_terminal(assessment: Assessment) -> None:
    assert "\x1b[" not in _plain(assessment, 120)
    tty = io.StringIO()
    print_summary(assessment, Console(file=tty, width=120, force_terminal=True, color_system="standard"))
    assert "\x1b[1;31mFAIL" in tty.getvalue()


def test_data_is_neither_markup_nor_control_sequences(build: Callable[..., Assessment]) -> None:
    a = build(controls=(ControlResult("x", "[red]title[/red] \x1b[31mesc", Verdict.PASS, (), owner="[b]o[/b]"),))
    text = render(a).decode()
    assert "[red]title[/red]" in text and "[b]o[/b]" in text
    assert "\x1b" not in text and "\ufffd[31mesc" in text
    hostile = build(
        controls=(ControlResult("y", "t", Verdict.UNKNOWN, (), owner="o"),),
        warnings=("[bold]w[/bold]\x1b]0;title\x07",),
    )
    text = _plain(hostile, 80)
    assert "[bold]w[/bold]" in text and "\x1b" not in text and "\x07" not in text
