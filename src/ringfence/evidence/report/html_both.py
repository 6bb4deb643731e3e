"""The HTML report's "both questions" section: the security side and the performance side, side by side.

The headline (done / compliance gap / training-speed regression / not proven) on top; on the left the
controls' verdict counts, on the right each benchmarked layer's busbw and p99 against its baseline and
budget, with an inline bar chart of bus bandwidth per size (escaped text, no script, no links).
"""

from __future__ import annotations

from collections.abc import Iterable
from html import escape

from ringfence.controls.interface import Verdict
from ringfence.evidence.report.interface import Assessment, check_svg
from ringfence.evidence.report.performance import Headline, LayerPerformance, performance_side, security_side

_KIND = {Headline.DONE: "pass", Headline.COMPLIANCE_GAP: "fail", Headline.REGRESSION: "fail",
         Headline.NOT_PROVEN: "unknown"}

CSS = (
    ".both{display:flex;gap:1rem;flex-wrap:wrap}.both>div{flex:1 1 24rem;border:1px solid #ccc;border-radius:.5rem;"
    "padding:.6rem 1rem}.both h3{margin:.2rem 0 .5rem}"
)


def human_size(n: int) -> str:
    """``64 MiB`` style (message sizes are powers of two)."""
    size = float(n)
    for unit in ("B", "KiB", "MiB"):
        if size < 1024:
            return f"{size:g} {unit}"
        size /= 1024
    return f"{size:g} GiB"


def _e(text: object) -> str:
    return escape(str(text), quote=True)


def _f(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def busbw_chart(p: LayerPerformance) -> str:
    """Bars of baseline and candidate busbw per size (GB/s), as one inert inline SVG."""
    rows = [s for s in p.sizes if s.busbw_baseline is not None or s.busbw_candidate is not None]
    top = max([v for s in rows for v in (s.busbw_baseline, s.busbw_candidate) if v is not None] or [1.0]) or 1.0
    width, bar, gap = 420, 9, 8
    height = 20 + len(rows) * (2 * bar + gap)
    out = [f'<svg width="{width}" height="{height}" role="img" '
           f'aria-label="busbw per size, {_e(p.baseline)} vs {_e(p.layer)}">']
    y = 14
    for s in rows:
        out.append(f'<text x="0" y="{y + bar}" font-size="10">{_e(human_size(s.size))}</text>')
        for value, colour in ((s.busbw_baseline, "#90a4ae"), (s.busbw_candidate, "#1565c0")):
            w = 0 if value is None else int(300 * value / top)
            out.append(f'<rect x="60" y="{y}" width="{w}" height="{bar}" fill="{colour}"/>'
                       f'<text x="{64 + w}" y="{y + bar - 1}" font-size="9">{_e(_f(value))}</text>')
            y += bar
        y += gap
    out.append("</svg>")
    svg = "".join(out)
    check_svg(f"busbw {p.layer}", svg)
    return svg


def _layer(p: LayerPerformance) -> Iterable[str]:
    yield f"<h4>{_e(p.layer)} vs {_e(p.baseline)}: {_e(p.verdict.upper())}</h4>"
    if p.reasons:
        yield f"<p>{_e(p.reasons[0])}</p>"
    yield ('<table><tr><th>size</th><th>busbw base → cand (GB/s)</th><th>loss / limit</th>'
           '<th>p99 base → cand (µs)</th><th>growth / limit</th><th>verdict</th></tr>')
    for s in p.sizes:
        yield (f"<tr><td>{_e(human_size(s.size))}</td><td class=\"num\">{_f(s.busbw_baseline)} → "
               f"{_f(s.busbw_candidate)}</td><td class=\"num\">{_f(s.busbw_loss_pct, 1)} % / {s.busbw_limit_pct:g} %"
               f"</td><td class=\"num\">{_f(s.p99_baseline, 0)} → {_f(s.p99_candidate, 0)}</td><td class=\"num\">"
               f"{_f(s.p99_growth_pct, 1)} % / {s.p99_limit_pct:g} %</td><td>{_e(s.verdict)}</td></tr>")
    yield "</table>"
    yield busbw_chart(p)


def both_sides(a: Assessment) -> Iterable[str]:
    """The section, as HTML fragments."""
    head, why = a.headline
    s = a.summary.controls
    yield f'<section id="both"><h2>Both questions</h2><div class="verdict {_KIND[head]}">'
    yield f'<span class="word">{_e(head.value.upper())}</span><strong>{_e(why)}</strong></div><div class="both">'
    yield f"<div><h3>Security: {_e(security_side(a.controls))}</h3><p>"
    yield (f"{s.get(Verdict.PASS)} pass, {s.get(Verdict.EXEMPT)} exempt, {s.get(Verdict.FAIL)} fail, "
           f"{s.get(Verdict.UNKNOWN)} not proven of {len(a.controls)} controls.</p></div>")
    yield f"<div><h3>Performance: {_e(performance_side(a.performance) if a.performance else 'not measured')}</h3>"
    if not a.performance:
        yield "<p>No benchmark comparison was given: pass <code>--bench cmp.json</code> from " \
              "<code>ringfence bench compare --json -o cmp.json</code>.</p>"
    for p in a.performance:
        yield from _layer(p)
    yield "</div></div></section>"


__all__ = ["CSS", "both_sides", "busbw_chart"]
