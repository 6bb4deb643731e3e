"""The inline SVG charts."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from bench_synth import synth

from ringfence.bench.plot import comparison_charts, svg_chart

NS = "{http://www.w3.org/2000/svg}"


def test_busbw_chart_has_both_arms_and_log_x() -> None:
    svg = svg_chart(synth(1.0), synth(2.0, layer="wireguard"), "busbw")
    root = ET.fromstring(svg)
    paths = root.findall(f"{NS}path")
    assert len(paths) == 2
    texts = [t.text or "" for t in root.iter(f"{NS}text")]
    assert "1 MiB" in texts and "16 MiB" in texts
    assert any("candidate: gloo/wireguard" in t for t in texts)
    # log2 x: 1, 4, 16 MiB are equally spaced
    xs = [float(c.get("cx", "0")) for c in root.findall(f"{NS}circle")][:3]
    assert abs((xs[1] - xs[0]) - (xs[2] - xs[1])) < 0.2


def test_p99_chart_and_pairs() -> None:
    charts = comparison_charts(synth(1.0), None)
    assert [t for t, _ in charts] == ["bus bandwidth (GB/s) vs message size", "p99 latency (µs) vs message size"]
    root = ET.fromstring(charts[1][1])
    assert len(root.findall(f"{NS}path")) == 1
