"""``assessment-results.json``: the assessment as OSCAL assessment-results, built on compliance-trestle's models.

One result; one OSCAL finding per control point (target ``objective-id`` ``ringfence-<control>``,
``satisfied`` only for pass or exempt, the ringfence verdict as the status reason); one observation
per ringfence finding, citing its evidence ids as relevant evidence. Every UUID is a UUIDv5 of stable
names (cluster, policy hash, chain head, control, finding), so the same assessment always renders to
the same bytes and two runs can be diffed. trestle validates the document as it is built.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from ringfence.controls.interface import ControlResult, Finding, Verdict
from ringfence.evidence.report.interface import Assessment, ReportError

#: Namespace of ringfence's UUIDv5s (itself a UUIDv5 of the project's name in the URL namespace).
NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://ringfence.invalid/oscal")
_NS = "https://ringfence.invalid/ns/oscal"


def _uuid(a: Assessment, *parts: object) -> str:
    anchor = f"{a.cluster}|{a.policy_sha256}|{a.chain_head}|{a.generated.isoformat()}"
    return str(uuid.uuid5(NAMESPACE, "|".join([anchor, *(str(p) for p in parts)])))


def _prop(common: Any, name: str, value: str) -> Any:
    return common.Property(name=name, value=value or "none", ns=_NS)


def _observation(a: Assessment, common: Any, c: ControlResult, i: int, f: Finding) -> Any:
    evidence = [common.RelevantEvidence(href=f"#{ev}", description=f"evidence record {ev} in {a.evidence_store}")
                for ev in f.evidence] or None
    return common.Observation(
        uuid=_uuid(a, c.id, i, f.subject), title=f.subject or c.id, description=f.message or f.verdict.value,
        props=[_prop(common, "verdict", f.verdict.value), _prop(common, "control", c.id)],
        methods=["TEST"], types=["finding"], collected=a.generated, relevant_evidence=evidence,
        remarks=f.remediation or None,
    )


def _finding(a: Assessment, common: Any, c: ControlResult, observations: list[Any]) -> Any:
    satisfied = c.verdict in (Verdict.PASS, Verdict.EXEMPT)
    state = common.ObjectiveStatusStateValidValues.satisfied if satisfied else \
        common.ObjectiveStatusStateValidValues.not_satisfied
    reason = "not-proven" if c.verdict is Verdict.UNKNOWN else c.verdict.value
    target = common.FindingTarget(type=common.FindingTargetTypeValidValues.objective_id,
                                  target_id=f"ringfence-{c.id}", title=c.title,
                                  status=common.ObjectiveStatus(state=state, reason=reason))
    return common.Finding(
        uuid=_uuid(a, c.id), title=f"{c.id}: {c.title}", description=f"control point {c.id}: {c.verdict.value}",
        props=[_prop(common, "verdict", c.verdict.value), _prop(common, "owner", c.owner)], target=target,
        related_observations=[common.RelatedObservation(observation_uuid=o.uuid) for o in observations] or None,
    )


def document(a: Assessment) -> dict[str, Any]:
    """The OSCAL document as a JSON-ready dict (``{"assessment-results": …}``)."""
    try:
        from trestle.oscal import OSCAL_VERSION
        from trestle.oscal import assessment_results as _ar
        from trestle.oscal import common as _common
    except ImportError as exc:  # an optional heavy dependency: say what to install
        raise ReportError("the OSCAL report needs compliance-trestle", hint="pip install compliance-trestle") from exc
    # Field names, not aliases: trestle's models accept both, and mypy (without pydantic's plugin) sees aliases only.
    common: Any = _common
    ar: Any = _ar
    observations: list[Any] = []
    findings: list[Any] = []
    for c in a.controls:
        mine = [_observation(a, common, c, i, f) for i, f in enumerate(c.findings)]
        observations += mine
        findings.append(_finding(a, common, c, mine))
    head, why = a.headline
    result = ar.Result(
        uuid=_uuid(a, "result"), title=f"ringfence assessment of {a.cluster}", description=why,
        start=a.generated, end=a.generated,
        props=[_prop(common, "headline", head.value), _prop(common, "policy-sha256", a.policy_sha256),
               _prop(common, "evidence-head", str(a.chain_head) if a.chain_head else "")],
        reviewed_controls=common.ReviewedControls(control_selections=[
            common.ControlSelectionsAll(include_all=common.IncludeAll(), description="the ten ringfence control points")
        ]),
        observations=observations or None, findings=findings or None,
    )
    metadata = common.Metadata(title=f"ringfence assessment: {a.cluster}", last_modified=a.generated,
                               version=a.version, oscal_version=OSCAL_VERSION)
    results = ar.AssessmentResults(uuid=_uuid(a, "assessment-results"), metadata=metadata,
                                   import_ap=ar.ImportAp(href=a.policy_path), results=[result])
    body: dict[str, Any] = results.model_dump(mode="json", by_alias=True, exclude_none=True)
    return {"assessment-results": body}


def render(a: Assessment) -> bytes:
    """The OSCAL assessment-results JSON, UTF-8, indented, keys in model order."""
    return (json.dumps(document(a), indent=2, ensure_ascii=False) + "\n").encode("utf-8", "backslashreplace")


__all__ = ["NAMESPACE", "document", "render"]
