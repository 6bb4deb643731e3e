"""Facts for the controls, from enforcement: probes, the live ruleset, applied versions, containment drills.

Each kind is a plain JSON document with a ``format`` tag, written by the verb that gathers it
(``ringfence probe -o probes.json --ruleset ruleset.json --changes changes.json``, ``ringfence contain
-o containment.json``) and read back by ``ringfence assess`` through the strict schemas of
:mod:`ringfence.facts`, which turn a bad file into :class:`FactsFileError` naming the file and the
field, never a traceback. The loaders are re-exported here for the verbs that gather the facts.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ringfence.atomic import write_atomic
from ringfence.enforce.apply import FABRIC, live_rulesets
from ringfence.enforce.apply import SOURCE as APPLY_SOURCE
from ringfence.enforce.nftables import enforced_nodes
from ringfence.evidence import EvidenceStore, RecordKind
from ringfence.facts.changes import (
    CHANGES_FORMAT,
    LIVE_SOURCE,
    REVIEW_SOURCE,
    changes_document,
    load_change_facts,
)
from ringfence.facts.containment import CONTAINMENT_FORMAT, drills, load_containment_facts
from ringfence.facts.interface import FactsFileError
from ringfence.facts.probes import PROBES_FORMAT, load_probe_facts, probe_to_json, probes_document
from ringfence.facts.ruleset import RULESET_FORMAT, load_ruleset_facts
from ringfence.policy import Policy
from ringfence.policy.matrix import Matrix, resolve
from ringfence.targets.interface import Executor

#: Evidence sources whose action records are changes of the enforcement state.
CONTAIN_SOURCE = "enforce.contain"
CHANGE_SOURCES = (APPLY_SOURCE, CONTAIN_SOURCE)
#: The probe runs' evidence source (a run after a change is what verifies it).
PROBE_SOURCE = "enforce.probe"


def write_json(path: str | Path, document: Mapping[str, Any]) -> Path:
    """Write a facts document atomically (indented, keys in order)."""
    out = Path(path)
    write_atomic(out, json.dumps(document, indent=1).encode() + b"\n")
    return out


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


# ------------------------------------------------------------------------------------------ changes

#: What an apply or rollback record carries of change control into its change fact.
_CHANGE_FIELDS = ("request", "requested_by", "deployed_by", "policy_sha256", "restored_version", "rolled_back_by")


def _change_control_record(kind: RecordKind, source: str, rid: str, time: Any, d: Mapping[str, Any],
                           by_id: Mapping[str, dict[str, Any]]) -> bool:
    """Fold a live-ruleset or review record into the change it is about; whether it was one."""
    if kind is RecordKind.OBSERVATION and source == LIVE_SOURCE:
        ch = by_id.get(str(d.get("applied")))
        if ch is not None:
            ch["live"] = rid
        return True
    if kind is RecordKind.ACTION and source == REVIEW_SOURCE:
        ch = by_id.get(str(d.get("change")))
        if ch is not None and d.get("by"):
            ch["reviewed_by"], ch["reviewed_at"] = str(d["by"]), time
        return True
    return False



def change_facts(store: EvidenceStore, target: str | None = None) -> list[dict[str, Any]]:
    """``Facts.changes``: every enforcement change recorded in ``store`` (applies, rollbacks, containment),
    oldest first, each with its evidence id and time; only ``target``'s when given.

    A change is verified by the next probe run (its effect observed), and the actions of a containment
    drill (contain, fabric check, release) by the drill's own report, which proved them; the drill's
    approver, recorded with its first action, approved all of them.
    """
    out: list[dict[str, Any]] = []
    drill: list[dict[str, Any]] = []  # containment actions not yet followed by their drill's report
    by_id: dict[str, dict[str, Any]] = {}
    for r in store.records():
        d = r.data if isinstance(r.data, dict) else {}
        if target is not None and d.get("target") != target:
            continue
        if _change_control_record(r.kind, r.source, str(r.id), r.time, d, by_id):
            continue
        if r.kind is RecordKind.OBSERVATION and r.source == CONTAIN_SOURCE:
            approver = next((c for c in drill if c["approved_by"]), None)
            for ch in drill:
                ch["verified"], ch["verified_by"] = d.get("ok") is True, str(r.id)
                if approver is not None and not ch["approved_by"]:
                    ch["approved_by"], ch["ticket"] = approver["approved_by"], approver["ticket"]
            drill = []
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
            "verified": None, "verified_by": None, "live": None, "reviewed_by": None, "reviewed_at": None,
            **{k: d.get(k) for k in _CHANGE_FIELDS if d.get(k) is not None},
            "emergency": d.get("emergency") is True,
        })
        by_id[str(r.id)] = out[-1]
        if r.source == CONTAIN_SOURCE:
            drill.append(out[-1])
    return out


# ------------------------------------------------------------------------------------------ containment


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
