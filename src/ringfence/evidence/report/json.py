"""``report.json``: the machine-readable report (format described in docs/evidence.md).

Keys appear in a fixed order (the order written here), lists in the assessment's order, so the same
assessment always renders to the same bytes.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Final

from ringfence.controls.interface import ControlResult, Finding
from ringfence.evidence.report.interface import Assessment, exit_code
from ringfence.evidence.report.performance import LayerPerformance, performance_side, security_side

#: Bumped when a key is renamed or removed (adding keys does not bump it).
FORMAT_VERSION: Final = 1


def _finding(f: Finding) -> dict[str, Any]:
    out: dict[str, Any] = {
        "verdict": f.verdict.value,
        "subject": f.subject,
        "message": f.message,
        "evidence": list(f.evidence),
        "remediation": f.remediation,
    }
    if f.volume is not None:  # the exact flow records and IP bytes behind a flow finding
        out["records"], out["bytes"] = f.volume
    return out


def _control(c: ControlResult) -> dict[str, Any]:
    return {
        "id": c.id,
        "title": c.title,
        "verdict": c.verdict.value,
        "owner": c.owner,
        "findings": [_finding(f) for f in c.findings],
    }


def _layer(p: LayerPerformance) -> dict[str, Any]:
    return {"layer": p.layer, "baseline": p.baseline, "verdict": p.verdict, "reasons": list(p.reasons),
            "evidence": list(p.evidence), "sizes": [dataclasses.asdict(s) for s in p.sizes]}


def to_document(a: Assessment) -> dict[str, Any]:
    """The report as a JSON-ready dict (what :func:`render` encodes)."""
    summary = a.summary
    head, why = a.headline
    return {
        "format": "ringfence-report",
        "format_version": FORMAT_VERSION,
        "ringfence_version": a.version,
        "cluster": a.cluster,
        "generated": a.generated.isoformat(),
        "policy": {"path": a.policy_path, "sha256": a.policy_sha256},
        # Top level: controls per aggregate verdict; "findings": every finding per verdict.
        "summary": {**summary.controls.as_dict(), "findings": summary.findings.as_dict(), "exit_code": exit_code(a)},
        # Both questions: is every path protected as policy says, and what did it cost the training job?
        "headline": {"verdict": head.value, "security": security_side(a.controls),
                     "performance": performance_side(a.performance), "text": why},
        "performance": [_layer(p) for p in a.performance],
        "controls": [_control(c) for c in a.controls],
        "inputs": [
            {"name": i.name, "kind": i.kind, "sha256": i.sha256, "records": i.records, "flows": i.flows}
            for i in a.inputs
        ],
        "class_bytes": {cls: dict(by) for cls, by in a.class_bytes.items()},
        "matrix": [
            {
                "src_zone": r.src_zone,
                "dst_zone": r.dst_zone,
                "class": r.traffic_class,
                "rule": r.rule,
                "approved": r.approved,
                "flows": r.flows,
                "bytes": r.bytes,
            }
            for r in a.matrix
        ],
        "evidence": {
            "store": a.evidence_store,
            "head": None if a.chain_head is None else {"seq": a.chain_head.seq, "hash": a.chain_head.hash},
        },
        "warnings": list(a.warnings),
        "charts": [title for title, _ in a.charts],
    }


def render(a: Assessment) -> bytes:
    """The JSON report, UTF-8, indented, with a trailing newline.

    A lone surrogate in a string (possible from hostile input) becomes its ``\\udXXX`` escape, which
    is still valid JSON.
    """
    return (json.dumps(to_document(a), indent=2, ensure_ascii=False) + "\n").encode("utf-8", "backslashreplace")


__all__ = ["FORMAT_VERSION", "render", "to_document"]
