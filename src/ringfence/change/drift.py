"""``ringfence drift``: every node's live ruleset against the one recorded when the approved version
was deployed (PCI DSS 1.2.8: the configuration matches what was approved).

Verdict: ``fail`` when any node differs (each difference names the node and the rule, chain or set),
when POLICY is not the version in force, or when change control is required and the version in
force was not approved; ``unknown`` when nothing was deployed through ringfence, no live baseline
was recorded, or a node could not be read (named); ``pass`` only when every node was read and matches.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from ringfence.change.interface import ChangeError
from ringfence.change.live import Normalised, live_hash, read_live
from ringfence.enforce.apply import SOURCE as APPLY_SOURCE
from ringfence.evidence import EvidenceStore, RecordKind
from ringfence.facts.changes import LIVE_SOURCE, REVIEW_SOURCE
from ringfence.policy import Policy, policy_digest
from ringfence.targets.interface import Executor

DRIFT_FORMAT = "ringfence-drift/1"


def _rule_text(rule: Mapping[str, Any]) -> str:
    comment = rule.get("comment")
    body = json.dumps(rule.get("expr", []), sort_keys=True, separators=(",", ":"))
    return f"{comment!r}: {body[:300]}" if comment else body[:300]


def differences(node: str, approved: Normalised, live: Normalised) -> list[dict[str, str]]:
    """Each way ``live`` differs from ``approved`` on ``node``: rules, chains, tables, sets, set elements."""
    out: list[dict[str, str]] = []

    def add(kind: str, where: str, detail: str) -> None:
        out.append({"node": node, "kind": kind, "where": where, "detail": detail})

    a_obj, l_obj = approved.get("objects", {}), live.get("objects", {})
    for key in sorted(set(a_obj) | set(l_obj)):
        if key not in l_obj:
            add("missing", key, f"{key} is approved but not in the live ruleset")
        elif key not in a_obj:
            add("extra", key, f"{key} is in the live ruleset but not approved")
        elif a_obj[key] != l_obj[key]:
            add("changed", key, f"{key} differs: approved {json.dumps(a_obj[key], sort_keys=True)[:200]}, live "
                f"{json.dumps(l_obj[key], sort_keys=True)[:200]}")
    a_rules, l_rules = approved.get("rules", {}), live.get("rules", {})
    for chain in sorted(set(a_rules) | set(l_rules)):
        want = [json.dumps(r, sort_keys=True) for r in a_rules.get(chain, [])]
        have = [json.dumps(r, sort_keys=True) for r in l_rules.get(chain, [])]
        for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=want, b=have, autojunk=False).get_opcodes():
            if op in ("delete", "replace"):
                for r in a_rules[chain][i1:i2]:
                    add("rule missing", chain, f"approved rule {_rule_text(r)} is not in the live chain {chain}")
            if op in ("insert", "replace"):
                for r in l_rules[chain][j1:j2]:
                    add("rule added", chain, f"live rule {_rule_text(r)} in chain {chain} was not approved")
    a_el, l_el = approved.get("elements", {}), live.get("elements", {})
    for key in sorted(set(a_el) | set(l_el)):
        timed = "timeout" in (a_obj.get(key, {}) or {}).get("flags", [])
        added = sorted(set(l_el.get(key, [])) - set(a_el.get(key, [])))
        gone = sorted(set(a_el.get(key, [])) - set(l_el.get(key, [])))
        if added:
            add("elements added", key, f"{key} holds elements not approved: {', '.join(added)[:300]}")
        if gone and not timed:  # a timed element leaving is the kernel closing an exception on time
            add("elements missing", key, f"{key} lacks approved elements: {', '.join(gone)[:300]}")
    return out


def _records(store: EvidenceStore, target: str) -> tuple[list[Any], dict[str, Any], dict[str, list[str]]]:
    applied: list[Any] = []
    live: dict[str, Any] = {}
    reviews: dict[str, list[str]] = {}
    for r in store.records():
        d = r.data if isinstance(r.data, dict) else {}
        if d.get("target") != target:
            continue
        if r.kind is RecordKind.ACTION and r.source == APPLY_SOURCE:
            applied.append(r)
        elif r.kind is RecordKind.OBSERVATION and r.source == LIVE_SOURCE:
            live[str(d.get("applied"))] = d
        elif r.kind is RecordKind.ACTION and r.source == REVIEW_SOURCE:
            reviews.setdefault(str(d.get("change")), []).append(str(d.get("by")))
    return applied, live, reviews


def _baseline(store: EvidenceStore, rec: Mapping[str, Any]) -> dict[str, Normalised]:
    try:
        data: dict[str, Normalised] = json.loads(store.blob_path(str(rec["listing"])).read_bytes())
    except (OSError, ValueError, KeyError) as exc:
        raise ChangeError(f"cannot read the recorded live ruleset {rec.get('listing')} from the evidence store: "
                          f"{exc}") from exc
    return data


def drift(policy: Policy, points: Mapping[str, Executor], store: EvidenceStore, *, target: str,
          now: datetime | None = None) -> dict[str, Any]:
    """The drift report of ``target`` against ``policy``'s deployed, approved version (see the module)."""
    applied, live_records, reviews = _records(store, target)
    report: dict[str, Any] = {"format": DRIFT_FORMAT, "target": target,
                              "taken": (now or datetime.now(UTC)).isoformat(), "policy_sha256": policy_digest(policy),
                              "version": None, "applied": None, "findings": [], "nodes": {}}
    findings: list[dict[str, str]] = report["findings"]
    if not applied:
        report["verdict"] = "unknown"
        findings.append({"verdict": "unknown", "subject": f"target {target}",
                         "detail": "nothing was deployed through ringfence; run: ringfence apply POLICY"})
        return report
    current = applied[-1]
    cur: dict[str, Any] = current.data
    report["version"], report["applied"] = cur.get("version"), str(current.id)
    if cur.get("policy_sha256") != report["policy_sha256"]:
        findings.append({"verdict": "fail", "subject": f"target {target}",
                         "detail": f"the version in force ({current.id}, policy {str(cur.get('policy_sha256'))[:16]}…) "
                         "is not POLICY's"})
    approved = bool(cur.get("approved_by")) and (not cur.get("emergency") or bool(reviews.get(str(current.id))))
    if policy.change_control.required and not approved:
        findings.append({"verdict": "fail", "subject": f"change {current.id}",
                         "detail": "the version in force was deployed without an approval (or is an emergency "
                         "change not yet reviewed)"})
    baseline_rec = live_records.get(str(current.id))
    if baseline_rec is None:
        findings.append({"verdict": "unknown", "subject": f"change {current.id}",
                         "detail": "no live ruleset was recorded when it was deployed; redeploy with ringfence apply"})
        report["verdict"] = "fail" if any(f["verdict"] == "fail" for f in findings) else "unknown"
        return report
    baseline = _baseline(store, baseline_rec)
    for node, now_live in sorted(read_live(points).items()):
        if isinstance(now_live, str):
            report["nodes"][node] = {"status": "unknown", "reason": now_live, "differences": []}
            findings.append({"verdict": "unknown", "subject": f"node {node}", "detail": now_live})
            continue
        if node not in baseline:
            report["nodes"][node] = {"status": "unknown", "reason": "not part of the recorded deployment",
                                     "differences": []}
            findings.append({"verdict": "unknown", "subject": f"node {node}",
                             "detail": f"{node} was not part of deployment {current.id}"})
            continue
        diffs = differences(node, baseline[node], now_live)
        report["nodes"][node] = {"status": "drift" if diffs else "match", "live_sha256": live_hash(now_live),
                                 "approved_sha256": baseline_rec["live"].get(node), "differences": diffs}
        findings.extend({"verdict": "fail", "subject": f"node {node}", "detail": d["detail"]} for d in diffs)
    findings.extend({"verdict": "unknown", "subject": f"node {node}", "detail": f"{node} was not read"}
                    for node in sorted(set(baseline) - set(points)))
    verdicts = {f["verdict"] for f in findings}
    report["verdict"] = "fail" if "fail" in verdicts else "unknown" if "unknown" in verdicts else "pass"
    return report


__all__ = ["DRIFT_FORMAT", "differences", "drift"]
