"""``assess``: intent + facts → judgement → record. The procedure behind ``ringfence assess``.

Reads every flow input (captures, flow logs) into the one flow table, classifies it against the
policy, hands the facts to the ten control points, writes every observation and finding to the
evidence store, and builds the :class:`~ringfence.evidence.report.Assessment` that every report
renders. It gathers nothing live itself: live facts (probes, rulesets, key events, benchmarks) are
passed in as :class:`~ringfence.controls.interface.Facts` fields by the verbs that gather them.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ringfence.analyze import EngineSpec, classify, communication_matrix, protection_breakdown
from ringfence.controls.interface import ControlResult, Facts, Finding
from ringfence.controls.registry import evaluate_all
from ringfence.controls.requirements import fact_problem
from ringfence.errors import InputError
from ringfence.evidence import ChainHead, EvidenceStore, Record, RecordKind, sha256_bytes, sha256_file
from ringfence.evidence.query import artifact_bytes, latest, record_ids
from ringfence.evidence.report import Assessment, InputSummary, MatrixRow, write_report
from ringfence.evidence.report.performance import LayerPerformance, layers
from ringfence.evidence.store import NewRecord
from ringfence.facts import Loaded, load_many
from ringfence.facts.interface import read_bytes
from ringfence.jobs.interface import JobSpan
from ringfence.observe.flows.registry import read_any
from ringfence.observe.schema import FLOW_SCHEMA, Protection
from ringfence.policy import Policy, load_policy
from ringfence.rdma import RdmaFinding, read_flows_and_rdma, summarise

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


def _ingest(progress: Progress, path: Path) -> Callable[[int, int], None]:
    """A reader's (done, total) bytes as a line every tenth of the file (a capture can take a while)."""
    shown = [0]

    def report(done: int, total: int) -> None:
        tenth = 10 * done // total if total else 10
        if tenth > shown[0]:
            shown[0] = tenth
            progress(f"reading {path}: {10 * tenth} % of {total} bytes")

    return report


def read_inputs(
    paths: Sequence[Path], store: EvidenceStore, progress: Progress = _quiet, rdma: list[RdmaFinding] | None = None
) -> tuple[pa.Table, tuple[InputSummary, ...], tuple[str, ...], tuple[str, ...]]:
    """Read every flow input; record one observation each. Returns (flows, inputs, evidence ids, warnings).

    ``rdma``, when given, collects the RDMA key-hygiene findings of the captures (gathered in the same pass)."""
    tables: list[pa.Table] = []
    inputs: list[InputSummary] = []
    ids: list[str] = []
    warnings: list[str] = []
    for path in paths:
        progress(f"reading {path}")
        digest = sha256_file(path)
        if rdma is None:
            result, rdma_facts = read_any(path, progress=_ingest(progress, path)), None
        else:
            result, rdma_facts = read_flows_and_rdma(path, progress=_ingest(progress, path))
        found = summarise(rdma_facts, f"pcap:{path.name}").findings if rdma_facts is not None else ()
        if rdma is not None:
            rdma.extend(found)
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
                **({"rdma_findings": [f.model_dump(mode="json") for f in found]} if found else {}),
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


@dataclass(frozen=True)
class FactsRecord:
    """Facts files of one kind as recorded in the assessment's store: their artifacts and observation."""

    kind: str
    paths: tuple[str, ...]
    artifacts: tuple[str, ...]  # evidence ids of the files' bytes, in order
    record: str  # the observation that the findings resting on these facts cite
    content: tuple[bytes, ...]


def _load_facts(kind: str, paths: Sequence[str], content: Sequence[bytes]) -> tuple[object, datetime | None]:
    loaded: list[Loaded] = load_many(kind, list(paths), list(content))
    if kind == "probes":
        value: object = tuple(r for lo in loaded for r in lo.value)
    elif kind in ("traces", "drills"):
        value = tuple(lo.value for lo in loaded)  # one per sample (allowed, denied) / per scenario, judged together
    elif kind == "gateway":
        value = tuple(r for lo in loaded for r in lo.value)  # every gateway's decisions, judged together
    elif kind == "bench":
        value = {"comparisons": [lo.value for lo in loaded]}  # one per layer (canary) compared
    elif len(loaded) == 1:
        value = loaded[0].value
    else:
        raise InputError(", ".join(paths), f"give one {kind} facts file, not {len(loaded)}")
    times = [lo.taken for lo in loaded]
    # Several files of one kind are judged together: their age is the oldest one's, and one that does
    # not say when it was gathered leaves the kind's age unknown.
    taken = min(t for t in times if t is not None) if all(t is not None for t in times) else None
    return value, taken


def read_facts(
    files: Sequence[FactsInput], store: EvidenceStore, progress: Progress = _quiet
) -> tuple[dict[str, object], dict[str, datetime], tuple[InputSummary, ...], tuple[FactsRecord, ...]]:
    """Load and validate every facts file, then record each (its bytes as an artifact, with its sha256)
    and one observation per kind. Returns (Facts fields, taken, input summaries, records).

    Everything is validated before anything is recorded, so a bad file leaves no half-recorded input.
    """
    by_kind: dict[str, list[str]] = {}
    for f in files:
        by_kind.setdefault(f.field, []).append(str(f.path))
    values: dict[str, object] = {}
    taken: dict[str, datetime] = {}
    contents: dict[str, list[bytes]] = {}
    for kind, paths in by_kind.items():
        progress(f"reading {kind} facts: {', '.join(paths)}")
        contents[kind] = [read_bytes(p, f"{kind} facts") for p in paths]
        values[kind], at = _load_facts(kind, paths, contents[kind])
        if at is not None:
            taken[kind] = at
    inputs: list[InputSummary] = []
    records: list[FactsRecord] = []
    for kind, paths in by_kind.items():
        digests = [sha256_bytes(c) for c in contents[kind]]
        artifacts = [str(store.add_artifact(c, Path(p).name, source=f"facts:{kind}", data={"kind": kind, "path": p}))
                     for p, c in zip(paths, contents[kind], strict=True)]
        record = store.append(
            RecordKind.OBSERVATION, source=f"facts:{kind}", subject=", ".join(paths),
            data={"kind": kind, "files": paths, "artifacts": artifacts,
                  "taken": taken[kind].isoformat() if kind in taken else None},
            inputs={Path(p).name: d for p, d in zip(paths, digests, strict=True)},
        )
        inputs += [InputSummary(name=p, kind=kind, sha256=d) for p, d in zip(paths, digests, strict=True)]
        records.append(FactsRecord(kind, tuple(paths), tuple(artifacts), str(record), tuple(contents[kind])))
    return values, taken, tuple(inputs), tuple(records)


def resolve_evidence(results: Sequence[ControlResult], known: frozenset[str],
                     records: Sequence[FactsRecord]) -> list[ControlResult]:
    """Findings whose evidence ids all resolve in the assessment's store.

    Facts files carry ids of the stores their verbs wrote (a probe run's, a drill's); such an id is
    replaced by the observation that recorded the facts file naming it (whose artifact holds the
    original id), and an id no recorded input names is dropped — a report cites only what its store holds.
    """
    cache: dict[str, tuple[str, ...]] = {}

    def resolve(ev: str) -> tuple[str, ...]:
        if ev in known:
            return (ev,)
        if ev not in cache:
            needle = ev.encode()
            cache[ev] = tuple(r.record for r in records if any(needle in c for c in r.content))
        return cache[ev]

    out = []
    for res in results:
        findings = tuple(
            dataclasses.replace(f, evidence=tuple(dict.fromkeys(x for ev in f.evidence for x in resolve(ev))))
            for f in res.findings
        )
        out.append(dataclasses.replace(res, findings=findings))
    return out


def _flows_artifact(store: EvidenceStore, flows: pa.Table) -> str:
    """The observed flows (before classification) as Parquet in the store, so the store alone can be judged."""
    sink = pa.BufferOutputStream()
    pq.write_table(flows, sink, compression="zstd")
    return str(store.add_artifact(sink.getvalue().to_pybytes(), "flows.parquet", source="assess",
                                  data={"rows": flows.num_rows}))


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
    fact_files: Sequence[FactsInput] = (),
    engine: EngineSpec | None = None,
    jobs: Sequence[JobSpan] = (),
) -> AssessResult:
    """Run the whole assessment; write reports to ``output`` (if given) in ``formats``.

    ``fact_files`` are validated (strict schemas) and recorded, bytes and sha256, in the store before
    anything is judged; ``facts`` (for callers holding facts in memory) supplies the rest. ``engine``: where
    the flow analysis (classification, matrix, per-class bytes) runs — DuckDB unless given. ``jobs``: the
    scheduler's spans; flows are then attributed to the job and user holding each end's node at the time
    (:func:`~ringfence.analyze.attribute.attribute_flows`), so findings name them. The flows,
    the facts and the clock are recorded so that :func:`assess_from_store` reproduces the judgement.
    """
    policy = policy or load_policy(policy_path)
    policy_sha = sha256_file(policy_path)
    when = now or (facts.now if facts is not None else datetime.now(UTC))
    store = EvidenceStore.open(store_dir)
    store.append(RecordKind.NOTE, source="assess", subject=str(policy_path),
                 data={"step": "start", "cluster": policy.cluster}, inputs={policy_path.name: policy_sha})
    values, taken, fact_inputs, fact_records = read_facts(fact_files, store, progress)
    rdma: list[RdmaFinding] = []
    flows, input_summaries, flow_ids, warnings = read_inputs(inputs, store, progress, rdma)
    flows_id = _flows_artifact(store, flows)
    base = dataclasses.replace(facts or Facts(), **values)  # type: ignore[arg-type]
    if rdma:  # RDMA key-hygiene findings of the captures: judged by training_traffic
        base = dataclasses.replace(base, rdma=(*(base.rdma or ()), *rdma))
    gathered = dataclasses.replace(
        base,
        now=when,
        flow_evidence=tuple(base.flow_evidence) + flow_ids,
        flow_sources=tuple(base.flow_sources) + tuple(i.name for i in input_summaries),
        taken={**base.taken, **taken},
    )
    results, classified = _judge(policy, gathered, flows, progress, engine, jobs)
    results = resolve_evidence(results, record_ids(store), fact_records)
    _record_findings(store, results)
    head = store.head()
    all_inputs = input_summaries + fact_inputs
    store.append(RecordKind.NOTE, source="assess", subject=str(policy_path), data={
        "step": "assessment", "now": when.isoformat(), "policy_sha256": policy_sha, "flows": flows_id,
        "flow_evidence": list(gathered.flow_evidence), "flow_sources": list(gathered.flow_sources),
        "inputs": [dataclasses.asdict(i) for i in all_inputs], "warnings": list(warnings),
        "facts": [{"kind": r.kind, "paths": list(r.paths), "artifacts": list(r.artifacts)} for r in fact_records],
        "chain_head": str(head), "rdma": [f.model_dump(mode="json") for f in rdma],
    }, inputs={policy_path.name: policy_sha})
    assessment = _assessment(policy, policy_path, policy_sha, now or datetime.now(UTC), results, all_inputs,
                             classified, str(store_dir), head, warnings, performance(policy, gathered, fact_records),
                             engine)
    return AssessResult(assessment=assessment, reports=_write(assessment, output, formats), flows=classified)


def _judge(policy: Policy, facts: Facts, flows: pa.Table, progress: Progress,
           engine: EngineSpec | None = None, jobs: Sequence[JobSpan] = ()) -> tuple[list[ControlResult], pa.Table]:
    progress(f"classifying {flows.num_rows} flows")
    classified = classify(flows, policy, engine=engine)
    if jobs:
        from ringfence.analyze.attribute import attribute_flows

        progress(f"attributing flows to {len(jobs)} scheduler job spans")
        # A span named like a policy job is that job (its membership rules apply); any other by its id.
        names = {j.name for j in policy.jobs}
        classified = attribute_flows(classified, jobs, label=lambda s: s.name if s.name in names else f"job {s.job}")
    flows_at = _flows_taken(flows)
    stamps = {**facts.taken, **({"flows": flows_at} if flows_at is not None else {})}
    progress("judging the ten control points")
    return evaluate_all(policy, dataclasses.replace(facts, flows=classified, taken=stamps)), classified


def performance(policy: Policy, facts: Facts, records: Sequence[FactsRecord]) -> tuple[LayerPerformance, ...]:
    """The bench side per layer; a comparison whose facts are undated or stale proves no pass."""
    cited = tuple(r.record for r in records if r.kind == "bench" and r.record)
    rows = layers(facts.bench, cited)
    problem = fact_problem(policy, facts, "bench") if rows else None
    if problem is None:
        return rows
    return tuple(dataclasses.replace(r, verdict="inconclusive", reasons=(*r.reasons, problem))
                 if r.verdict == "pass" else r for r in rows)


def _assessment(policy: Policy, policy_path: Path, policy_sha: str, generated: datetime,
                results: Sequence[ControlResult], inputs: tuple[InputSummary, ...], classified: pa.Table,
                store: str, head: ChainHead, warnings: tuple[str, ...],
                perf: tuple[LayerPerformance, ...] = (), engine: EngineSpec | None = None) -> Assessment:
    return Assessment(
        cluster=policy.cluster,
        policy_path=str(policy_path),
        policy_sha256=policy_sha,
        generated=generated,
        controls=tuple(results),
        inputs=inputs,
        class_bytes=class_bytes(classified, policy, engine),
        matrix=tuple(matrix_rows(classified, policy, engine)),
        evidence_store=store,
        chain_head=head,
        warnings=warnings,
        performance=perf,
    )


def _write(assessment: Assessment, output: Path | None, formats: Sequence[str]) -> tuple[Path, ...]:
    written: list[Path] = []
    if output is not None:
        from ringfence.evidence.report import DEFAULT_NAMES

        for fmt in formats:
            target = output / DEFAULT_NAMES[fmt]
            write_report(assessment, fmt, target)
            written.append(target)
    return tuple(written)


def assess_from_store(
    policy_path: Path,
    store_dir: Path,
    *,
    output: Path | None = None,
    formats: Sequence[str] = DEFAULT_FORMATS,
    progress: Progress = _quiet,
    now: datetime | None = None,
) -> AssessResult:
    """Judge again from the store alone: the last assessment's recorded flows, facts (re-validated from
    their recorded bytes) and clock, against ``policy_path``. Nothing is appended; with the same policy
    the report equals the original one but for ``generated``."""
    store = EvidenceStore.open(store_dir, create=False)
    last = latest(store, RecordKind.NOTE, "assess",
                  lambda r: isinstance(r.data, dict) and r.data.get("step") == "assessment")
    if last is None:
        raise InputError(str(store_dir), "the store holds no assessment to judge again",
                         hint="run `ringfence assess POLICY --captures FILE --store STORE` first")
    data = last.data
    policy = load_policy(policy_path)
    policy_sha = sha256_file(policy_path)
    if policy_sha != data["policy_sha256"]:
        progress(f"note: {policy_path} differs from the policy the recorded assessment used")
    progress(f"reading the flows recorded in {last.id}")
    flows = pq.read_table(pa.BufferReader(artifact_bytes(store, data["flows"])))
    values: dict[str, object] = {}
    taken: dict[str, datetime] = {}
    for entry in data["facts"]:
        kind, paths = entry["kind"], entry["paths"]
        progress(f"reading the recorded {kind} facts")
        values[kind], at = _load_facts(kind, paths, [artifact_bytes(store, a) for a in entry["artifacts"]])
        if at is not None:
            taken[kind] = at
    recorded_at = datetime.fromisoformat(data["now"])
    facts = dataclasses.replace(Facts(now=recorded_at), **values, flow_evidence=tuple(data["flow_evidence"]),  # type: ignore[arg-type]
                                flow_sources=tuple(data["flow_sources"]), taken=taken)
    rdma = tuple(RdmaFinding.model_validate_json(json.dumps(d)) for d in data.get("rdma", []))
    if rdma:
        facts = dataclasses.replace(facts, rdma=rdma)
    results, classified = _judge(policy, facts, flows, progress)
    records = [FactsRecord(e["kind"], tuple(e["paths"]), tuple(e["artifacts"]), "", ()) for e in data["facts"]]
    head = ChainHead.parse(data["chain_head"])
    # The ids the original run cited were resolved then; ids of facts files map to the same records.
    found = _recorded(store, records)
    results = resolve_evidence(results, record_ids(store), found)
    inputs = tuple(InputSummary(**i) for i in data["inputs"])
    assessment = _assessment(policy, policy_path, policy_sha, now or datetime.now(UTC), results, inputs,
                             classified, str(store_dir), head, tuple(data["warnings"]),
                             performance(policy, facts, found))
    return AssessResult(assessment=assessment, reports=_write(assessment, output, formats), flows=classified)


def _recorded(store: EvidenceStore, records: Sequence[FactsRecord]) -> list[FactsRecord]:
    """The facts records of an assessment with their observation ids and bytes, found in the store."""
    out = []
    for r in records:
        wanted = list(r.artifacts)

        def same(rec: Record, wanted: list[str] = wanted) -> bool:
            return isinstance(rec.data, dict) and rec.data.get("artifacts") == wanted

        obs = latest(store, RecordKind.OBSERVATION, f"facts:{r.kind}", same)
        content = tuple(artifact_bytes(store, a) for a in r.artifacts)
        out.append(dataclasses.replace(r, record=str(obs.id) if obs is not None else "", content=content))
    return out


__all__ = ["DEFAULT_FORMATS", "AssessResult", "FactsInput", "FactsRecord", "assess", "assess_from_store", "class_bytes",
           "matrix_rows", "read_facts", "read_inputs", "resolve_evidence"]
