"""``assess``: intent + facts → judgement → record. The procedure behind ``ringfence assess``.

Reads every flow input (captures, flow logs) into the one flow table, classifies it against the
policy, hands the facts to the ten control points, writes every observation and finding to the
evidence store, and builds the :class:`~ringfence.evidence.report.Assessment` that every report
renders. It gathers nothing live itself: live facts (probes, rulesets, key events, benchmarks) are
passed in as :class:`~ringfence.controls.interface.Facts` fields by the verbs that gather them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa

from ringfence.analyze import EngineSpec, classify, communication_matrix, protection_breakdown
from ringfence.controls.interface import ControlResult, Facts, Finding
from ringfence.controls.registry import evaluate_all
from ringfence.evidence import EvidenceStore, RecordKind, sha256_file
from ringfence.evidence.report import Assessment, InputSummary, MatrixRow, write_report
from ringfence.evidence.store import NewRecord
from ringfence.observe.flows.registry import read_any
from ringfence.observe.schema import FLOW_SCHEMA, Protection
from ringfence.policy import Policy, load_policy

#: Reports written by default.
DEFAULT_FORMATS = ("json", "html", "junit")

Progress = Callable[[str], None]


@dataclass(frozen=True)
class AssessResult:
    """The assessment and where its reports went."""

    assessment: Assessment
    reports: tuple[Path, ...]
    flows: pa.Table  # the classified flow table


def _quiet(_: str) -> None:
    return None


def read_inputs(
    paths: Sequence[Path], store: EvidenceStore, progress: Progress = _quiet
) -> tuple[pa.Table, tuple[InputSummary, ...], tuple[str, ...], tuple[str, ...]]:
    """Read every flow input; record one observation each. Returns (flows, inputs, evidence ids, warnings)."""
    tables: list[pa.Table] = []
    inputs: list[InputSummary] = []
    ids: list[str] = []
    warnings: list[str] = []
    for path in paths:
        progress(f"reading {path}")
        digest = sha256_file(path)
        result = read_any(path)
        kind = (result.flows.column("source")[0].as_py() or "").split(":", 1)[0] if result.flows.num_rows else ""
        warnings.extend(f"{path}: {w}" for w in result.warnings)
        ev = store.append(
            RecordKind.OBSERVATION,
            source=f"flows:{kind or 'unknown'}",
            subject=str(path),
            data={
                "flows": result.flows.num_rows,
                "records": result.records,
                "warnings": list(result.warnings[:50]),
                "bytes": int(pa.compute.sum(result.flows.column("bytes")).as_py() or 0) if result.flows.num_rows else 0,
            },
            inputs={path.name: digest},
        )
        ids.append(str(ev))
        inputs.append(
            InputSummary(name=str(path), kind=kind or "flows", sha256=digest, records=result.records,
                         flows=result.flows.num_rows)
        )
        tables.append(result.flows)
    flows = pa.concat_tables(tables) if tables else FLOW_SCHEMA.empty_table()
    return flows, tuple(inputs), tuple(ids), tuple(warnings)


def class_bytes(classified: pa.Table, policy: Policy, engine: EngineSpec | None = None) -> dict[str, dict[str, int]]:
    """Per traffic class, bytes by protection verdict (what the report's stacked bars show)."""
    table = protection_breakdown(classified, policy, engine=engine)
    out: dict[str, dict[str, int]] = {}
    for row in table.to_pylist():
        out[row["class"] or "unclassified"] = {
            p.value: int(row[f"{p.value.replace('-', '_')}_bytes"] or 0) for p in Protection
        }
    return out


def matrix_rows(classified: pa.Table, policy: Policy, engine: EngineSpec | None = None) -> list[MatrixRow]:
    """The observed communication matrix joined with the approved one (unused approvals included)."""
    return [
        MatrixRow(
            src_zone=row["src_zone"] or "(unknown)",
            dst_zone=row["dst_zone"] or "(unknown)",
            traffic_class=row["class"] or "unclassified",
            rule=row["rule"],
            approved=row["status"] != "unapproved",
            flows=int(row["flows"]),
            bytes=int(row["bytes"]),
        )
        for row in communication_matrix(classified, policy, engine=engine).to_pylist()
    ]


def _record_findings(store: EvidenceStore, results: Sequence[ControlResult]) -> None:
    # One batch: one write and one fsync, however many findings.
    batch = [_finding_record(f) for res in results for f in res.findings]
    if batch:
        store.append_many(batch)


def _finding_record(f: Finding) -> NewRecord:
    return NewRecord(
        kind=RecordKind.FINDING,
        source=f"control:{f.control}",
        subject=f.subject,
        data={"verdict": f.verdict.value, "message": f.message, "evidence": list(f.evidence),
              "remediation": f.remediation, "volume": list(f.volume) if f.volume else None},
    )


def assess(
    policy_path: Path,
    inputs: Sequence[Path],
    *,
    store_dir: Path,
    output: Path | None = None,
    formats: Sequence[str] = DEFAULT_FORMATS,
    facts: Facts | None = None,
    now: datetime | None = None,
    progress: Progress = _quiet,
    policy: Policy | None = None,
    engine: EngineSpec | None = None,
) -> AssessResult:
    """Run the whole assessment; write reports to ``output`` (if given) in ``formats``. ``engine``: where
    the flow analysis (classification, matrix, per-class bytes) runs — DuckDB unless given."""
    policy = policy or load_policy(policy_path)
    policy_sha = sha256_file(policy_path)
    store = EvidenceStore.open(store_dir)
    store.append(RecordKind.NOTE, source="assess", subject=str(policy_path),
                 data={"step": "start", "cluster": policy.cluster}, inputs={policy_path.name: policy_sha})
    flows, input_summaries, flow_ids, warnings = read_inputs(inputs, store, progress)
    progress(f"classifying {flows.num_rows} flows")
    classified = classify(flows, policy, engine=engine)
    base = facts or Facts()
    gathered = dataclasses.replace(
        base,
        now=now or base.now,
        flows=classified,
        flow_evidence=tuple(base.flow_evidence) + flow_ids,
        flow_sources=tuple(base.flow_sources) + tuple(i.name for i in input_summaries),
    )
    progress("judging the ten control points")
    results = evaluate_all(policy, gathered)
    _record_findings(store, results)
    assessment = Assessment(
        cluster=policy.cluster,
        policy_path=str(policy_path),
        policy_sha256=policy_sha,
        generated=(now or datetime.now(UTC)),
        controls=tuple(results),
        inputs=input_summaries,
        class_bytes=class_bytes(classified, policy, engine),
        matrix=tuple(matrix_rows(classified, policy, engine)),
        evidence_store=str(store_dir),
        chain_head=store.head(),
        warnings=warnings,
    )
    written: list[Path] = []
    if output is not None:
        from ringfence.evidence.report import DEFAULT_NAMES

        for fmt in formats:
            target = output / DEFAULT_NAMES[fmt]
            write_report(assessment, fmt, target)
            written.append(target)
    return AssessResult(assessment=assessment, reports=tuple(written), flows=classified)


__all__ = ["DEFAULT_FORMATS", "AssessResult", "assess", "class_bytes", "matrix_rows", "read_inputs"]
