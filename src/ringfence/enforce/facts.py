"""Facts for the controls, from enforcement: probes, the live ruleset, applied versions, containment drills.

Each kind is a plain JSON document with a ``format`` tag, written by the verb that gathers it
(``ringfence probe -o probes.json --ruleset ruleset.json --changes changes.json``, ``ringfence contain
-o containment.json``) and read back by ``ringfence assess`` through the loaders here, which turn a bad
file into :class:`FactsFileError` naming the file and the field (or JSON line and column), never a
traceback. The shapes are documented in ``docs/enforcement.md`` ("Facts for the controls").
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from ringfence.atomic import write_atomic
from ringfence.controls.interface import ProbeResult
from ringfence.enforce.apply import FABRIC, live_rulesets
from ringfence.enforce.apply import SOURCE as APPLY_SOURCE
from ringfence.enforce.matrix import Matrix, resolve
from ringfence.enforce.nftables import enforced_nodes
from ringfence.errors import InputError
from ringfence.evidence import EvidenceStore, RecordKind
from ringfence.policy import Policy
from ringfence.targets.interface import Executor

PROBES_FORMAT = "ringfence-probes/1"
RULESET_FORMAT = "ringfence-ruleset/1"
CHANGES_FORMAT = "ringfence-changes/1"
CONTAINMENT_FORMAT = "ringfence-containment/1"
#: Evidence sources whose action records are changes of the enforcement state.
CONTAIN_SOURCE = "enforce.contain"
CHANGE_SOURCES = (APPLY_SOURCE, CONTAIN_SOURCE)
#: The probe runs' evidence source (a run after a change is what verifies it).
PROBE_SOURCE = "enforce.probe"


class FactsFileError(InputError):
    """A facts file that cannot be used: unreadable, not JSON, the wrong format, or a bad field."""


# ------------------------------------------------------------------------------------------ probes


class _ProbeModel(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    source: str
    destination: str
    proto: Literal["tcp", "udp"]
    port: int
    expected: Literal["allow", "deny"]
    outcome: Literal["connected", "timeout", "reset", "refused", "error"]
    by_policy: bool | None
    detail: str = ""
    evidence: list[str] = []
    rule: str | None = None


class _ProbesDoc(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    format: Literal["ringfence-probes/1"]
    target: str
    taken: str
    evidence: str | None = None
    probes: list[_ProbeModel]


def probe_to_json(result: ProbeResult) -> dict[str, Any]:
    """One probe result as a JSON-ready dict (the keys of :class:`ProbeResult`)."""
    data = dataclasses.asdict(result)
    data["evidence"] = list(result.evidence)
    return data


def probes_document(results: Sequence[ProbeResult], *, target: str, evidence: str | None = None,
                    taken: datetime | None = None) -> dict[str, Any]:
    """The probes facts file: ``{"format", "target", "taken", "evidence", "probes": [...]}``."""
    return {"format": PROBES_FORMAT, "target": target, "taken": (taken or datetime.now(UTC)).isoformat(),
            "evidence": evidence, "probes": [probe_to_json(r) for r in results]}


def write_json(path: str | Path, document: Mapping[str, Any]) -> Path:
    """Write a facts document atomically (indented, keys in order)."""
    out = Path(path)
    write_atomic(out, json.dumps(document, indent=1).encode() + b"\n")
    return out


def _read(path: str | Path, what: str) -> Any:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise FactsFileError(str(p), f"cannot read the {what} file: {exc}") from exc
    try:
        return json.loads(text)
    except ValueError as exc:
        line, col = getattr(exc, "lineno", 0), getattr(exc, "colno", 0)
        raise FactsFileError(f"{p}:{line}:{col}", f"not JSON: {getattr(exc, 'msg', exc)}") from exc


def _format_of(path: str | Path, doc: Any, wanted: str, verb: str) -> None:
    if not isinstance(doc, dict):
        raise FactsFileError(str(path), f"expected a JSON object with format {wanted!r}", hint=verb)
    if doc.get("format") != wanted:
        raise FactsFileError(f"{path}: format", f"is {doc.get('format')!r}, expected {wanted!r}", hint=verb)


def _validation(path: str | Path, exc: ValidationError) -> FactsFileError:
    err = exc.errors()[0]
    where = ".".join(f"[{p}]" if isinstance(p, int) else str(p) for p in err["loc"]).replace(".[", "[")
    more = f" (and {len(exc.errors()) - 1} more problem(s))" if len(exc.errors()) > 1 else ""
    return FactsFileError(f"{path}: {where or 'document'}", f"{err['msg']}{more}")


def load_probe_facts(path: str | Path) -> tuple[ProbeResult, ...]:
    """``Facts.probes`` from a file written by ``ringfence probe -o``; :class:`FactsFileError` if unusable."""
    doc = _read(path, "probes")
    _format_of(path, doc, PROBES_FORMAT, "write it with: ringfence probe POLICY --target lab -o probes.json")
    try:
        parsed = _ProbesDoc.model_validate(doc)
    except ValidationError as exc:
        raise _validation(path, exc) from exc
    return tuple(ProbeResult(p.source, p.destination, p.proto, p.port, p.expected, p.outcome, p.by_policy,
                             p.detail, tuple(p.evidence), p.rule) for p in parsed.probes)


# ------------------------------------------------------------------------------------------ ruleset


def _rules(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [o["rule"] for o in doc.get("nftables", []) if isinstance(o, dict) and "rule" in o]


def _set_elems(doc: Mapping[str, Any], name: str) -> list[Any]:
    for o in doc.get("nftables", []):
        st = o.get("set") if isinstance(o, dict) else None
        if isinstance(st, dict) and st.get("name") == name:
            return list(st.get("elem", []))
    return []


def _counter(rule: Mapping[str, Any]) -> tuple[int, int]:
    for e in rule.get("expr", []):
        if isinstance(e, dict) and isinstance(e.get("counter"), dict):
            return int(e["counter"].get("packets", 0)), int(e["counter"].get("bytes", 0))
    return 0, 0


def _point_summary(doc: Mapping[str, Any], expected: set[str]) -> dict[str, Any]:
    rules = _rules(doc)
    flows: dict[str, int] = {}
    drop = [0, 0]
    audit = False
    for r in rules:
        comment = str(r.get("comment", ""))
        if comment.startswith("flow "):
            fid = comment.split()[1]
            flows[fid] = flows.get(fid, 0) + _counter(r)[0]
        elif comment.startswith(("default drop", "audit: would drop")):
            audit = audit or comment.startswith("audit")
            pk, by = _counter(r)
            drop[0] += pk
            drop[1] += by
    live = set(flows)
    return {
        "present": bool(rules), "audit": audit, "rules": len(rules),
        "flows": sorted(live), "expected_flows": sorted(expected),
        "missing_flows": sorted(expected - live), "extra_flows": sorted(live - expected),
        "accepted_packets": dict(sorted(flows.items())), "drop_packets": drop[0], "drop_bytes": drop[1],
        "contained": sorted(str(e) for e in _set_elems(doc, "contained") if isinstance(e, str)),
        "collectors": sorted(str(e) for e in _set_elems(doc, "collectors") if isinstance(e, str)),
    }


def _who(policy: Policy, addr: str) -> tuple[str | None, str | None]:
    """(node, identity) of an address: the node's own identity, else its job's identity."""
    for n in policy.nodes:
        if addr in n.addresses:
            job = next((j for j in policy.jobs if n.name in j.members), None)
            return n.name, n.identity or (job.identity if job else None)
    return None, None


def _approved_id(m: Matrix, src: str, dst: str, proto: str, port: int) -> str | None:
    s, d = ipaddress.ip_address(src), ipaddress.ip_address(dst)
    for f in m.flows:
        lo, hi = f.ports
        in_src = src in f.source.addresses or any(s in ipaddress.ip_network(c) for c in f.source.cidrs)
        in_dst = dst in f.destination.addresses or any(d in ipaddress.ip_network(c) for c in f.destination.cidrs)
        if in_src and in_dst and proto in f.protos and lo <= port <= hi:
            return f.id
    return None


def _concat_elems(doc: Mapping[str, Any], name: str, width: int) -> list[tuple[list[Any], int, int]]:
    out = []
    for e in _set_elems(doc, name):
        elem = e.get("elem", {}) if isinstance(e, dict) else {}
        val = elem.get("val", {}) if isinstance(elem, dict) else {}
        key = val.get("concat") if isinstance(val, dict) else None
        if isinstance(key, list) and len(key) == width:
            c = elem.get("counter", {})
            out.append((key, int(c.get("packets", 0)), int(c.get("bytes", 0))))
    return out


def ruleset_facts(policy: Policy, points: Mapping[str, Executor], *, target: str,
                  store: EvidenceStore | None = None) -> dict[str, Any]:
    """``Facts.ruleset``: the live rules of every enforcement point against the approved matrix.

    Per point: which approved flows have accept rules (``missing_flows``/``extra_flows`` against what
    the policy expects there), counters, audit mode, containment sets. ``egress``: every sampled
    connection leaving for an external-trust zone, with destination, identity, decision and bytes.
    ``denied``: drops per (source, destination, proto, port). With ``store``, the raw nft listings are
    kept as an artifact (``raw_evidence``) and the latest applied version is named.
    """
    m = resolve(policy)
    raw = live_rulesets(points)
    summary: dict[str, Any] = {}
    for scope, fams in raw.items():
        enforced = scope == FABRIC or scope in enforced_nodes(m)  # nodes outside the trust boundary get none
        if scope == FABRIC:
            expected = {f.id for f in m.flows}
        else:
            expected = {f.id for f in (*m.flows_to(scope), *m.flows_from(scope))} if enforced else set()
        summary[scope] = _point_summary(fams["inet"], expected)
        summary[scope]["enforced"] = enforced
        if "bridge" in fams:
            summary[scope]["bridge"] = _point_summary(fams["bridge"], {f.id for f in m.flows})
    egress = []
    for key, packets, nbytes in _concat_elems(raw.get(FABRIC, {}).get("inet", {}), "egress", 4):
        src, dst, proto, port = str(key[0]), str(key[1]), str(key[2]), int(key[3])
        node, ident = _who(policy, src)
        dnode, _ = _who(policy, dst)
        flow = _approved_id(m, src, dst, proto, port)
        egress.append({"source": src, "source_node": node, "identity": ident, "destination": dst,
                       "destination_node": dnode, "proto": proto, "port": port, "packets": packets,
                       "bytes": nbytes, "decision": "accept" if flow else "drop", "flow": flow})
    denied: dict[tuple[str, str, str, int], dict[str, Any]] = {}
    for scope, fams in raw.items():
        for family, doc in fams.items():
            for key, packets, nbytes in _concat_elems(doc, "denied", 5):
                k = (str(key[0]), str(key[1]), str(key[2]), int(key[4]))
                row = denied.setdefault(k, {"source": k[0], "destination": k[1], "proto": k[2], "port": k[3],
                                            "packets": 0, "bytes": 0, "where": []})
                row["packets"] += packets
                row["bytes"] += nbytes
                if f"{scope}/{family}" not in row["where"]:
                    row["where"].append(f"{scope}/{family}")
    out: dict[str, Any] = {
        "format": RULESET_FORMAT, "target": target, "cluster": policy.cluster,
        "taken": datetime.now(UTC).isoformat(), "points": summary,
        "egress": sorted(egress, key=lambda r: (-r["bytes"], r["source"])),
        "denied": sorted(denied.values(), key=lambda r: (-r["packets"], r["source"], r["destination"]))[:5000],
        "version": None, "raw_evidence": None,
    }
    if store is not None:
        history = change_facts(store, target)
        applied = [c for c in history if c["source"] == APPLY_SOURCE]
        out["version"] = applied[-1]["version"] if applied else None
        blob = json.dumps(raw, sort_keys=True, separators=(",", ":")).encode()
        out["raw_evidence"] = str(store.add_artifact(blob, f"live-ruleset-{target.replace(':', '_')}.json",
                                                     source="enforce.facts"))
    return out


class _RulesetDoc(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True, frozen=True)

    format: Literal["ringfence-ruleset/1"]
    target: str
    points: dict[str, dict[str, Any]]
    egress: list[dict[str, Any]]
    denied: list[dict[str, Any]]


def load_ruleset_facts(path: str | Path) -> dict[str, Any]:
    """``Facts.ruleset`` from a file written by ``ringfence probe --ruleset``."""
    doc = _read(path, "ruleset")
    _format_of(path, doc, RULESET_FORMAT, "write it with: ringfence probe POLICY --target lab --ruleset ruleset.json")
    try:
        _RulesetDoc.model_validate(doc)
    except ValidationError as exc:
        raise _validation(path, exc) from exc
    result: dict[str, Any] = doc
    return result


# ------------------------------------------------------------------------------------------ changes


def change_facts(store: EvidenceStore, target: str | None = None) -> list[dict[str, Any]]:
    """``Facts.changes``: every enforcement change recorded in ``store`` (applies, rollbacks, containment),
    oldest first, each with its evidence id and time; only ``target``'s when given."""
    out: list[dict[str, Any]] = []
    for r in store.records():
        d = r.data if isinstance(r.data, dict) else {}
        if target is not None and d.get("target") != target:
            continue
        if r.kind is RecordKind.OBSERVATION and r.source == PROBE_SOURCE:
            # a probe run after a change verifies it (until the next change): its effect was observed
            for ch in out[-1:]:
                if ch["verified"] is not False:
                    ch["verified"] = d.get("failures") == 0
                    ch["verified_by"] = str(r.id)
            continue
        if r.kind is not RecordKind.ACTION or r.source not in CHANGE_SOURCES:
            continue
        out.append({
            "id": str(r.id), "evidence": str(r.id), "time": r.time, "applied_at": r.time, "source": r.source,
            "action": d.get("action"), "target": d.get("target"), "version": d.get("version"),
            "previous": d.get("previous"), "audit": d.get("audit", False), "scopes": d.get("scopes", []),
            "subject": d.get("subject"), "diff_lines": len(str(d.get("diff", "")).splitlines()),
            "flows": d.get("flows"), "approved_by": d.get("approved_by"), "ticket": d.get("ticket"),
            "verified": None, "verified_by": None,
        })
    return out


def changes_document(changes: Sequence[Mapping[str, Any]], *, target: str) -> dict[str, Any]:
    """The changes facts file: ``{"format", "target", "changes": [...]}``."""
    return {"format": CHANGES_FORMAT, "target": target, "changes": [dict(c) for c in changes]}


class _ChangeModel(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True, frozen=True)

    evidence: str
    time: str
    source: str
    action: str
    target: str


class _ChangesDoc(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    format: Literal["ringfence-changes/1"]
    target: str
    changes: list[_ChangeModel]


def load_change_facts(path: str | Path) -> list[dict[str, Any]]:
    """``Facts.changes`` from a file written by ``ringfence probe --changes``."""
    doc = _read(path, "changes")
    _format_of(path, doc, CHANGES_FORMAT, "write it with: ringfence probe POLICY --target lab --changes changes.json")
    try:
        _ChangesDoc.model_validate(doc)
    except ValidationError as exc:
        raise _validation(path, exc) from exc
    return [dict(c) for c in doc["changes"]]


# ------------------------------------------------------------------------------------------ containment


class _ContainmentDoc(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True, frozen=True)

    format: Literal["ringfence-containment/1"]
    target: str
    subject: dict[str, Any]
    contained: bool
    isolated: bool | None
    collector_reachable: bool | None
    points: dict[str, bool]
    others_training: bool | None
    released: bool
    snapshot: dict[str, Any]
    probes: list[_ProbeModel]
    evidence: list[str]


def drills(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One containment report (``ringfence contain -o``) as ``drills`` entries, one per contained node:
    ``node``, ``isolated`` (no deny probe connected), ``by_policy`` (every deny proven by its counter),
    ``others_unaffected`` (other jobs kept training and the collector stayed reachable), ``restored``
    (released and the node's approved paths connect again; None when not released), ``seconds``, ``evidence``."""
    probes = [p for p in report.get("probes", []) if isinstance(p, Mapping)]
    denies = [p for p in probes if p.get("expected") == "deny"]
    isolated = (not any(p.get("outcome") == "connected" for p in denies)) if denies else None
    by_policy = all(p.get("by_policy") is True for p in denies) if denies else None
    others = report.get("others_training")
    collector = report.get("collector_reachable")
    unaffected = None if others is None else bool(others) and collector is not False
    restored = report.get("release_verified") if report.get("released") else None
    subject = report.get("subject", {})
    return [{"node": n, "subject": f"{subject.get('kind')} {subject.get('name')}", "isolated": isolated,
             "by_policy": by_policy, "points": report.get("points", {}), "others_unaffected": unaffected,
             "collector_reachable": collector, "restored": restored, "seconds": report.get("seconds"),
             "evidence": list(report.get("evidence", []))} for n in subject.get("nodes", [])]


def load_containment_facts(*paths: str | Path) -> dict[str, Any]:
    """``Facts.containment`` from files written by ``ringfence contain -o``: ``{"drills": [...], "reports":
    [...]}`` (see :func:`drills`); each report's ``probes`` become :class:`ProbeResult` objects."""
    out: dict[str, Any] = {"drills": [], "reports": []}
    for path in paths:
        doc = _read(path, "containment")
        _format_of(path, doc, CONTAINMENT_FORMAT, "write it with: ringfence contain --node N --target lab -o FILE")
        try:
            parsed = _ContainmentDoc.model_validate(doc)
        except ValidationError as exc:
            raise _validation(path, exc) from exc
        out["drills"] += drills(doc)
        report = dict(doc)
        report["probes"] = tuple(ProbeResult(p.source, p.destination, p.proto, p.port, p.expected, p.outcome,
                                             p.by_policy, p.detail, tuple(p.evidence), p.rule) for p in parsed.probes)
        out["reports"].append(report)
    return out


__all__ = [
    "CHANGES_FORMAT",
    "CHANGE_SOURCES",
    "CONTAINMENT_FORMAT",
    "CONTAIN_SOURCE",
    "PROBES_FORMAT",
    "PROBE_SOURCE",
    "RULESET_FORMAT",
    "FactsFileError",
    "change_facts",
    "changes_document",
    "drills",
    "load_change_facts",
    "load_containment_facts",
    "load_probe_facts",
    "load_ruleset_facts",
    "probe_to_json",
    "probes_document",
    "ruleset_facts",
    "write_json",
]
