"""``report.html``: one self-contained, readable page (inline CSS, no scripts, nothing fetched).

Every piece of data is escaped; the only markup not produced here is the charts' inline SVG, which
:class:`~ringfence.evidence.report.interface.Assessment` checks is inert when it is built.
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from typing import Final

from ringfence.controls.interface import ControlResult, Verdict
from ringfence.evidence.report.interface import (
    VERDICT_ORDER,
    Assessment,
    VerdictCounts,
    clean_text,
    exit_code,
    human_bytes,
)

_PROTECTION_COLOURS: Final = {
    "encrypted": "#2e7d32",
    "integrity-only": "#00897b",
    "handshake-only": "#5c6bc0",
    "plaintext": "#c62828",
    "unknown": "#9e9e9e",
}
_OTHER_COLOUR: Final = "#8e24aa"

_CSS: Final = """
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;color:#1d1d1f;max-width:1200px;margin:0 auto;
padding:1.5rem;background:#fafafa}
h1{font-size:1.6rem;margin:.2rem 0}h2{font-size:1.25rem;margin-top:2rem;border-bottom:1px solid #ddd}
code,.mono{font-family:ui-monospace,"SFMono-Regular",Menlo,monospace;font-size:.88em}
.meta{color:#555}.badge{display:inline-block;border-radius:.8rem;padding:.1rem .7rem;margin:.1rem;color:#fff;
font-weight:600}
.v-fail{background:#c62828}.v-unknown{background:#ef6c00}.v-exempt{background:#6d4c41}.v-pass{background:#2e7d32}
.big{font-size:1.1rem;padding:.3rem 1rem}
.banner{padding:.7rem 1rem;border-radius:.4rem;font-weight:600;margin:.6rem 0}
.banner.fail{background:#ffebee;border:2px solid #c62828}.banner.unknown{background:#fff3e0;border:2px solid #ef6c00}
.banner.pass{background:#e8f5e9;border:2px solid #2e7d32}
.warn{background:#fff8e1;border-left:4px solid #f9a825;padding:.5rem 1rem .5rem 2rem}
table{border-collapse:collapse;width:100%;margin:.5rem 0;background:#fff}
th,td{border:1px solid #ddd;padding:.3rem .5rem;text-align:left;vertical-align:top}
th{background:#f0f0f0}td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.unapproved td{background:#ffebee}
details{background:#fff;border:1px solid #ddd;border-radius:.4rem;margin:.4rem 0;padding:.3rem .8rem}
details[open]{padding-bottom:.6rem}summary{cursor:pointer;font-weight:600}
.bar{display:flex;height:1.3rem;border-radius:.2rem;overflow:hidden;background:#eee;min-width:20rem}
.bar span{display:block;height:100%}
.legend span{display:inline-block;width:.9rem;height:.9rem;border-radius:.15rem;vertical-align:middle;
margin:0 .3rem 0 1rem}
figure{background:#fff;border:1px solid #ddd;border-radius:.4rem;padding:.5rem;margin:.5rem 0}
figcaption{font-weight:600}
"""


def _e(text: object) -> str:
    return html.escape(clean_text(str(text)), quote=True)


def _badge(verdict: Verdict, label: str, extra: str = "") -> str:
    return f'<span class="badge v-{verdict.value}{extra}">{_e(label)}</span>'


def _colour(protection: str) -> str:
    return _PROTECTION_COLOURS.get(protection, _OTHER_COLOUR)


def _summary(a: Assessment) -> Iterable[str]:
    s = a.summary
    yield '<section id="summary"><h2>Summary</h2><p>Controls: '
    yield from (_badge(v, f"{s.controls.get(v)} {v.value}", " big") for v in VERDICT_ORDER)
    yield "</p><p>Findings: "
    yield from (_badge(v, f"{s.findings.get(v)} {v.value}") for v in VERDICT_ORDER)
    yield "</p>"
    if exit_code(a):
        yield f'<p class="banner fail">FAIL: {s.controls.failed} of {len(a.controls)} controls fail.</p>'
    else:
        yield f'<p class="banner pass">No control fails ({s.controls.passed} pass, {s.controls.exempt} exempt).</p>'
    if s.controls.unknown or s.findings.unknown:
        yield (
            f'<p class="banner unknown">{s.controls.unknown} controls and {s.findings.unknown} findings are UNKNOWN: '
            "the facts to judge them were not gathered, so they are not proven.</p>"
        )
    if a.warnings:
        yield '<h3>Warnings</h3><ul class="warn">'
        yield from (f"<li>{_e(w)}</li>" for w in a.warnings)
        yield "</ul>"
    yield "</section>"


def _classes(a: Assessment) -> Iterable[str]:
    yield '<section id="classes"><h2>Bytes by traffic class and protection</h2>'
    if not a.class_bytes:
        yield "<p>No flows were observed.</p></section>"
        return
    protections = list(dict.fromkeys(p for by in a.class_bytes.values() for p in by))
    yield '<p class="legend">'
    yield from (f'<span style="background:{_colour(p)}"></span>{_e(p)}' for p in protections)
    yield "</p><table><tr><th>class</th><th>protection of its bytes</th>"
    yield from (f"<th>{_e(p)}</th>" for p in protections)
    yield "<th>total</th></tr>"
    for cls, by in a.class_bytes.items():
        total = sum(by.values())
        segments = "".join(
            f'<span style="width:{100 * n / total:.2f}%;background:{_colour(p)}" title="{_e(p)}: {_e(human_bytes(n))}">'
            "</span>"
            for p, n in by.items()
            if n and total
        )
        yield f'<tr><td>{_e(cls)}</td><td><div class="bar" role="img" aria-label="{_e(cls)}">{segments}</div></td>'
        yield from (f'<td class="num">{_e(human_bytes(by.get(p, 0)))}</td>' for p in protections)
        yield f'<td class="num">{_e(human_bytes(total))}</td></tr>'
    yield "</table></section>"


def _control(c: ControlResult) -> Iterable[str]:
    counts = VerdictCounts.of(f.verdict for f in c.findings)
    opened = " open" if c.verdict in (Verdict.FAIL, Verdict.UNKNOWN) else ""
    owner = f" — owner {_e(c.owner)}" if c.owner else " — no owner named"
    tally = ", ".join(f"{counts.get(v)} {v.value}" for v in VERDICT_ORDER if counts.get(v))
    yield f'<details id="control-{_e(c.id)}" class="control"{opened}><summary>{_badge(c.verdict, c.verdict.value)} '
    yield f'<code>{_e(c.id)}</code> {_e(c.title)}{owner} <span class="meta">({_e(tally or "no findings")})</span>'
    yield "</summary>"
    if not c.findings:
        yield "<p>No findings: nothing was judged, so this control is not proven.</p></details>"
        return
    yield "<table><tr><th>verdict</th><th>subject</th><th>message</th><th>evidence</th><th>remediation</th></tr>"
    for f in c.findings:
        evidence = "<br>".join(f"<code>{_e(ev)}</code>" for ev in f.evidence) or "—"
        yield (
            f"<tr><td>{_badge(f.verdict, f.verdict.value)}</td><td>{_e(f.subject)}</td><td>{_e(f.message)}</td>"
            f"<td>{evidence}</td><td>{_e(f.remediation) or '—'}</td></tr>"
        )
    yield "</table></details>"


def _matrix(a: Assessment) -> Iterable[str]:
    yield '<section id="matrix"><h2>Communication matrix (observed vs. approved)</h2>'
    if not a.matrix:
        yield "<p>No flows were observed.</p></section>"
        return
    yield (
        "<table><tr><th>source zone</th><th>destination zone</th><th>class</th><th>approved by</th>"
        "<th>approved</th><th>flows</th><th>bytes</th></tr>"
    )
    for r in a.matrix:
        row_class = "" if r.approved else ' class="unapproved"'
        yield (
            f"<tr{row_class}><td>{_e(r.src_zone)}</td><td>{_e(r.dst_zone)}</td><td>{_e(r.traffic_class)}</td>"
            f"<td>{_e(r.rule) if r.rule else '—'}</td><td>{'yes' if r.approved else '<strong>NO</strong>'}</td>"
            f'<td class="num">{r.flows}</td><td class="num">{_e(human_bytes(r.bytes))}</td></tr>'
        )
    yield "</table></section>"


def _charts(a: Assessment) -> Iterable[str]:
    if not a.charts:
        return
    yield '<section id="charts"><h2>Charts</h2>'
    for title, svg in a.charts:
        # The SVG was checked to be inert when the Assessment was built (check_svg).
        yield f"<figure><figcaption>{_e(title)}</figcaption>{clean_text(svg.strip())}</figure>"
    yield "</section>"


def _inputs_and_evidence(a: Assessment) -> Iterable[str]:
    yield '<section id="inputs"><h2>Inputs</h2>'
    if a.inputs:
        yield "<table><tr><th>name</th><th>kind</th><th>sha256</th><th>records</th><th>flows</th></tr>"
        for i in a.inputs:
            records = "—" if i.records is None else str(i.records)
            flows = "—" if i.flows is None else str(i.flows)
            yield (
                f'<tr><td>{_e(i.name)}</td><td>{_e(i.kind)}</td><td class="mono">{_e(i.sha256)}</td>'
                f'<td class="num">{records}</td><td class="num">{flows}</td></tr>'
            )
        yield "</table>"
    else:
        yield "<p>No inputs were recorded.</p>"
    yield '</section><section id="evidence"><h2>Evidence</h2>'
    if a.evidence_store is None or a.chain_head is None:
        yield "<p>No evidence store was used: the findings above are not backed by a tamper-evident record.</p>"
    else:
        yield (
            f"<p>Store <code>{_e(a.evidence_store)}</code>, chain head <code>{_e(a.chain_head)}</code>.</p>"
            "<p>Keep this head outside the store; to check later that nothing recorded so far was changed: "
            f"<code>ringfence evidence verify --store {_e(a.evidence_store)} --anchor {_e(a.chain_head)}</code></p>"
        )
    yield "</section>"


def render(a: Assessment) -> bytes:
    """The HTML report as UTF-8 bytes."""
    parts: list[str] = [
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>ringfence — {_e(a.cluster)}</title><style>{_CSS}</style></head><body>",
        f"<header><h1>ringfence assessment: {_e(a.cluster)}</h1>",
        f'<p class="meta">generated {_e(a.generated.isoformat())} by ringfence {_e(a.version)} from policy ',
        f'<code>{_e(a.policy_path)}</code> (sha256 <span class="mono">{_e(a.policy_sha256)}</span>)</p></header>',
    ]
    parts.extend(_summary(a))
    parts.extend(_classes(a))
    parts.append('<section id="controls"><h2>Control points</h2>')
    for c in a.controls:
        parts.extend(_control(c))
    parts.append("</section>")
    parts.extend(_matrix(a))
    parts.extend(_charts(a))
    parts.extend(_inputs_and_evidence(a))
    parts.append("</body></html>\n")
    return "".join(parts).encode("utf-8")


__all__ = ["render"]
