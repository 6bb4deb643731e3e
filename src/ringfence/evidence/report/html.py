"""``report.html``: one self-contained, readable page (inline CSS, no scripts, nothing fetched).

The page is laid out for a security reviewer, most important first: the verdict and the figures
behind it, a scoreboard of the controls, what is *not proven* and the command that would prove it,
the bytes per traffic class by protection, the communication matrix, then each control with its
findings folded into groups (:mod:`~ringfence.evidence.report.grouping`) whose individual findings
open on demand (``<details>``, so still no script). Inputs and the evidence chain close the page.

Every piece of data is escaped; the only markup not produced here is the charts' inline SVG, which
:class:`~ringfence.evidence.report.interface.Assessment` checks is inert when it is built.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from typing import Final

from ringfence.controls.interface import ControlResult, Finding, Verdict
from ringfence.evidence.report.grouping import FindingGroup, group_findings, split_remediation
from ringfence.evidence.report.html_both import CSS as BOTH_CSS
from ringfence.evidence.report.html_both import both_sides
from ringfence.evidence.report.interface import (
    VERDICT_ORDER,
    Assessment,
    MatrixRow,
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
_VERDICT_WORDS: Final = {
    Verdict.FAIL: "fail",
    Verdict.UNKNOWN: "not proven",
    Verdict.EXEMPT: "exempt",
    Verdict.PASS: "pass",
}
# A bar segment narrower than this gets no text label (it would not fit); its title and the table say it.
_LABEL_MIN_PCT: Final = 6.0
_NAME_MIN_PCT: Final = 30.0
_MAX_SOURCES: Final = 6

_CSS: Final = """
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;color:#1d1d1f;max-width:1280px;margin:0 auto;
padding:1.5rem;background:#fafafa}
h1{font-size:1.6rem;margin:.2rem 0}h2{font-size:1.25rem;margin-top:2rem;border-bottom:1px solid #ddd}
h3{font-size:1.05rem;margin:1rem 0 .3rem}
code,.mono{font-family:ui-monospace,"SFMono-Regular",Menlo,monospace;font-size:.88em}
code{background:#f2f2f2;border-radius:.2rem;padding:0 .2rem}
.meta{color:#555}.small{font-size:.85em}.muted{color:#999}
.badge{display:inline-block;border-radius:.8rem;padding:.1rem .7rem;margin:.1rem;color:#fff;font-weight:600;
white-space:nowrap}
.v-fail{background:#c62828}.v-unknown{background:#ef6c00}.v-exempt{background:#6d4c41}.v-pass{background:#2e7d32}
.v-unused{background:#757575}
.big{font-size:1.1rem;padding:.3rem 1rem}
.verdict{padding:1rem 1.2rem;border-radius:.5rem;margin:.8rem 0}
.verdict .word{font-size:2rem;font-weight:800;letter-spacing:.05em;margin-right:1rem;vertical-align:middle}
.verdict.fail{background:#ffebee;border:3px solid #c62828}.verdict.fail .word{color:#c62828}
.verdict.unknown{background:#fff3e0;border:3px solid #ef6c00}.verdict.unknown .word{color:#ef6c00}
.verdict.pass{background:#e8f5e9;border:3px solid #2e7d32}.verdict.pass .word{color:#2e7d32}
.verdict ul{margin:.5rem 0 0 0}
.banner{padding:.7rem 1rem;border-radius:.4rem;font-weight:600;margin:.6rem 0}
.banner.unknown{background:#fff3e0;border:2px solid #ef6c00}
.warn{background:#fff8e1;border-left:4px solid #f9a825;padding:.5rem 1rem .5rem 2rem}
table{border-collapse:collapse;width:100%;margin:.5rem 0;background:#fff}
th,td{border:1px solid #ddd;padding:.3rem .5rem;text-align:left;vertical-align:top}
th{background:#f0f0f0}td.num,th.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.zero{color:#bbb}
tr.unapproved td{background:#ffebee}tr.unused td{background:#f5f5f5;color:#555}
tr.g-fail td{background:#fff5f5}tr.g-unknown td{background:#fff8ef}
tr.members td{background:#fcfcfc;padding:.1rem .5rem}tr.members td td:first-child{white-space:nowrap}
details{background:#fff;border:1px solid #ddd;border-radius:.4rem;margin:.4rem 0;padding:.3rem .8rem}
details[open]{padding-bottom:.6rem}summary{cursor:pointer;font-weight:600}
details.members{border:none;background:none;margin:0;padding:0}details.members summary{font-weight:400;color:#1565c0}
.control.v-border-fail{border-left:6px solid #c62828}.control.v-border-unknown{border-left:6px solid #ef6c00}
.control.v-border-pass{border-left:6px solid #2e7d32}.control.v-border-exempt{border-left:6px solid #6d4c41}
.bar{display:flex;height:1.5rem;border-radius:.2rem;overflow:hidden;background:#eee;min-width:22rem}
.bar span{display:block;height:100%;color:#fff;font-size:.78rem;line-height:1.5rem;text-align:center;
white-space:nowrap;overflow:hidden;font-weight:600}
.legend span{display:inline-block;width:.9rem;height:.9rem;border-radius:.15rem;vertical-align:middle;
margin:0 .3rem 0 1rem}
.fix{background:#f1f8e9;border-left:4px solid #7cb342;padding:.4rem 1rem;margin:.5rem 0}
.fix ul{margin:.2rem 0;padding-left:1.2rem}
.notproven{background:#fff8ef;border-left:4px solid #ef6c00;padding:.4rem 1rem;margin:.5rem 0}
figure{background:#fff;border:1px solid #ddd;border-radius:.4rem;padding:.5rem;margin:.5rem 0}
figcaption{font-weight:600}
a{color:#1565c0}
"""


def _e(text: object) -> str:
    return html.escape(clean_text(str(text)), quote=True)


def _code_spans(text: str) -> str:
    """Escape ``text``, showing its `backticked` commands as ``<code>`` so they can be copied."""
    parts = text.split("`")
    if len(parts) % 2 == 0:  # an unmatched backtick: show the text as it is
        return _e(text)
    return "".join(f"<code>{_e(p)}</code>" if i % 2 else _e(p) for i, p in enumerate(parts))


def _badge(verdict: Verdict, label: str, extra: str = "") -> str:
    return f'<span class="badge v-{verdict.value}{extra}">{_e(label)}</span>'


def _colour(protection: str) -> str:
    return _PROTECTION_COLOURS.get(protection, _OTHER_COLOUR)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _pct(part: int, whole: int) -> str:
    """``42.1%``, but never a rounded ``100.0%`` or ``0.0%`` that is not exactly so."""
    if whole <= 0:
        return "—"
    pct = 100 * part / whole
    if 0 < part < whole and pct >= 99.95:
        return ">99.9%"
    if 0 < pct < 0.05:
        return "<0.1%"
    return f"{pct:.1f}%"


def _approx_bytes(g: FindingGroup) -> str:
    if g.bytes is None:
        return "—"
    return human_bytes(g.bytes) if g.exact else f"≈ {human_bytes(g.bytes)}"


def _evidence_ids(ids: Sequence[str]) -> str:
    return "<br>".join(f"<code>{_e(ev)}</code>" for ev in ids) or '<span class="muted">none</span>'


# --- the verdict and the scoreboard ---------------------------------------------------------------


def _headline_facts(a: Assessment) -> Iterable[str]:
    total = sum(n for by in a.class_bytes.values() for n in by.values())
    if total:
        plain = sum(by.get("plaintext", 0) for by in a.class_bytes.values())
        yield (
            f"<li><strong>{_e(_pct(plain, total))}</strong> of the observed bytes ({_e(human_bytes(plain))} of "
            f"{_e(human_bytes(total))}) crossed the wire in plaintext.</li>"
        )
    bad = [r for r in a.matrix if not r.approved]
    if bad:
        flows = sum(r.flows for r in bad)
        nbytes = sum(r.bytes for r in bad)
        yield (
            f'<li><strong>{_plural(len(bad), "unapproved path")}</strong> in the '
            f'<a href="#matrix">communication matrix</a> ({_plural(flows, "flow")}, {_e(human_bytes(nbytes))}).</li>'
        )
    if a.chain_head is not None:
        yield f'<li>Evidence chain head <code>{_e(a.chain_head)}</code> (see <a href="#evidence">Evidence</a>).</li>'


def _verdict(a: Assessment) -> Iterable[str]:
    s = a.summary
    if exit_code(a) == 1:
        kind, word = "fail", "FAIL"
        line = f"{s.controls.failed} of {len(a.controls)} controls fail."
    elif s.controls.unknown or s.findings.unknown:
        kind, word = "unknown", "NOT PROVEN"
        line = f"No control fails, but {s.controls.unknown} of {len(a.controls)} controls are not proven."
    else:
        kind, word = "pass", "PASS"
        line = f"No control fails ({s.controls.passed} pass, {s.controls.exempt} exempt)."
    yield f'<section id="summary"><div class="verdict {kind}"><span class="word">{word}</span>'
    yield f'<strong>{_e(line)}</strong><br><span class="meta">controls:</span> '
    yield from (_badge(v, f"{s.controls.get(v)} {_VERDICT_WORDS[v]}", " big") for v in VERDICT_ORDER)
    yield '<br><span class="meta">findings:</span> '
    yield from (_badge(v, f"{s.findings.get(v)} {_VERDICT_WORDS[v]}") for v in VERDICT_ORDER)
    facts = list(_headline_facts(a))
    if facts:
        yield "<ul>" + "".join(facts) + "</ul>"
    yield "</div>"
    if s.controls.unknown or s.findings.unknown:
        yield (
            f'<p class="banner unknown">{s.controls.unknown} controls and {s.findings.unknown} findings are UNKNOWN: '
            'the facts to judge them were not gathered, so they are not proven. '
            '<a href="#not-proven">What to run</a>.</p>'
        )
    if a.warnings:
        yield '<h3>Warnings</h3><ul class="warn">'
        yield from (f"<li>{_e(w)}</li>" for w in a.warnings)
        yield "</ul>"
    yield from _scoreboard(a)
    yield "</section>"


def _top_issue(c: ControlResult, groups: Sequence[FindingGroup]) -> str:
    failing = [g for g in groups if g.verdict is Verdict.FAIL]
    if failing:
        g = failing[0]
        extra = f" ({_e(_approx_bytes(g))})" if g.bytes is not None else ""
        lead = ""
        if len(failing) > 1:
            n = sum(x.count for x in failing)
            lead = f'<span class="meta">{n} failures in {len(failing)} groups; largest:</span><br>'
        return f'{lead}{_e(g.headline())}{extra}<br><span class="meta small">{_code_spans(g.message)}</span>'
    for g in groups:
        if g.verdict is Verdict.UNKNOWN:
            return f'not proven: {_e(g.subject)}'
    return '<span class="muted">—</span>' if c.findings else "no findings: not proven"


def _scoreboard(a: Assessment) -> Iterable[str]:
    if not a.controls:
        yield "<p>No controls were judged.</p>"
        return
    rank = {v: i for i, v in enumerate(VERDICT_ORDER)}
    yield (
        '<table class="scoreboard"><tr><th>verdict</th><th>control</th><th>owner</th>'
        + "".join(f'<th class="num">{_e(_VERDICT_WORDS[v])}</th>' for v in VERDICT_ORDER)
        + "<th>most important finding</th></tr>"
    )
    for c in sorted(a.controls, key=lambda c: rank[c.verdict]):
        counts = VerdictCounts.of(f.verdict for f in c.findings)
        cells = "".join(
            f'<td class="num">{counts.get(v)}</td>' if counts.get(v) else '<td class="num zero">·</td>'
            for v in VERDICT_ORDER
        )
        yield (
            f"<tr><td>{_badge(c.verdict, _VERDICT_WORDS[c.verdict])}</td>"
            f'<td><a href="#control-{_e(c.id)}"><code>{_e(c.id)}</code></a><br>'
            f'<span class="small">{_e(c.title)}</span></td><td class="small">{_e(c.owner) or "—"}</td>{cells}'
            f"<td class=\"small\">{_top_issue(c, group_findings(c.findings))}</td></tr>"
        )
    yield "</table>"


# --- what is not proven -----------------------------------------------------------------------------


def _not_proven(a: Assessment) -> Iterable[str]:
    # The same missing fact (e.g. no probe results) leaves several controls unknown: say it once.
    by_reason: dict[str, list[tuple[ControlResult, Finding | None]]] = {}
    for c in a.controls:
        if not c.findings:
            by_reason.setdefault("no findings: the control judged nothing", []).append((c, None))
        for f in c.findings:
            if f.verdict is Verdict.UNKNOWN:
                by_reason.setdefault(f.message, []).append((c, f))
    if not by_reason:
        return
    yield (
        '<section id="not-proven"><h2>Not proven — what to run</h2>'
        "<p>These were not judged because the facts were missing. They are <strong>not</strong> passes; "
        "gather the facts with the command shown and assess again.</p>"
        "<table><tr><th>missing fact and how to gather it</th><th>controls and subjects left unknown</th></tr>"
    )
    for reason, hits in by_reason.items():
        subjects = "<br>".join(
            f'<a href="#control-{_e(c.id)}"><code>{_e(c.id)}</code></a>: '
            f"{_e(f.subject) if f is not None else 'no findings'}"
            for c, f in hits
        )
        yield f'<tr class="g-unknown"><td>{_code_spans(reason)}</td><td class="small">{subjects}</td></tr>'
    yield "</table></section>"


# --- bytes by class and protection ------------------------------------------------------------------


def _segment(p: str, n: int, total: int) -> str:
    pct = 100 * n / total
    # A segment that is not the whole bar must not read "100%" (99.7% plaintext is not all plaintext).
    shown = ">99%" if n < total and pct >= 99.5 else f"{pct:.0f}%"
    label = f"{shown} {p}" if pct >= _NAME_MIN_PCT else (shown if pct >= _LABEL_MIN_PCT else "")
    return (
        f'<span style="width:{pct:.2f}%;background:{_colour(p)}" title="{_e(p)}: {_e(human_bytes(n))}">'
        f"{_e(label)}</span>"
    )


def _classes(a: Assessment) -> Iterable[str]:
    yield '<section id="classes"><h2>Bytes by traffic class and protection</h2>'
    if not a.class_bytes:
        yield "<p>No flows were observed.</p></section>"
        return
    protections = list(dict.fromkeys(p for by in a.class_bytes.values() for p in by))
    seen = [p for p in protections if any(by.get(p, 0) for by in a.class_bytes.values())]
    grand = sum(n for by in a.class_bytes.values() for n in by.values())
    yield '<p class="legend">'
    yield from (f'<span style="background:{_colour(p)}"></span>{_e(p)}' for p in seen or protections)
    yield (
        '</p><table><tr><th>class</th><th>protection of its bytes (each bar is 100% of the class)</th>'
        + "".join(f'<th class="num">{_e(p)}</th>' for p in protections)
        + '<th class="num">total</th><th class="num">share of all bytes</th></tr>'
    )
    for cls, by in a.class_bytes.items():
        total = sum(by.values())
        segments = "".join(_segment(p, n, total) for p, n in by.items() if n and total)
        if not total:
            segments = '<span style="width:100%;color:#777">no bytes</span>'
        share = _pct(total, grand)
        yield f'<tr><td>{_e(cls)}</td><td><div class="bar" role="img" aria-label="{_e(cls)}">{segments}</div></td>'
        yield from (
            f'<td class="num">{_e(human_bytes(by[p]))}</td>' if by.get(p) else '<td class="num zero">0 B</td>'
            for p in protections
        )
        yield f'<td class="num">{_e(human_bytes(total))}</td><td class="num">{_e(share)}</td></tr>'
    yield "</table></section>"


# --- the communication matrix -----------------------------------------------------------------------


def _status(r: MatrixRow) -> tuple[int, str, str]:
    """(sort rank, row class, status cell) — unapproved first, then approved-but-unused, then approved."""
    if not r.approved:
        return 0, "unapproved", _badge(Verdict.FAIL, "UNAPPROVED")
    if r.flows == 0:
        return 1, "unused", '<span class="badge v-unused" title="approved, but no traffic was observed">unused</span>'
    return 2, "approved", _badge(Verdict.PASS, "approved")


def _matrix(a: Assessment) -> Iterable[str]:
    yield '<section id="matrix"><h2>Communication matrix (observed vs. approved)</h2>'
    if not a.matrix:
        yield "<p>No flows were observed.</p></section>"
        return
    counts = [sum(1 for r in a.matrix if _status(r)[0] == k) for k in range(3)]
    yield (
        f"<p>{_plural(counts[0], 'unapproved path')} (no approved flow allows it), "
        f"{_plural(counts[1], 'approved rule')} with no observed traffic (unused — candidates for removal), "
        f"{_plural(counts[2], 'approved path')} observed.</p>"
        "<table><tr><th>status</th><th>source zone → destination zone</th><th>class</th><th>approved by rule</th>"
        '<th class="num">flows</th><th class="num">bytes</th></tr>'
    )
    for r in sorted(a.matrix, key=lambda r: (_status(r)[0], -r.bytes)):
        _, row_class, cell = _status(r)
        rule = f"<code>{_e(r.rule)}</code>" if r.rule else "<strong>none</strong>"
        yield (
            f'<tr class="{row_class}"><td>{cell}</td><td>{_e(r.src_zone)} → {_e(r.dst_zone)}</td>'
            f"<td>{_e(r.traffic_class)}</td><td>{rule}</td>"
            f'<td class="num">{r.flows}</td><td class="num">{_e(human_bytes(r.bytes))}</td></tr>'
        )
    yield "</table></section>"


# --- the controls ----------------------------------------------------------------------------------


def _sources(g: FindingGroup) -> str:
    shown = ", ".join(f"{_e(h)}{f' ({n})' if n > 1 else ''}" for h, n in g.sources[:_MAX_SOURCES])
    more = len(g.sources) - _MAX_SOURCES
    return shown + (f" and {more} more" if more > 0 else "")


def _group_rows(g: FindingGroup) -> Iterable[str]:
    if g.flow_group:
        subject = (
            f"<strong>{_e(g.subject)}</strong><br>"
            f'<span class="small">from {_plural(len(g.sources), "source")}: {_sources(g)}</span>'
        )
    else:
        subject = _e(g.subject)
    if g.count == 1 or not g.messages_differ:
        finding = _code_spans(g.message)
    else:
        finding = (
            f"{_code_spans(g.message)} …<br>"
            f'<span class="meta small">e.g. {_code_spans(g.findings[0].message)}</span>'
        )
    label = _VERDICT_WORDS[g.verdict]
    yield (
        f'<tr class="g-{g.verdict.value}"><td>{_badge(g.verdict, label)}</td><td>{subject}</td><td>{finding}</td>'
        f'<td class="num">{g.count}</td><td class="num" title="sum of the volumes stated in the findings">'
        f"{_e(_approx_bytes(g))}</td><td class=\"small\">{_evidence_ids(g.evidence)}</td></tr>"
    )
    if g.count > 1:
        yield (
            f'<tr class="members"><td></td><td colspan="5"><details class="members"><summary>show the '
            f"{g.count} individual findings</summary><table><tr><th>subject</th><th>message</th><th>evidence</th></tr>"
        )
        yield from (
            f"<tr><td>{_e(f.subject)}</td><td>{_code_spans(f.message)}</td>"
            f'<td class="small">{_evidence_ids(f.evidence)}</td></tr>'
            for f in g.findings
        )
        yield "</table></details></td></tr>"


def _remediations(groups: Sequence[FindingGroup]) -> Iterable[str]:
    fixes = list(dict.fromkeys(g.remediation for g in groups if g.verdict is Verdict.FAIL and g.remediation))
    for fix in fixes:
        items = "".join(
            f"<li>{f'<strong>{_e(target)}</strong>: ' if target else ''}{_code_spans(text)}</li>"
            for target, text in split_remediation(fix)
        )
        yield f'<div class="fix"><strong>How to fix</strong><ul>{items}</ul></div>'


def _control(c: ControlResult) -> Iterable[str]:
    counts = VerdictCounts.of(f.verdict for f in c.findings)
    opened = " open" if c.verdict in (Verdict.FAIL, Verdict.UNKNOWN) else ""
    owner = f" — owner {_e(c.owner)}" if c.owner else " — no owner named"
    tally = ", ".join(f"{counts.get(v)} {_VERDICT_WORDS[v]}" for v in VERDICT_ORDER if counts.get(v))
    yield (
        f'<details id="control-{_e(c.id)}" class="control v-border-{c.verdict.value}"{opened}><summary>'
        f"{_badge(c.verdict, _VERDICT_WORDS[c.verdict])} <code>{_e(c.id)}</code> {_e(c.title)}{owner} "
        f'<span class="meta">({_e(tally or "no findings")})</span></summary>'
    )
    if not c.findings:
        yield '<p class="notproven">No findings: nothing was judged, so this control is not proven.</p></details>'
        return
    groups = group_findings(c.findings)
    if len(groups) < len(c.findings):
        yield (
            f'<p class="meta small">{_plural(len(c.findings), "finding")} in {_plural(len(groups), "group")}: '
            "flows to the same destination and class with the same verdict are shown together.</p>"
        )
    yield (
        "<table><tr><th>verdict</th><th>subject</th><th>finding</th>"
        '<th class="num">findings</th><th class="num">bytes</th><th>evidence</th></tr>'
    )
    for g in groups:
        yield from _group_rows(g)
    yield "</table>"
    yield from _remediations(groups)
    yield "</details>"


# --- charts, inputs, evidence -----------------------------------------------------------------------


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
        yield (
            '<table><tr><th>name</th><th>kind</th><th>sha256</th><th class="num">records</th>'
            '<th class="num">flows</th></tr>'
        )
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
    cited: dict[str, int] = {}
    for c in a.controls:
        for f in c.findings:
            for ev in f.evidence:
                cited[ev] = cited.get(ev, 0) + 1
    if cited:
        yield '<table><tr><th>evidence record cited by findings</th><th class="num">findings citing it</th></tr>'
        yield from (f'<tr><td><code>{_e(ev)}</code></td><td class="num">{n}</td></tr>' for ev, n in cited.items())
        yield "</table>"
    yield "</section>"


def render(a: Assessment) -> bytes:
    """The HTML report as UTF-8 bytes."""
    parts: list[str] = [
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>ringfence — {_e(a.cluster)}</title><style>{_CSS}{BOTH_CSS}</style></head><body>",
        f"<header><h1>ringfence assessment: {_e(a.cluster)}</h1>",
        f'<p class="meta">generated {_e(a.generated.isoformat())} by ringfence {_e(a.version)} from policy ',
        f'<code>{_e(a.policy_path)}</code> (sha256 <span class="mono">{_e(a.policy_sha256)}</span>)</p></header>',
    ]
    parts.extend(_verdict(a))
    parts.extend(both_sides(a))
    parts.extend(_not_proven(a))
    parts.extend(_classes(a))
    parts.extend(_matrix(a))
    parts.append('<section id="controls"><h2>Control points</h2>')
    for c in a.controls:
        parts.extend(_control(c))
    parts.append("</section>")
    parts.extend(_charts(a))
    parts.extend(_inputs_and_evidence(a))
    parts.append("</body></html>\n")
    return "".join(parts).encode("utf-8")


__all__ = ["render"]
