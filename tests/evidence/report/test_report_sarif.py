"""report.sarif: SARIF 2.1.0, one rule per control, one result per failing finding."""

from __future__ import annotations

import json
from collections.abc import Callable

from ringfence.evidence.report import Assessment
from ringfence.evidence.report.sarif import render


def test_structure(assessment: Assessment) -> None:
    doc = json.loads(render(assessment))
    assert doc["version"] == "2.1.0" and doc["$schema"].endswith("sarif-2.1.0.json")
    (run,) = doc["runs"]
    rules = run["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == [c.id for c in assessment.controls]
    assert rules[0]["help"]["text"] == "nft add rule inet ringfence fwd drop"
    (result,) = run["results"]  # one failing finding in the fixture
    assert result["ruleId"] == "zones" and rules[result["ruleIndex"]]["id"] == "zones"
    assert result["level"] == "error" and result["kind"] == "fail"
    assert result["properties"]["evidence"] == ["ev-000003-abcdef01"]
    loc = result["locations"][0]
    assert loc["physicalLocation"]["artifactLocation"]["uri"] == "examples/lab-policy.yaml"
    assert loc["logicalLocations"][0]["name"] == assessment.controls[0].findings[0].subject
    assert len(result["partialFingerprints"]["ringfence/control-subject/v1"]) == 64
    assert run["properties"]["unknownControls"] == ["telemetry", "containment"]
    assert run["invocations"][0]["endTimeUtc"] == "2025-03-04T05:06:07.000000Z"
    assert run["artifacts"][0]["hashes"] == {"sha-256": "ab" * 32}


def test_absolute_policy_path_is_a_file_uri(build: Callable[..., Assessment]) -> None:
    doc = json.loads(render(build(policy_path="/etc/ring fence/policy.yaml")))
    uri = doc["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
    assert uri == "file:///etc/ring%20fence/policy.yaml"


def test_fingerprint_is_stable_across_runs(assessment: Assessment, build: Callable[..., Assessment]) -> None:
    later = build(generated=assessment.generated.replace(year=2026))
    fp = [json.loads(render(a))["runs"][0]["results"][0]["partialFingerprints"] for a in (assessment, later)]
    assert fp[0] == fp[1]
