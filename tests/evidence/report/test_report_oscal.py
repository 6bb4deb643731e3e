"""OSCAL assessment-results: valid by compliance-trestle's models, deterministic, one finding per control."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable

import pytest

from ringfence.evidence.report import Assessment
from ringfence.evidence.report.oscal import render

trestle = pytest.importorskip("trestle.oscal.assessment_results")


def test_valid_and_deterministic(assessment: Assessment) -> None:
    data = render(assessment)
    assert data == render(assessment)  # same assessment, same bytes (UUIDv5 of stable names)
    doc = json.loads(data)["assessment-results"]
    parsed = trestle.AssessmentResults.model_validate(doc)
    (result,) = parsed.results
    assert len(result.findings) == len(assessment.controls)
    states = {f.target.target_id: (f.target.status.state.value, f.target.status.reason) for f in result.findings}
    for c in assessment.controls:
        want = "satisfied" if c.verdict.value in ("pass", "exempt") else "not-satisfied"
        reason = "not-proven" if c.verdict.value == "unknown" else c.verdict.value
        assert states[f"ringfence-{c.id}"] == (want, reason)
    uuids = [parsed.uuid, result.uuid, *(f.uuid for f in result.findings), *(o.uuid for o in result.observations)]
    assert len(set(uuids)) == len(uuids) and all(uuid.UUID(u).version == 5 for u in uuids)
    cited = {e.href for o in result.observations for e in (o.relevant_evidence or [])}
    assert "#ev-000003-abcdef01" in cited


def test_a_different_assessment_gets_different_uuids(assessment: Assessment, build: Callable[..., Assessment]) -> None:
    other = build(cluster="other")
    first = json.loads(render(assessment))["assessment-results"]["uuid"]
    assert first != json.loads(render(other))["assessment-results"]["uuid"]
