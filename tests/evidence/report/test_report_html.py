"""report.html: self-contained, everything escaped, every section present."""

from __future__ import annotations

import re
from collections.abc import Callable
from html.parser import HTMLParser

from ringfence.controls.interface import ControlResult, Finding, Verdict
from ringfence.evidence.report import Assessment
from ringfence.evidence.report.html import render

_VOID = {"meta", "br", "rect", "path", "img", "input", "link"}


class _Collector(HTMLParser):
    """Records tags, attributes and text, and checks that elements are balanced."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.errors: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag not in _VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"unbalanced </{tag}> with open {self.stack[-3:]}")
            return
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _parse(data: bytes) -> _Collector:
    parser = _Collector()
    parser.feed(data.decode("utf-8"))
    parser.close()
    assert parser.errors == [] and parser.stack == []
    return parser


def test_self_contained(assessment: Assessment) -> None:
    page = render(assessment).decode()
    doc = _parse(render(assessment))
    for tag, attrs in doc.tags:
        for name in ("src", "href", "xlink:href", "action", "data"):
            value = attrs.get(name) or ""
            assert not re.match(r"\s*(https?:|//|data:)", value, re.I), (tag, name, value)
        assert not (tag == "script" and "src" in attrs)
        assert tag not in ("link", "iframe", "object", "embed")
    assert "http://" not in page and "https://" not in page
    assert "<script" not in page.lower()
    assert "@import" not in page


def test_hostile_subject_is_escaped(assessment: Assessment) -> None:
    page = render(assessment).decode()
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#x27;q&#x27;" in page
    assert "\x1b" not in page and "\x01" not in page
    text = "".join(_parse(render(assessment)).text)
    assert '<script>alert("x")</script>' in text  # shown to the reader as text, never as markup


def test_sections_and_content(assessment: Assessment) -> None:
    page = render(assessment).decode()
    doc = _parse(render(assessment))
    ids = {attrs.get("id") for _, attrs in doc.tags}
    assert {"summary", "classes", "controls", "matrix", "charts", "inputs", "evidence"} <= ids
    details = [attrs for tag, attrs in doc.tags if tag == "details" and "control" in (attrs.get("class") or "")]
    assert len(details) == len(assessment.controls)
    opened = {d["id"] for d in details if "open" in d}
    assert opened == {"control-zones", "control-telemetry", "control-containment"}  # fail and unknown open
    assert '<div class="verdict fail"><span class="word">FAIL</span><strong>1 of 5 controls fail.</strong>' in page
    assert "2 controls and 1 findings are UNKNOWN" in page
    assert "lab.pcap: 3 truncated packets skipped" in page
    assert "ev-000003-abcdef01" in page and f"chain head <code>7:{'ef' * 32}</code>" in page
    assert 'class="badge v-fail">UNAPPROVED</span>' in page and 'class="unapproved"' in page
    assert '<figcaption>busbw before/after</figcaption><svg viewBox="0 0 10 10"' in page


def test_byte_bars_are_proportional(assessment: Assessment) -> None:
    page = render(assessment).decode()
    assert 'style="width:90.00%;background:#2e7d32" title="encrypted: 9.00 kB"' in page
    assert 'style="width:10.00%;background:#c62828" title="plaintext: 1.00 kB">10%</span>' in page
    assert 'style="width:100.00%;background:#2e7d32" title="encrypted: 5.00 GB">100% encrypted</span>' in page


def test_empty_assessment_still_renders(build: Callable[..., Assessment]) -> None:
    page = render(build(controls=(), class_bytes={}, matrix=(), charts=(), chain_head=None, inputs=())).decode()
    _parse(page.encode())
    assert "No flows were observed." in page
    assert "not backed by a tamper-evident record" in page


def _row_containing(page: str, needle: str) -> str:
    start = page.rindex("<tr", 0, page.index(needle))
    return page[start : page.index("</tr>", start)]


def test_near_identical_failures_are_grouped(many_flows: Assessment) -> None:
    page = render(many_flows).decode()
    _parse(page.encode())
    storage = _row_containing(page, "<strong>10.77.2.10:8080 (storage)</strong>")
    assert 'class="g-fail"' in storage and "from 2 sources: 10.77.1.10 (100), 10.77.1.11 (80)" in storage
    assert '<td class="num">180</td>' in storage and "≈ 34.42 MB" in storage
    assert "plaintext payload on class storage, which requires protection (tls) …" in storage
    assert "show the 180 individual findings" in page and "show the 10 individual findings" in page
    assert page.count("flow 10.77.1.11:") == 80  # every flow still listed, once, inside its group
    assert page.index("10.77.2.10:8080 (storage)</strong>") < page.index("10.77.9.10:9000 (replication)</strong>")
    # one "How to fix" per distinct remediation, split per target, with the target's own "; " kept
    assert page.count('<div class="fix">') == 1
    assert "<li><strong>nftables</strong>: drop plaintext ports; pair with a mesh</li>" in page
    # the scoreboard names the largest failure of each failing control
    assert "190 failures in 2 groups; largest:" in page
    assert "&gt;99.9%</strong> of the observed bytes" in page  # never a rounded 100% that is not so
    assert 'title="plaintext: 34.42 MB">&gt;99% plaintext</span>' in page


def test_not_proven_says_what_to_run_once(many_flows: Assessment) -> None:
    page = render(many_flows).decode()
    section = page[page.index('<section id="not-proven">') : page.index("</section>", page.index('id="not-proven"'))]
    assert section.count("ringfence probe POLICY") == 1
    assert "<code>ringfence probe POLICY --target lab -o probes.json</code>" in section
    assert 'href="#control-zones"' in section and 'href="#control-egress"' in section
    assert "no findings: the control judged nothing" in section and 'href="#control-containment"' in section
    assert "<code>ringfence verify keys</code>" in section


def test_matrix_orders_and_marks_unapproved_and_unused(many_flows: Assessment) -> None:
    page = render(many_flows).decode()
    matrix = page[page.index('<section id="matrix">') : page.index("</section>", page.index('id="matrix"'))]
    rows = matrix.split("<tr")[2:]
    assert [r.split('"')[1] for r in rows] == ["unapproved", "unused", "approved", "approved"]
    assert "<td><strong>none</strong></td>" in rows[0] and "<code>admin-ssh</code>" in rows[1]
    assert "1 unapproved path (no approved flow allows it), 1 approved rule with no observed traffic" in matrix


def test_grouped_hostile_data_is_escaped(build: Callable[..., Assessment]) -> None:
    evil = "<img/src=x/onerror=alert(1)>"  # no space or colon: it parses as a flow's source host
    findings = tuple(
        Finding("c", Verdict.FAIL, f"flow {evil}:{i} → 10.0.0.1:80 (<b>x</b>)", f"`{evil}` 1 record", (evil,), evil)
        for i in range(3)
    )
    page = render(build(controls=(ControlResult("c", "t", Verdict.FAIL, findings),))).decode()
    _parse(page.encode())
    assert "<img" not in page and "<b>x" not in page
    assert "from 1 source: &lt;img/src=x/onerror=alert(1)&gt; (3)" in page
    assert "10.0.0.1:80 (&lt;b&gt;x&lt;/b&gt;)</strong>" in page
    assert "<code>&lt;img/src=x/onerror=alert(1)&gt;</code>" in page
