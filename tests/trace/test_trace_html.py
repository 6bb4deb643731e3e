"""The HTML timeline escapes hostile log values and loads nothing; the sidecars' logs are found and collected."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from ringfence.policy import Policy, load_policy
from ringfence.targets.local import LocalExecutor
from ringfence.trace.collect import collect, sidecar_logs
from ringfence.trace.html import render_html
from ringfence.trace.reconstruct import load, reconstruct
from ringfence.trace.timeline import render

ROOT = Path(__file__).resolve().parents[2]
W0, STORAGE = "10.77.1.10", "10.77.2.10"
EVIL = '<script>alert(1)</script>"><img src=http://evil.example/x>\x1b[2J'


@pytest.fixture()
def policy() -> Policy:
    return load_policy(ROOT / "examples" / "lab-policy.yaml")


def _hostile(tmp: Path, policy: Policy) -> str:
    t = time.time()
    (tmp / "storage.ulogd").write_text(json.dumps({
        "dvc": "storage", "oob.prefix": "train-a-storage", "oob.time.sec": int(t), "oob.time.usec": 0, "raw.label": 1,
        "ip.protocol": 6, "src_port": 41000, "dest_port": 8080, "src_ip": W0, "dest_ip": STORAGE}) + "\n")
    (tmp / "storage.objects").write_text(json.dumps({
        "time": t + 0.01, "peer": W0, "peer_port": 41000, "local": STORAGE, "local_port": 8080, "identity": EVIL,
        "method": "GET", "path": "/datasets/" + EVIL, "job": EVIL, "result": "served", "bytes": 5}) + "\n")
    tel = load([("storage", "ulogd", tmp / "storage.ulogd"), ("storage", "objects", tmp / "storage.objects")])
    trace = reconstruct(tel, policy, "allowed")
    assert trace.objects and trace.objects[0].job == EVIL
    assert "\x1b" not in render(trace)  # nor on a terminal
    return render_html(trace)


def test_every_value_is_escaped_and_nothing_is_loaded(tmp_path: Path, policy: Policy) -> None:
    page = _hostile(tmp_path, policy)
    assert "<script" not in page and "<img" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&quot;&gt;&lt;img" in page
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    # no element refers to anything outside the page
    assert not re.search(r"""(?:src|href|action)\s*=""", page.replace("img src=http", ""))
    assert page.count("<table>") >= 4 and "Object requests on this flow" in page


def test_sidecar_logs_come_from_the_layer_state_and_each_sidecars_configuration(tmp_path: Path) -> None:
    root = tmp_path / "secure"
    (root / "lab1" / "tls").mkdir(parents=True)
    (root / "lab1" / "state.json").write_text(json.dumps({"lab": "lab1", "nodes": {"tls": ["storage", "worker-0",
                                                                                           "ghost"]}}))
    events = tmp_path / "storage.events.jsonl"
    events.write_text(json.dumps({"t": time.time(), "dir": "in", "node": "storage", "peer": W0,
                                  "peer_identity": "spiffe://lab/job/train-a", "result": "allowed"}) + "\n")
    (root / "lab1" / "tls" / "storage.json").write_text(json.dumps({"node": "storage", "events": str(events)}))
    (root / "lab1" / "tls" / "worker-0.json").write_text(json.dumps({"node": "worker-0", "events": "relative/x"}))
    ex = LocalExecutor()
    points = {"storage": ex, "worker-0": ex}
    logs, problems = sidecar_logs("lab1", points, root=root)
    assert logs == {"storage": {"tls": str(events)}}
    assert any("worker-0" in p and "names no events log" in p for p in problems)
    assert any("ghost" in p for p in problems)
    got = collect(points, {}, tmp_path / "into", extra=logs)
    [(point, name, local)] = got.files
    assert (point, name, local.name) == ("storage", "tls", "storage.storage.events.jsonl")
    tel = load(got.files)
    assert tel.tls.column("identity").to_pylist() == ["spiffe://lab/job/train-a"]
    assert sidecar_logs("no-such-site", points, root=root) == ({}, ())  # no TLS layer: nothing to read
