"""report.json: the documented structure, escaping survives, stable key order."""

from __future__ import annotations

import json
from collections.abc import Callable

from ringfence.controls.interface import ControlResult, Finding, Verdict
from ringfence.evidence.report import Assessment
from ringfence.evidence.report.json import render


def test_structure(assessment: Assessment) -> None:
    doc = json.loads(render(assessment))
    assert list(doc) == [
        "format",
        "format_version",
        "ringfence_version",
        "cluster",
        "generated",
        "policy",
        "summary",
        "headline",
        "performance",
        "controls",
        "inputs",
        "class_bytes",
        "matrix",
        "evidence",
        "warnings",
        "charts",
    ]
    assert doc["summary"] == {
        "pass": 1,
        "fail": 1,
        "exempt": 1,
        "unknown": 2,
        "findings": {"pass": 2, "fail": 1, "exempt": 1, "unknown": 1},
        "exit_code": 1,
    }
    assert doc["headline"] == {"verdict": "compliance gap", "security": "gap", "performance": "not proven",
                               "text": "security: gap; performance: not measured (pass --bench)"}
    assert doc["performance"] == []
    zones = doc["controls"][0]
    assert list(zones) == ["id", "title", "verdict", "owner", "findings"]
    assert list(zones["findings"][0]) == ["verdict", "subject", "message", "evidence", "remediation"]
    assert zones["findings"][0]["evidence"] == ["ev-000003-abcdef01"]
    assert [c["id"] for c in doc["controls"]] == [c.id for c in assessment.controls]
    assert doc["class_bytes"]["storage"] == {"encrypted": 9000, "plaintext": 1000}
    assert doc["matrix"][1] == {
        "src_zone": "aux",
        "dst_zone": "storage",
        "class": "unclassified",
        "rule": None,
        "approved": False,
        "flows": 1,
        "bytes": 42,
    }
    assert doc["evidence"] == {"store": "out/evidence", "head": {"seq": 7, "hash": "ef" * 32}}
    assert doc["generated"] == "2025-03-04T05:06:07+00:00"


def test_hostile_text_round_trips(assessment: Assessment) -> None:
    doc = json.loads(render(assessment))
    assert doc["controls"][0]["findings"][0]["subject"] == assessment.controls[0].findings[0].subject


def test_lone_surrogate_stays_valid_json(build: Callable[..., Assessment]) -> None:
    f = Finding("x", Verdict.FAIL, "bad \udcff byte", "m")
    data = render(build(controls=(ControlResult("x", "X", Verdict.FAIL, (f,)),)))
    data.decode("utf-8")  # valid UTF-8
    assert json.loads(data)["controls"][0]["findings"][0]["subject"] == "bad \udcff byte"
