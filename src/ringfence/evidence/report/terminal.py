"""The terminal summary: a rich table of the controls, their verdicts and finding counts.

:func:`print_summary` writes to a console the caller chooses (the CLI uses stderr when the report
itself goes to stdout); rich drops colour by itself when that console is not a terminal or
``NO_COLOR`` is set. :func:`render` gives the same summary as plain text for the renderer registry.
"""

from __future__ import annotations

import io
import re
from typing import Final

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ringfence.controls.interface import Verdict
from ringfence.evidence.report.interface import VERDICT_ORDER, Assessment, VerdictCounts, exit_code

_STYLE: Final = {
    Verdict.FAIL: "bold red",
    Verdict.UNKNOWN: "bold yellow",
    Verdict.EXEMPT: "magenta",
    Verdict.PASS: "green",
}
_WIDTH: Final = 110
# Terminal control characters in data (ESC, C1's CSI, …) could recolour or rewrite the screen.
_CONTROL: Final = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def _t(text: str, style: str | None = None) -> Text:
    """Data as inert text: control characters shown as U+FFFD, never interpreted as markup."""
    return Text(_CONTROL.sub("\ufffd", text), style=style or "")


def _table(a: Assessment) -> Table:
    table = Table(title=_t(f"ringfence: {a.cluster}"), title_justify="left", expand=False)
    table.add_column("control", no_wrap=True)
    table.add_column("title")
    table.add_column("verdict", no_wrap=True)
    for v in VERDICT_ORDER:
        table.add_column(v.value, justify="right", style=_STYLE[v] if v is not Verdict.PASS else None)
    table.add_column("owner")
    for c in a.controls:
        counts = VerdictCounts.of(f.verdict for f in c.findings)
        table.add_row(
            _t(c.id),
            _t(c.title),
            _t(c.verdict.value.upper(), _STYLE[c.verdict]),
            *(_t(str(counts.get(v)) if counts.get(v) else "·") for v in VERDICT_ORDER),
            _t(c.owner or "—"),
        )
    return table


def print_summary(a: Assessment, console: Console) -> None:
    """Print the summary table, the overall result, unknowns and warnings to ``console``."""
    s = a.summary
    console.print(_table(a))
    parts = [Text(f"{s.controls.get(v)} {v.value}", style=_STYLE[v]) for v in VERDICT_ORDER]
    line = Text("controls: ").append(Text(", ").join(parts))
    line.append(f"   findings: {s.findings.total}")
    console.print(line)
    if s.controls.unknown:
        console.print(
            Text(
                f"{s.controls.unknown} control(s) UNKNOWN — the facts to judge them were not gathered: not proven.",
                style=_STYLE[Verdict.UNKNOWN],
            )
        )
    for warning in a.warnings:
        console.print(_t(f"warning: {warning}", "yellow"))
    if a.chain_head is not None:
        console.print(_t(f"evidence: {a.evidence_store} chain head {a.chain_head}"))
    if exit_code(a):
        console.print(Text(f"RESULT: FAIL ({s.controls.failed} control(s) fail)", style=_STYLE[Verdict.FAIL]))
    else:
        console.print(Text("RESULT: no control fails", style=_STYLE[Verdict.PASS]))


def render(a: Assessment) -> bytes:
    """The summary as plain UTF-8 text (no colour), for writing to a file."""
    buf = io.StringIO()
    console = Console(file=buf, width=_WIDTH, color_system=None, force_terminal=False, no_color=True, soft_wrap=False)
    print_summary(a, console)
    return buf.getvalue().encode("utf-8", "backslashreplace")


__all__ = ["print_summary", "render"]
