"""Hand-written inline SVG charts of a benchmark comparison (no plotting library).

:func:`svg_chart` draws bus bandwidth or p99 latency against message size (log₂ x axis), the
baseline and the candidate on one chart: a line through the median over repeats and a bar from
the lowest to the highest repeat, so the reader sees the noise the gate saw. The result is a
self-contained ``<svg>`` element for the HTML report (``Assessment.charts``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape
from typing import Literal

from ringfence.bench.compare import human_size
from ringfence.bench.run import BenchRun
from ringfence.bench.stats import median

__all__ = ["Metric", "comparison_charts", "svg_chart"]

Metric = Literal["busbw", "p99"]

_W, _H = 640, 360
_L, _R, _T, _B = 70, 20, 40, 50  # margins
_COLOURS = ("#1f6feb", "#d1242f")  # baseline blue, candidate red
_TITLES = {"busbw": "bus bandwidth (GB/s)", "p99": "p99 latency (µs)"}


def _series(run: BenchRun, metric: Metric) -> list[tuple[int, float, float, float]]:
    """(size, median, min, max) over repeats, for sizes with a measured value."""
    out = []
    for size in run.config.sizes:
        vals = [v for r in run.per_repeat(size) if (v := (r.busbw if metric == "busbw" else r.p99_us)) is not None]
        if vals and (metric == "busbw" or min(vals) > 0):
            out.append((size, median(vals), min(vals), max(vals)))
    return out


def _nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    span = hi - lo
    if span <= 0:
        return [lo]
    raw = span / n
    step = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if raw <= m * step:
            step *= m
            break
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step) + 1)]


def _num(v: float) -> str:
    if v >= 100:
        return f"{v:.0f}"
    return f"{v:.3g}"


def svg_chart(baseline: BenchRun, candidate: BenchRun | None, metric: Metric) -> str:
    """An inline SVG of ``metric`` against size: baseline and candidate medians with min–max bars.

    Bus bandwidth uses a linear y axis from 0; p99 latency a log₁₀ one, since it spans orders of
    magnitude across sizes.
    """
    runs = [(baseline, _COLOURS[0])] + ([(candidate, _COLOURS[1])] if candidate is not None else [])
    series = [(run, colour, _series(run, metric)) for run, colour in runs]
    points = [p for _, _, s in series for p in s]
    title = f"{_TITLES[metric]} vs message size"
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_W} {_H}" width="{_W}" height="{_H}" '
             f'role="img" font-family="sans-serif" font-size="11">',
             f"<title>{escape(title)}</title>",
             f'<text x="{_W / 2}" y="18" text-anchor="middle" font-size="13">{escape(title)}</text>']
    if not points:
        parts.append(f'<text x="{_W / 2}" y="{_H / 2}" text-anchor="middle">no {escape(metric)} data</text></svg>')
        return "".join(parts)
    sizes = sorted({p[0] for p in points})
    xlo, xhi = math.log2(sizes[0]), math.log2(sizes[-1])
    log_y = metric == "p99"
    ymax = max(p[3] for p in points)
    if log_y:
        ylo_v = float(math.floor(math.log10(min(p[2] for p in points))))
        yhi_v = max(float(math.ceil(math.log10(ymax))), ylo_v + 1)
    else:
        ylo_v, yhi_v = 0.0, ymax * 1.1 if ymax > 0 else 1.0
    pw, ph = _W - _L - _R, _H - _T - _B

    def fx(size: int) -> float:
        return _L + (pw / 2 if xhi == xlo else (math.log2(size) - xlo) / (xhi - xlo) * pw)

    def fy(v: float) -> float:
        y = math.log10(v) if log_y else v
        return _T + ph - (y - ylo_v) / (yhi_v - ylo_v) * ph

    parts.append(f'<rect x="{_L}" y="{_T}" width="{pw}" height="{ph}" fill="none" stroke="#888"/>')
    step = max(1, math.ceil(len(sizes) / 10))  # at most ~10 labels on the x axis
    for i, s in enumerate(sizes):
        x = fx(s)
        parts.append(f'<line x1="{x:.1f}" y1="{_T + ph}" x2="{x:.1f}" y2="{_T + ph + 4}" stroke="#888"/>')
        if i % step == 0:
            parts.append(f'<text x="{x:.1f}" y="{_T + ph + 16}" text-anchor="middle">{escape(human_size(s))}</text>')
    yticks = [10.0 ** e for e in range(int(ylo_v), int(yhi_v) + 1)] if log_y else _nice_ticks(ylo_v, yhi_v)
    for v in yticks:
        y = fy(v)
        parts.append(f'<line x1="{_L}" y1="{y:.1f}" x2="{_L + pw}" y2="{y:.1f}" stroke="#eee"/>')
        parts.append(f'<text x="{_L - 6}" y="{y + 4:.1f}" text-anchor="end">{escape(_num(v))}</text>')
    parts.append(f'<text x="{_L + pw / 2}" y="{_H - 10}" text-anchor="middle">message size (log scale)</text>')
    parts.append(f'<text transform="translate(16 {_T + ph / 2}) rotate(-90)" text-anchor="middle">'
                 f"{escape(_TITLES[metric])}</text>")
    for i, (run, colour, pts) in enumerate(series):
        if not pts:
            continue
        path = " ".join(f"{'M' if j == 0 else 'L'}{fx(s):.1f},{fy(med):.1f}" for j, (s, med, _, _) in enumerate(pts))
        parts.append(f'<path d="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for s, med, lo, hi in pts:
            x = fx(s)
            parts.append(f'<line x1="{x:.1f}" y1="{fy(lo):.1f}" x2="{x:.1f}" y2="{fy(hi):.1f}" stroke="{colour}"/>')
            parts.append(f'<circle cx="{x:.1f}" cy="{fy(med):.1f}" r="3" fill="{colour}">'
                         f"<title>{escape(human_size(s))}: {escape(_num(med))}</title></circle>")
        role = "baseline" if i == 0 else "candidate"
        label = f"{role}: {run.config.backend}/{run.config.layer} ({len(run.repeats)} repeats)"
        ly = _T + 14 + 16 * i
        parts.append(f'<rect x="{_L + 10}" y="{ly - 9}" width="12" height="3" fill="{colour}"/>')
        parts.append(f'<text x="{_L + 28}" y="{ly - 4}">{escape(label)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def comparison_charts(baseline: BenchRun, candidate: BenchRun | None) -> list[tuple[str, str]]:
    """(title, svg) for busbw and p99 — the shape ``Assessment.charts`` takes."""
    return [(f"{_TITLES[m]} vs message size", svg_chart(baseline, candidate, m)) for m in _metrics()]


def _metrics() -> Sequence[Metric]:
    return ("busbw", "p99")
