"""``report.sarif``: SARIF 2.1.0, for code-scanning dashboards.

One rule per control point (``ruleId`` = control id), one result per *failing* finding, located at
the policy file (the intent the finding contradicts) with the finding's subject as a logical
location. ``partialFingerprints`` hash control and subject, so a dashboard tracks the same problem
across runs. Unknown controls are listed in the run's ``properties`` (they are not results: nothing
was found, and nothing was proven either).
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC
from pathlib import PurePosixPath
from typing import Any, Final
from urllib.parse import quote

from ringfence.controls.interface import ControlResult, Finding, Verdict
from ringfence.evidence.report.interface import Assessment

SARIF_VERSION: Final = "2.1.0"
SARIF_SCHEMA: Final = "https://json.schemastore.org/sarif-2.1.0.json"


def _uri(path: str) -> str:
    # SARIF wants URIs: a relative path is a relative reference; an absolute one needs file://.
    p = PurePosixPath(path)
    return p.as_uri() if p.is_absolute() else quote(path)


def _rule(c: ControlResult) -> dict[str, Any]:
    help_text = next((f.remediation for f in c.findings if f.remediation and f.verdict is Verdict.FAIL), "")
    rule: dict[str, Any] = {
        "id": c.id,
        "name": c.id,
        "shortDescription": {"text": c.title},
        "defaultConfiguration": {"level": "error"},
        "properties": {"owner": c.owner, "verdict": c.verdict.value},
    }
    if help_text:
        rule["help"] = {"text": help_text}
    return rule


def _result(a: Assessment, c: ControlResult, rule_index: int, f: Finding) -> dict[str, Any]:
    fingerprint = hashlib.sha256(f"{c.id}\0{f.subject}".encode("utf-8", "backslashreplace")).hexdigest()
    text = f"{f.subject}: {f.message}"
    if f.remediation:
        text += f" Remediation: {f.remediation}"
    return {
        "ruleId": c.id,
        "ruleIndex": rule_index,
        "level": "error",
        "kind": "fail",
        "message": {"text": text},
        "locations": [
            {
                "physicalLocation": {"artifactLocation": {"uri": _uri(a.policy_path)}},
                "logicalLocations": [{"name": f.subject, "kind": "resource"}],
            }
        ],
        "partialFingerprints": {"ringfence/control-subject/v1": fingerprint},
        "properties": {"subject": f.subject, "evidence": list(f.evidence), "remediation": f.remediation},
    }


def to_document(a: Assessment) -> dict[str, Any]:
    """The SARIF log as a JSON-ready dict."""
    results = [
        _result(a, c, index, f) for index, c in enumerate(a.controls) for f in c.findings if f.verdict is Verdict.FAIL
    ]
    run: dict[str, Any] = {
        "tool": {
            "driver": {
                "name": "ringfence",
                "version": a.version,
                "rules": [_rule(c) for c in a.controls],
            }
        },
        "artifacts": [
            {
                "location": {"uri": _uri(a.policy_path)},
                "hashes": {"sha-256": a.policy_sha256},
                "roles": ["analysisTarget"],
            }
        ],
        "invocations": [
            {"executionSuccessful": True, "endTimeUtc": a.generated.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")}
        ],
        "results": results,
        "properties": {
            "cluster": a.cluster,
            "unknownControls": [c.id for c in a.controls if c.verdict is Verdict.UNKNOWN],
            "evidenceHead": None if a.chain_head is None else str(a.chain_head),
        },
    }
    return {"$schema": SARIF_SCHEMA, "version": SARIF_VERSION, "runs": [run]}


def render(a: Assessment) -> bytes:
    """The SARIF report as UTF-8 JSON bytes."""
    return (json.dumps(to_document(a), indent=2, ensure_ascii=False) + "\n").encode("utf-8", "backslashreplace")


__all__ = ["SARIF_SCHEMA", "SARIF_VERSION", "render", "to_document"]
