"""The terminal summary: the verdict, a compact table of the controls, the top failures and what to run.

:func:`print_summary` writes to a console the caller chooses (the CLI uses stderr when the report
itself goes to stdout); rich drops colour by itself when that console is not a terminal or
``NO_COLOR`` is set. :func:`render` gives the same summary as plain text for the renderer registry.

A piped console is 80 columns wide, so the layout is built for that: the table holds only short,
unwrapped cells (id, verdict, counts) and adds the title — cut with an ellipsis, never wrapped — and
the owner only when there is room. What a reader needs after the verdict follows as plain lines: per
failing control its largest failure groups (:mod:`~ringfence.evidence.report.grouping`), then each
missing fact once, with the controls it leaves unknown and the command that gathers it.
"""

from __future__ import annotations

import io
import re
import textwrap
from typing import Final

from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from ringfence.controls.interface import Verdict
from ringfence.evidence.report.grouping import group_findings
from ringfence.evidence.report.interface import VERDICT_ORDER, Assessment, VerdictCounts, exit_code, human_bytes

_STYLE: Final = {
    Verdict.FAIL: "bold red",
    Verdict.UNKNOWN: "bold yellow",
    Verdict.EXEMPT: "magenta",
    Verdict.PASS: "green",
}
_WIDTH: Final = 120  # summary.txt: wide enough for the owner column
_HEADERS: Final = {Verdict.FAIL: "fail", Verdict.UNKNOWN: "unknown", Verdict.EXEMPT: "exempt", Verdict.PASS: "pass"}
_TITLE_MIN: Final = 12  # narrower than this, a cut title says nothing: leave it out
_OWNER_MIN_WIDTH: Final = 120  # the console width from which the owner gets a column
_TOP_GROUPS: Final = 3  # failure groups listed per failing control
_GAP: Final = 3  # box.SIMPLE_HEAD puts a space rule between two columns' one-space paddings
# Terminal control characters in data (ESC, C1's CSI, …) could recolour or rewrite the screen.
_CONTROL: Final = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def _clean(text: str) -> str:
    return _CONTROL.sub("\ufffd", text)


def _t(text: str, style: str | None = None) -> Text:
    """Data as inert text: control characters shown as U+FFFD, never interpreted as markup."""
    return Text(_clean(text), style=style or "")


def _line(console: Console, text: Text, indent: int = 0) -> None:
    """One line, cut with an ellipsis at the console's edge rather than wrapped."""
    console.print(Text(" " * indent).append(text), no_wrap=True, overflow="ellipsis", crop=True)


def _para(console: Console, text: str, indent: int) -> None:
    """Plain text wrapped at the console's edge with every line indented; words (commands) stay whole."""
    width = max(console.width - indent, 20)
    for row in textwrap.wrap(_clean(text), width, break_long_words=False, break_on_hyphens=False):
        console.print(Text(" " * indent + row), no_wrap=True, crop=False)


def _table(a: Assessment, show_owner: bool, title_room: int) -> Table:
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, expand=False, show_edge=False)
    table.add_column("control", no_wrap=True)
    table.add_column("verdict", no_wrap=True)
    for v in VERDICT_ORDER:
        table.add_column(_HEADERS[v], justify="right", no_wrap=True, style=_STYLE[v] if v is not Verdict.PASS else None)
    if show_owner:
        table.add_column("owner", no_wrap=True)
    show_title = title_room >= _TITLE_MIN
    if show_title:
        table.add_column("title", no_wrap=True, overflow="ellipsis", max_width=title_room)
    for c in a.controls:
        counts = VerdictCounts.of(f.verdict for f in c.findings)
        cells = [
            _t(c.id),
            _t(c.verdict.value.upper(), _STYLE[c.verdict]),
            *(_t(str(counts.get(v)) if counts.get(v) else "·") for v in VERDICT_ORDER),
        ]
        if show_owner:
            cells.append(_t(c.owner or "—"))
        if show_title:
            cells.append(_t(c.title))
        table.add_row(*cells)
    return table


def _fitted_table(a: Assessment, console: Console) -> Table:
    """The table at the console's width: the short columns whole, the title cut to what is left."""
    show_owner = console.width >= _OWNER_MIN_WIDTH
    bare = Measurement.get(console, console.options, _table(a, show_owner, 0)).maximum
    return _table(a, show_owner, console.width - bare - _GAP)


def _failures(a: Assessment, console: Console) -> None:
    failing = [c for c in a.controls if c.verdict is Verdict.FAIL]
    if not failing:
        return
    console.print(Text("Failing (largest first):", style=_STYLE[Verdict.FAIL]))
    for c in failing:
        groups = [g for g in group_findings(c.findings) if g.verdict is Verdict.FAIL]
        n = sum(g.count for g in groups)
        head = _t(c.id, "bold").append(f": {n} failing finding{'s' if n != 1 else ''}")
        if len(groups) > 1:
            head.append(f" in {len(groups)} groups")
        if c.owner:  # last: at the edge, the owner is what may be cut, not the counts
            head.append(_t(f" — owner {c.owner}"))
        _line(console, head, 2)
        for g in groups[:_TOP_GROUPS]:
            # The service and the size first: the list of sources is what may be cut at the edge.
            what = Text.assemble(("✗ ", _STYLE[Verdict.FAIL]), _t(g.subject, "bold"))
            if g.flow_group:
                what.append(f": {g.count} flow{'s' if g.count != 1 else ''}")
                if g.bytes is not None:
                    what.append(f", {'' if g.exact else '≈'}{human_bytes(g.bytes)}")
                srcs = [h for h, _ in g.sources]
                what.append(_t(f" from {', '.join(srcs[:3])}" + (f" +{len(srcs) - 3} more" if len(srcs) > 3 else "")))
            elif g.count > 1:
                what.append(f" (×{g.count})")
            _line(console, what, 4)
            _line(console, _t(g.message, "dim"), 6)
        if len(groups) > _TOP_GROUPS:
            rest = len(groups) - _TOP_GROUPS
            _line(console, _t(f"… {rest} more group{'s' if rest != 1 else ''}: see the HTML or JSON report", "dim"), 4)


def _not_proven(a: Assessment, console: Console) -> None:
    # One missing fact (no probe results) leaves several controls unknown: say it once, with all of them.
    reasons: dict[str, list[str]] = {}
    for c in a.controls:
        if not c.findings:
            reasons.setdefault("no findings: the control judged nothing", []).append(c.id)
        for f in c.findings:
            if f.verdict is Verdict.UNKNOWN and c.id not in reasons.setdefault(f.message, []):
                reasons[f.message].append(c.id)
    if not reasons:
        return
    console.print(Text("Not proven (unknown — the facts were not gathered):", style=_STYLE[Verdict.UNKNOWN]))
    for reason, ids in reasons.items():
        _para(console, ", ".join(ids) + ":", 2)
        _para(console, reason, 4)


def _overall(a: Assessment, console: Console) -> None:
    s = a.summary
    parts = [Text(f"{s.controls.get(v)} {v.value}", style=_STYLE[v]) for v in VERDICT_ORDER]
    line = Text("controls: ").append(Text(", ").join(parts))
    line.append(f"   findings: {s.findings.total}")
    console.print(line)


def _result(a: Assessment) -> Text:
    s = a.summary
    if exit_code(a) == 1:
        return Text(
            f"RESULT: FAIL ({s.controls.failed} control(s) fail, {s.controls.unknown} not proven)",
            style=_STYLE[Verdict.FAIL],
        )
    if s.controls.unknown:
        return Text(
            f"RESULT: no control fails, but {s.controls.unknown} control(s) are not proven",
            style=_STYLE[Verdict.UNKNOWN],
        )
    return Text("RESULT: no control fails", style=_STYLE[Verdict.PASS])


def print_summary(a: Assessment, console: Console) -> None:
    """Print the verdict, the controls table, top failures, what is unproven and warnings to ``console``."""
    s = a.summary
    console.print(_t(f"ringfence: {a.cluster}", "bold"))
    console.print(_fitted_table(a, console))
    _overall(a, console)
    if s.controls.unknown:
        console.print(
            Text(
                f"{s.controls.unknown} control(s) UNKNOWN — the facts to judge them were not gathered: not proven.",
                style=_STYLE[Verdict.UNKNOWN],
            )
        )
    _failures(a, console)
    _not_proven(a, console)
    for warning in a.warnings:
        console.print(_t(f"warning: {warning}", "yellow"))
    if a.chain_head is not None:
        # Never cut: a reader copies these to verify the evidence later.
        console.print(_t(f"evidence store: {a.evidence_store}"))
        console.print(_t(f"chain head: {a.chain_head}"))
    console.print(_result(a))


def render(a: Assessment) -> bytes:
    """The summary as plain UTF-8 text (no colour), for writing to a file."""
    buf = io.StringIO()
    console = Console(file=buf, width=_WIDTH, color_system=None, force_terminal=False, no_color=True, soft_wrap=False)
    print_summary(a, console)
    return buf.getvalue().encode("utf-8", "backslashreplace")


__all__ = ["print_summary", "render"]
