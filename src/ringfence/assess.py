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
import pyarrow.compute as pc

from ringfence.analyze import classify, communication_matrix, protection_breakdown
from ringfence.controls.interface import ControlResult, Facts, Finding
from ringfence.controls.registry import evaluate_all
from ringfence.errors import InputError
from ringfence.evidence import EvidenceStore, RecordKind, sha256_file
from ringfence.evidence.report import Assessment, InputSummary, MatrixRow, write_report
from ringfence.evidence.store import NewRecord
from ringfence.facts import Loaded, load_many
from ringfence.observe.flows.registry import read_any
from ringfence.observe.schema import FLOW_SCHEMA, Protection
from ringfence.policy import Policy, load_policy

#: Reports written by default.
DEFAULT_FORMATS = ("json", "html", "junit")

Progress = Callable[[str], None]


@dataclass(frozen=True)
class FactsInput:
    """A facts file handed to ``assess``: which :class:`Facts` field it feeds, and where it is."""

    field: str  # "probes", "ruleset", "changes", "containment", "keys"
    path: Path


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


def _flows_taken(flows: pa.Table) -> datetime | None:
    """When the flows were observed: the latest ``last_seen`` (None for an empty table)."""
    if flows.num_rows == 0:
        return None
    last = pc.max(flows.column("last_seen")).as_py()
    return last if isinstance(last, datetime) and last.tzinfo is not None else None


def read_facts(
    files: Sequence[FactsInput], store: EvidenceStore, progress: Progress = _quiet
) -> tuple[dict[str, object], dict[str, datetime], tuple[InputSummary, ...]]:
    """Load and validate every facts file; record each with its sha256. Returns (Facts fields, taken, inputs).

    Several files of one kind are judged together: their age is the oldest one's, and a file that
    does not say when it was gathered leaves the kind's age unknown.
    """
    by_kind: dict[str, list[Path]] = {}
    for f in files:
        by_kind.setdefault(f.field, []).append(f.path)
    values: dict[str, object] = {}
    taken: dict[str, datetime] = {}
    inputs: list[InputSummary] = []
    for kind, paths in by_kind.items():
        progress(f"reading {kind} facts: {', '.join(str(p) for p in paths)}")
        loaded: list[Loaded] = load_many(kind, list(paths))
        digests = {str(p): sha256_file(p) for p in paths}
        store.append(RecordKind.OBSERVATION, source=f"facts:{kind}", subject=", ".join(str(p) for p in paths),
                     data={"kind": kind, "files": sorted(digests), "taken": [
                         lo.taken.isoformat() if lo.taken else None for lo in loaded]},
                     inputs={Path(p).name: d for p, d in digests.items()})
        inputs += [InputSummary(name=p, kind=kind, sha256=d) for p, d in digests.items()]
        if kind == "probes":
            values[kind] = tuple(r for lo in loaded for r in lo.value)
        elif len(loaded) == 1:
            values[kind] = loaded[0].value
        else:
            raise InputError(", ".join(str(p) for p in paths), f"give one {kind} facts file, not {len(loaded)}")
        times = [lo.taken for lo in loaded]
        if all(t is not None for t in times):
            taken[kind] = min(t for t in times if t is not None)
    return values, taken, tuple(inputs)


def class_bytes(classified: pa.Table, policy: Policy) -> dict[str, dict[str, int]]:
    """Per traffic class, bytes by protection verdict (what the report's stacked bars show)."""
    table = protection_breakdown(classified, policy)
    out: dict[str, dict[str, int]] = {}
    for row in table.to_pylist():
        out[row["class"] or "unclassified"] = {
            p.value: int(row[f"{p.value.replace('-', '_')}_bytes"] or 0) for p in Protection
        }
    return out


def matrix_rows(classified: pa.Table, policy: Policy) -> list[MatrixRow]:
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
        for row in communication_matrix(classified, policy).to_pylist()
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
    fact_files: Sequence[FactsInput] = (),
) -> AssessResult:
    """Run the whole assessment; write reports to ``output`` (if given) in ``formats``.

    ``fact_files`` are validated (strict schemas) and recorded with their sha256 in the store before
    anything is judged; ``facts`` (for callers holding facts in memory) supplies the rest.
    """
    policy = policy or load_policy(policy_path)
    policy_sha = sha256_file(policy_path)
    store = EvidenceStore.open(store_dir)
    store.append(RecordKind.NOTE, source="assess", subject=str(policy_path),
                 data={"step": "start", "cluster": policy.cluster}, inputs={policy_path.name: policy_sha})
    values, taken, fact_inputs = read_facts(fact_files, store, progress)
    flows, input_summaries, flow_ids, warnings = read_inputs(inputs, store, progress)
    progress(f"classifying {flows.num_rows} flows")
    classified = classify(flows, policy)
    base = dataclasses.replace(facts or Facts(), **values)  # type: ignore[arg-type]
    flows_at = _flows_taken(flows)
    stamps = {**base.taken, **taken}
    if flows_at is not None:
        stamps["flows"] = flows_at
    gathered = dataclasses.replace(
        base,
        now=now or base.now,
        flows=classified,
        flow_evidence=tuple(base.flow_evidence) + flow_ids,
        flow_sources=tuple(base.flow_sources) + tuple(i.name for i in input_summaries),
        taken=stamps,
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
        inputs=input_summaries + fact_inputs,
        class_bytes=class_bytes(classified, policy),
        matrix=tuple(matrix_rows(classified, policy)),
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


__all__ = ["DEFAULT_FORMATS", "AssessResult", "FactsInput", "assess", "class_bytes", "matrix_rows", "read_facts",
           "read_inputs"]
