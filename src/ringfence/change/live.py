"""The live ruleset as deployed: read from every point, normalised, hashed and recorded.

``nft -j list ruleset`` carries things that change on their own and say nothing about the approved
configuration: object handles, counter values, the elements that rules add from the packet path
(the ``denied``/``egress`` evidence sets) and the containment sets (changed by ``ringfence contain``,
recorded by it). Those are removed; everything else — every table, chain, rule, set and map,
ringfence's or not — is kept, so an edit made outside ringfence, anywhere in the ruleset, shows.
Elements of timed sets (expiring exceptions) keep their keys but not their remaining time.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ringfence.change.interface import ChangeError, canonical_sha256
from ringfence.enforce.apply import AppliedVersion
from ringfence.evidence import EvidenceStore, RecordKind
from ringfence.facts.changes import LIVE_SOURCE
from ringfence.targets.fanout import run_on_all
from ringfence.targets.interface import Executor

#: Sets whose elements another recorded action owns (containment), so they are not configuration drift.
MANAGED_SETS = frozenset({"contained", "collectors"})
_VOLATILE = frozenset({"handle", "expires", "timeout"})
LIST = ("nft", "-j", "list", "ruleset")

Normalised = dict[str, Any]  # {"objects": {key: body}, "rules": {chain key: [rule body]}, "elements": {...}}


def _scrub(value: Any) -> Any:
    """Drop handles and remaining times, zero counters, recursively."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if k in _VOLATILE:
                continue
            if k == "counter" and isinstance(v, dict) and set(v) <= {"packets", "bytes"}:
                out[k] = None
                continue
            out[k] = _scrub(v)
        return out
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    return value


def _updated_sets(entries: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    """(family, table, set) of every set a rule adds elements to from the packet path."""
    out: set[tuple[str, str, str]] = set()

    def walk(node: Any, fam: str, tbl: str) -> None:
        if isinstance(node, dict):
            st = node.get("set")
            if isinstance(st, dict) and st.get("op") in ("add", "update") and isinstance(st.get("set"), str):
                out.add((fam, tbl, st["set"].lstrip("@")))
            for v in node.values():
                walk(v, fam, tbl)
        elif isinstance(node, list):
            for v in node:
                walk(v, fam, tbl)

    for e in entries:
        r = e.get("rule")
        if isinstance(r, dict):
            walk(r.get("expr", []), str(r.get("family")), str(r.get("table")))
    return out


def normalise(listing: Mapping[str, Any]) -> Normalised:
    """The configuration part of an ``nft -j list ruleset`` document (see the module docstring)."""
    if not isinstance(listing.get("nftables"), list):
        raise ChangeError("nft printed a listing without an 'nftables' list")
    entries = [e for e in listing["nftables"] if isinstance(e, dict)]
    dynamic = _updated_sets(entries)
    objects: dict[str, Any] = {}
    rules: dict[str, list[Any]] = {}
    elements: dict[str, list[str]] = {}
    for e in entries:
        kind, body = next(iter(e.items())) if len(e) == 1 else ("?", None)
        if kind == "metainfo" or not isinstance(body, dict):
            continue
        fam, tbl = str(body.get("family")), str(body.get("table", body.get("name")))
        if kind == "rule":
            key = f"{fam} {tbl}/{body.get('chain')}"
            rules.setdefault(key, []).append(_scrub({k: v for k, v in body.items()
                                                     if k not in ("family", "table", "chain")}))
            continue
        name = str(body.get("name"))
        key = f"{kind} {fam} {tbl}" if kind == "table" else f"{kind} {fam} {tbl}/{name}"
        clean = _scrub({k: v for k, v in body.items() if k != "elem"})
        objects[key] = clean
        if kind in ("set", "map") and (fam, tbl, name) not in dynamic and name not in MANAGED_SETS:
            elements[key] = sorted(json.dumps(_scrub(x), sort_keys=True) for x in body.get("elem", []))
    return {"objects": objects, "rules": rules, "elements": elements}


def live_hash(norm: Normalised) -> str:
    """The live ruleset's hash: sha256 of its normalised form."""
    return canonical_sha256(norm)


def read_live(points: Mapping[str, Executor], *, timeout: float = 60.0) -> dict[str, Normalised | str]:
    """Every point's normalised live ruleset, or why it could not be read (an unreachable host, by name)."""
    out: dict[str, Normalised | str] = {}
    for node, outcome in run_on_all(points, LIST, timeout=timeout).items():
        if not outcome.ok or outcome.result is None:
            out[node] = outcome.error or f"{node}: nft -j list ruleset failed"
            continue
        try:
            out[node] = normalise(json.loads(outcome.result.stdout))
        except (ValueError, ChangeError) as exc:
            out[node] = f"{node}: nft printed an unreadable listing ({exc})"
    return out


def record_live(store: EvidenceStore, points: Mapping[str, Executor], applied: AppliedVersion) -> str:
    """Read and record the live ruleset of every point right after ``applied`` was deployed.

    Refuses (:class:`ChangeError`) when a point cannot be read: a deploy whose result nobody saw is
    not a baseline anyone can check drift against.
    """
    live = read_live(points)
    bad = [v for v in live.values() if isinstance(v, str)]
    if bad:
        raise ChangeError(f"the live ruleset after {applied.evidence} could not be read: {'; '.join(bad)}")
    norm = {k: v for k, v in live.items() if not isinstance(v, str)}
    raw = json.dumps(norm, sort_keys=True, separators=(",", ":")).encode()
    art = store.add_artifact(raw, f"live-{applied.version[:16]}.json", source=LIVE_SOURCE)
    blob = store.get(art).data["blob"]
    ev = store.append(RecordKind.OBSERVATION, LIVE_SOURCE, f"target {applied.target}", {
        "target": applied.target, "applied": applied.evidence, "version": applied.version,
        "live": {k: live_hash(v) for k, v in sorted(norm.items())}, "listing": blob,
    }, {"listing": blob})
    return str(ev)


__all__ = ["LIST", "LIVE_SOURCE", "MANAGED_SETS", "Normalised", "live_hash", "normalise", "read_live",
           "record_live"]
