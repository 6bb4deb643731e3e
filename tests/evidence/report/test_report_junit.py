"""junit.xml: one testcase per control, fail → failure, unknown → a not-proven failure (never a skip), valid XML."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable

from ringfence.controls.interface import ControlResult, Finding, Verdict
from ringfence.evidence.report import Assessment
from ringfence.evidence.report.junit import render


def test_structure(assessment: Assessment) -> None:
    root = ET.fromstring(render(assessment))
    assert root.tag == "testsuites"
    assert root.attrib == {
        "name": "ringfence",
        "tests": "5",
        "failures": "3",
        "errors": "0",
        "skipped": "0",
        "time": "0",
    }
    (suite,) = root
    assert suite.tag == "testsuite" and suite.get("timestamp") == "2025-03-04T05:06:07"
    assert [child.tag for child in suite] == ["properties"] + ["testcase"] * 5
    props = {p.get("name"): p.get("value") for p in suite.find("properties") or []}
    assert props["evidence_head"] == f"7:{'ef' * 32}" and props["policy_sha256"] == "ab" * 32
    cases = {c.get("name", "").split(":")[0]: c for c in suite.iter("testcase")}
    assert set(cases) == {"zones", "egress", "encryption", "telemetry", "containment"}
    failure = cases["zones"].find("failure")
    assert failure is not None and failure.get("type") == "fail"
    assert "ev-000003-abcdef01" in (failure.text or "") and "nft add rule" in (failure.text or "")
    assert "flow w1" not in (failure.text or "")  # only failing findings in <failure>
    # Not proven is a failure of its own type: a CI gate reading JUnit must not go green on it.
    unproven = cases["telemetry"].find("failure")
    assert unproven is not None and unproven.get("type") == "not-proven"
    assert "no flow log source" in (unproven.get("message") or "")
    assert cases["containment"].find("failure") is not None
    assert not list(suite.iter("skipped"))
    for name in ("egress", "encryption"):
        assert cases[name].find("failure") is None and cases[name].find("skipped") is None
    # junit-10.xsd order inside a testcase: failure/skipped before system-out.
    assert [c.tag for c in cases["zones"]] == ["failure", "system-out"]


def test_hostile_text_survives_as_text(assessment: Assessment) -> None:
    root = ET.fromstring(render(assessment))
    failure = root.find("./testsuite/testcase/failure")
    assert failure is not None
    assert '<script>alert("x")</script>' in (failure.text or "")
    assert "\x1b" not in (failure.text or "") and "\ufffd[31mred" in (failure.text or "")


def test_characters_xml_cannot_carry_are_replaced(build: Callable[..., Assessment]) -> None:
    f = Finding("x", Verdict.FAIL, "nul\x00 and \udcff", "m\x0b")
    data = render(build(controls=(ControlResult("x", "X", Verdict.FAIL, (f,)),)))
    root = ET.fromstring(data)
    assert "nul\ufffd and \ufffd" in (root.find("./testsuite/testcase/failure").text or "")  # type: ignore[union-attr]
