"""report.html: self-contained, everything escaped, every section present."""

from __future__ import annotations

import re
from collections.abc import Callable
from html.parser import HTMLParser

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
    details = [attrs for tag, attrs in doc.tags if tag == "details"]
    assert len(details) == len(assessment.controls)
    opened = {d["id"] for d in details if "open" in d}
    assert opened == {"control-zones", "control-telemetry", "control-containment"}  # fail and unknown open
    assert "FAIL: 1 of 5 controls fail." in page
    assert "2 controls and 1 findings are UNKNOWN" in page
    assert "lab.pcap: 3 truncated packets skipped" in page
    assert "ev-000003-abcdef01" in page and f"chain head <code>7:{'ef' * 32}</code>" in page
    assert "<strong>NO</strong>" in page and 'class="unapproved"' in page
    assert '<figcaption>busbw before/after</figcaption><svg viewBox="0 0 10 10"' in page


def test_byte_bars_are_proportional(assessment: Assessment) -> None:
    page = render(assessment).decode()
    assert 'style="width:90.00%;background:#2e7d32" title="encrypted: 9.00 kB"' in page
    assert 'style="width:10.00%;background:#c62828" title="plaintext: 1.00 kB"' in page
    assert 'style="width:100.00%;background:#2e7d32" title="encrypted: 5.00 GB"' in page


def test_empty_assessment_still_renders(build: Callable[..., Assessment]) -> None:
    page = render(build(controls=(), class_bytes={}, matrix=(), charts=(), chain_head=None, inputs=())).decode()
    _parse(page.encode())
    assert "No flows were observed." in page
    assert "not backed by a tamper-evident record" in page
