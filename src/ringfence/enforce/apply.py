"""Apply a policy atomically to every enforcement point of a target, record each version, roll back.

One nft transaction per node namespace plus one for the fabric (inet on the routed path, bridge on
the zone bridges). Every ruleset is kernel-checked (``nft -c``) on its own host before any is
committed; should a commit still fail part-way, the points already changed are put back to the
previous version, so a failed apply changes nothing. Every applied version — its hash, time, the
rendered bundle (as an artifact) and a diff against the previous version — goes into the evidence
store; :func:`rollback` re-applies the version before the current one (or removes ringfence's tables
when there was none).
"""

from __future__ import annotations

import difflib
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ringfence.enforce.expiry import timed_paths
from ringfence.enforce.interface import EnforceError, RenderOptions
from ringfence.enforce.nftables import TABLE, enforced_nodes, render_fabric, render_node
from ringfence.enforce.nftrun import (
    NftError,
    check,
    delete_table,
    list_ruleset,
    load,
    prime_conntrack,
    unprime_conntrack,
)
from ringfence.enforce.partition_nft import partition_jobs, render_partition
from ringfence.enforce.safety import check_policy
from ringfence.evidence import EvidenceStore, RecordKind
from ringfence.policy import Policy, policy_digest
from ringfence.policy.matrix import Matrix, resolve
from ringfence.targets.fanout import each
from ringfence.targets.interface import Executor, TargetError

SOURCE = "enforce.apply"
FABRIC = "fabric"
Bundle = dict[str, dict[str, Any]]  # scope ("fabric" or a node) → nft JSON document


@dataclass(frozen=True)
class AppliedVersion:
    """One version applied (or rolled back to) on a target."""

    target: str
    version: str  # sha256 of the canonical bundle; "none" when ringfence's tables were removed
    previous: str | None
    evidence: str  # the action record's id
    scopes: tuple[str, ...]
    audit: bool


def bundle_hash(bundle: Bundle) -> str:
    """The version id: sha256 over the canonical JSON of every scope's ruleset."""
    return hashlib.sha256(json.dumps(bundle, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def live_containment(fabric: Executor) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Addresses currently contained and the collectors they may reach, read from the fabric's live sets."""
    out: list[tuple[str, ...]] = []
    for name in ("contained", "collectors"):
        res = fabric.run(["nft", "-j", "list", "set", "inet", TABLE, name], timeout=30)
        elems: tuple[str, ...] = ()
        if res.returncode == 0:
            for obj in json.loads(res.stdout).get("nftables", []):
                if "set" in obj:
                    elems = tuple(str(e) for e in obj["set"].get("elem", []) if isinstance(e, str))
        out.append(elems)
    return out[0], out[1]


def render_bundle(policy: Policy, scopes: Sequence[str], options: RenderOptions,
                  matrix: Matrix | None = None, fabric_ports: Mapping[str, Sequence[str]] | None = None) -> Bundle:
    """Every scope's ruleset: ``fabric`` plus each node named in ``scopes``.

    ``fabric_ports`` (node → its bridge ports on the fabric, where the target knows them): the fabric's ruleset
    also carries a partition per job that declares ``jobs[].partition`` (:mod:`.partition_nft`).
    """
    m = matrix or resolve(policy)
    bundle: Bundle = {}
    for scope in scopes:
        bundle[scope] = render_fabric(m, options) if scope == FABRIC else render_node(m, scope, options)
    if FABRIC in bundle and fabric_ports is not None:
        bundle[FABRIC]["nftables"] += render_partition(partition_jobs(policy, fabric_ports))
    return bundle


def partition_record(policy: Policy, fabric_ports: Mapping[str, Sequence[str]] | None) -> dict[str, Any] | None:
    """What an apply says about the jobs' partitions: installed (which jobs), or why not; None if none declared."""
    declared = sorted(j.name for j in policy.jobs if j.partition is not None)
    if not declared:
        return None
    if fabric_ports is None:
        return {"installed": False, "jobs": declared,
                "why": "the target names no bridge ports of its fabric: the switch's partitions come from the "
                       "PKEY/VLAN renderers (ringfence.enforce.partitions: OpenSM, SONiC, NVUE)"}
    return {"installed": True, "jobs": declared}


def _history(store: EvidenceStore, target: str) -> list[dict[str, Any]]:
    return [r.data for r in store.records() if r.source == SOURCE and r.subject == f"target {target}"
            and r.kind is RecordKind.ACTION and isinstance(r.data, dict)]


def _bundle_from_store(store: EvidenceStore, blob: str) -> Bundle:
    try:
        data: Bundle = json.loads(store.blob_path(blob).read_bytes())
    except (OSError, ValueError) as exc:
        raise EnforceError(f"cannot read ruleset bundle {blob} from the evidence store: {exc}") from exc
    return data


def _diff(old: Bundle | None, new: Bundle | None) -> str:
    def lines(b: Bundle | None) -> list[str]:
        return json.dumps(b or {}, indent=1, sort_keys=True).splitlines()

    return "\n".join(difflib.unified_diff(lines(old), lines(new), "previous", "new", lineterm="", n=1))


def each_point(scopes: Sequence[str], fn: Callable[[str], object]) -> list[tuple[str, Exception | None]]:
    """``fn(scope)`` on every scope at once (each point is its own host: over SSH each call is a round trip
    that a fleet must not pay one after another); each scope's failure, in the order given."""
    def one(scope: str) -> tuple[str, Exception | None]:
        try:
            fn(scope)
        except (NftError, TargetError) as exc:
            return scope, exc
        return scope, None

    return each(scopes, one)


def _first_failure(results: Sequence[tuple[str, Exception | None]]) -> None:
    """Raise the first scope's failure, if any (the order given, so the same point is named every run)."""
    for _scope, exc in results:
        if exc is not None:
            raise exc


def _remove(executors: Mapping[str, Executor]) -> None:
    def one(scope: str) -> None:
        delete_table(executors[scope], "inet", TABLE)
        if scope == FABRIC:
            delete_table(executors[scope], "bridge", TABLE)

    _first_failure(each_point(list(executors), one))


def _commit(executors: Mapping[str, Executor], bundle: Bundle | None, fallback: Bundle | None) -> None:
    """Load ``bundle`` (None: remove our tables) everywhere; on a failure restore ``fallback`` where changed."""
    if bundle is None:
        _remove(executors)
        return
    scopes = list(bundle)
    # every point checked before any changes
    _first_failure(each_point(scopes, lambda s: check(executors[s], bundle[s])))
    done: list[str] = []
    primed: list[str] = []
    try:
        # every point tracks connections before any stateful rule lands (see prime_conntrack)
        got = each_point(scopes, lambda s: prime_conntrack(executors[s]))
        primed = [s for s, exc in got if exc is None]
        _first_failure(got)
        got = each_point(scopes, lambda s: load(executors[s], bundle[s]))
        done = [s for s, exc in got if exc is None]
        _first_failure(got)
    except (NftError, TargetError):
        def restore(scope: str) -> None:
            if fallback is not None and scope in fallback:
                load(executors[scope], fallback[scope])
            else:
                _remove({scope: executors[scope]})

        each_point(done, restore)  # best effort, everywhere it was changed; the first failure is what is raised
        raise
    finally:
        # a leftover priming table only counts invalid packets; the ruleset is what matters
        each_point(primed, lambda s: unprime_conntrack(executors[s]))


def _record(store: EvidenceStore, target: str, bundle: Bundle | None, previous: dict[str, Any] | None,
            action: str, audit: bool, extra: Mapping[str, Any] | None = None) -> AppliedVersion:
    prev_bundle = _bundle_from_store(store, previous["bundle"]) if previous and previous.get("bundle") else None
    blob = None
    if bundle is not None:
        raw = json.dumps(bundle, sort_keys=True, separators=(",", ":")).encode()
        art = store.add_artifact(raw, f"ruleset-{bundle_hash(bundle)[:16]}.json", source=SOURCE)
        blob = store.get(art).data["blob"]
    version = bundle_hash(bundle) if bundle is not None else "none"
    data = {
        "action": action, "target": target, "version": version, "bundle": blob, "audit": audit,
        "previous": previous["version"] if previous else None, "scopes": sorted(bundle or {}),
        "diff": _diff(prev_bundle, bundle)[:200_000], **(extra or {}),
    }
    ev = store.append(RecordKind.ACTION, SOURCE, f"target {target}", data,
                      {"ruleset": blob} if blob else None)
    return AppliedVersion(target, version, data["previous"], ev, tuple(data["scopes"]), audit)


def apply_policy(policy: Policy, executors: Mapping[str, Executor], store: EvidenceStore, *, target: str,
                 audit: bool = False, inventory: Mapping[str, Sequence[str]] | None = None,
                 collectors: tuple[str, ...] = (), approved_by: str | None = None,
                 ticket: str | None = None, change: Mapping[str, Any] | None = None,
                 fabric_ports: Mapping[str, Sequence[str]] | None = None) -> AppliedVersion:
    """Check, render, commit and record ``policy`` on every scope in ``executors`` (``fabric`` + nodes).

    ``fabric_ports``: node → its bridge ports on the fabric point, where the target knows them (the lab): the
    jobs that declare ``jobs[].partition`` get their partition on the fabric too; the record says whether.

    ``approved_by`` and ``ticket`` are recorded with the version: change control judges a change
    without an approver as a failure. ``change``: what change control vouched for (the approved
    request, or an emergency), recorded with the version.
    """
    matrix = resolve(policy)
    check_policy(policy, matrix, inventory)
    missing = [n for n in enforced_nodes(matrix) if n not in executors]
    if FABRIC not in executors or missing:
        raise EnforceError(f"target {target} lacks enforcement points: {', '.join([*missing, FABRIC][:10])}")
    contained, live_collectors = live_containment(executors[FABRIC])
    options = RenderOptions(audit=audit, contained=contained, collectors=live_collectors or collectors,
                            timed=timed_paths(policy))
    bundle = render_bundle(policy, [FABRIC, *enforced_nodes(matrix)], options, matrix, fabric_ports)
    history = _history(store, target)
    previous = history[-1] if history else None
    prev_bundle = _bundle_from_store(store, previous["bundle"]) if previous and previous.get("bundle") else None
    _commit({s: executors[s] for s in bundle}, bundle, prev_bundle)
    return _record(store, target, bundle, previous, "apply", audit,
                   {"policy_cluster": policy.cluster, "flows": len(matrix.flows), "approved_by": approved_by,
                    "ticket": ticket, "policy_sha256": policy_digest(policy), **(change or {}),
                    **({"partition": part} if (part := partition_record(policy, fabric_ports)) else {})})


def rollback(executors: Mapping[str, Executor], store: EvidenceStore, *, target: str,
             approved_only: bool = False, by: str | None = None) -> AppliedVersion:
    """Restore the version applied before the current one (none before it: remove ringfence's tables).

    ``approved_only`` (change control): restore the latest earlier version that was deployed with an
    approval, carrying its approval and policy digest into the rollback's record; there must be one.
    """
    history = _history(store, target)
    if not history:
        raise EnforceError(f"nothing was applied to target {target}; there is nothing to roll back",
                           hint="ringfence apply POLICY --target lab")
    current = history[-1]
    # the version in force before the current one: walk back past versions equal to the current
    earlier = [h for h in history[:-1] if h["version"] != current["version"]
               and (not approved_only or (h.get("approved_by") and h.get("action") == "apply"))]
    if approved_only and not earlier:
        raise EnforceError(f"target {target} has no earlier approved version to roll back to")
    wanted = earlier[-1] if earlier else None
    bundle = _bundle_from_store(store, wanted["bundle"]) if wanted and wanted.get("bundle") else None
    cur_bundle = _bundle_from_store(store, current["bundle"]) if current.get("bundle") else None
    scopes = set(executors) if bundle is None else set(bundle)
    _commit({s: executors[s] for s in scopes if s in executors}, bundle, cur_bundle)
    carried = {k: wanted.get(k) for k in ("policy_sha256", "approved_by", "requested_by", "request", "ticket")
               if wanted.get(k) is not None} if wanted else {}
    return _record(store, target, bundle, current, "rollback", bool(wanted and wanted.get("audit")),
                   {**carried, "restored_version": wanted.get("version") if wanted else None, "rolled_back_by": by}
                   if approved_only else None)


def live_rulesets(executors: Mapping[str, Executor]) -> dict[str, Any]:
    """``Facts.ruleset``: each point's live ringfence tables (with counters), as nft lists them."""
    def one(item: tuple[str, Executor]) -> dict[str, Any]:
        scope, ex = item
        entry = {"inet": list_ruleset(ex, family="inet", table=TABLE)}
        if scope == FABRIC:
            entry["bridge"] = list_ruleset(ex, family="bridge", table=TABLE)
        return entry

    # every point at once: over SSH each read is a round trip, and a fleet has many points
    items = list(executors.items())
    return {scope: entry for (scope, _), entry in zip(items, each(items, one), strict=True)}


__all__ = [
    "FABRIC",
    "AppliedVersion",
    "Bundle",
    "apply_policy",
    "bundle_hash",
    "each_point",
    "live_containment",
    "live_rulesets",
    "partition_record",
    "render_bundle",
    "rollback",
]
