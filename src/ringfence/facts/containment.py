"""Containment facts (``ringfence contain -o containment.json``): drills isolating a node, job or identity."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import AwareDatetime

from ringfence.facts.interface import Loaded, Strict, parse
from ringfence.facts.probes import ProbeModel

CONTAINMENT_FORMAT = "ringfence-containment/1"
HINT = "write it with: ringfence contain --node NODE --drill --target lab -o containment.json"


class SubjectModel(Strict):
    """What was contained."""

    kind: str
    name: str
    nodes: list[str]
    addresses: list[str] = []


class RevocationModel(Strict):
    """An identity's containment (``contain --identity``): its certificates revoked and reissued, every gate's
    refusal of the old one and acceptance of the new one, the recovery (``ringfence.enforce.revoke``)."""

    identity: str
    verdict: Literal["pass", "fail", "unknown"]
    why: str
    certificates: list[dict[str, Any]]
    in_ca: bool | None
    published: dict[str, bool | None]
    gates: list[str]
    refusals: list[dict[str, Any]]
    accepted: list[dict[str, Any]]
    revoked_at: float | None
    latency_s: float | None
    published_at: float | None = None
    publish_s: float | None = None
    recovery: dict[str, Any]
    notes: list[str] = []


class ContainmentDoc(Strict):
    """One containment report."""

    format: Literal["ringfence-containment/1"]
    target: str
    started: AwareDatetime
    subject: SubjectModel
    contained: bool
    isolated: bool | None
    collector_reachable: bool | None
    points: dict[str, bool]
    others_training: bool | None
    training: dict[str, Any] = {}
    released: bool
    release_verified: bool | None = None
    snapshot: dict[str, Any]
    probes: list[ProbeModel]
    release_probes: list[ProbeModel] = []
    evidence: list[str]
    ok: bool | None = None
    seconds: float | None = None
    notes: list[str] = []
    revocation: RevocationModel | None = None


def drills(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One containment report (``ringfence contain -o``) as ``drills`` entries, one per contained node:
    ``node``, ``isolated`` (no deny probe connected), ``by_policy`` (every deny proven by its counter),
    ``points`` (a proven denial at the node and at the fabric), ``others_unaffected`` (other jobs kept
    training and the collector stayed reachable), ``restored`` (released and the node's approved paths
    connect again; None when not released), ``seconds``, ``evidence``. An identity's revocation isolates no
    node, so it is no such drill (none)."""
    if report.get("revocation") is not None:
        return []
    probes = [p for p in report.get("probes", []) if isinstance(p, Mapping)]
    denies = [p for p in probes if p.get("expected") == "deny"]
    isolated = (not any(p.get("outcome") == "connected" for p in denies)) if denies else None
    by_policy = all(p.get("by_policy") is True for p in denies) if denies else None
    others = report.get("others_training")
    collector = report.get("collector_reachable")
    unaffected = None if others is None else others is True and collector is not False
    restored = report.get("release_verified") if report.get("released") is True else None
    subject = report.get("subject", {})
    return [{"node": n, "subject": f"{subject.get('kind')} {subject.get('name')}", "isolated": isolated,
             "by_policy": by_policy, "points": dict(report.get("points", {})), "others_unaffected": unaffected,
             "collector_reachable": collector, "restored": restored, "seconds": report.get("seconds"),
             "evidence": list(report.get("evidence", []))} for n in subject.get("nodes", [])]


def load(*paths: str | Path, data: Sequence[bytes] | None = None) -> Loaded:
    """``Facts.containment`` — ``{"drills": [...], "reports": [...]}`` — and the earliest drill's start
    (``data``: the files' bytes, in order, if already read)."""
    out: dict[str, Any] = {"drills": [], "reports": []}
    times = []
    for i, path in enumerate(paths):
        doc = parse(path, ContainmentDoc, "containment", HINT, fmt=CONTAINMENT_FORMAT,
                    data=data[i] if data is not None else None)
        report = doc.model_dump(mode="json")
        out["drills"] += drills(report)
        report["probes"] = tuple(p.result() for p in doc.probes)
        out["reports"].append(report)
        times.append(doc.started)
    return Loaded("containment", ", ".join(str(p) for p in paths), out, min(times) if times else None)


def load_containment_facts(*paths: str | Path) -> dict[str, Any]:
    """``Facts.containment`` from files written by ``ringfence contain -o``."""
    value: dict[str, Any] = load(*paths).value
    return value


__all__ = ["CONTAINMENT_FORMAT", "ContainmentDoc", "RevocationModel", "SubjectModel", "drills", "load",
           "load_containment_facts"]
