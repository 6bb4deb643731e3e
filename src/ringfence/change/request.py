"""``change propose``: a request recording both diffs against the last approved version; loading one back.

The last approved version is the latest ``change.approve`` record of the cluster in the evidence
store (its policy text is kept there as an artifact), so a request always says what it changes
relative to what was signed off last, not relative to whatever someone last committed.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ringfence.change.git import committed
from ringfence.change.interface import (
    REQUEST_FORMAT,
    ChangeError,
    ChangeRequest,
    RequestDoc,
    diff_hash,
    request_hash,
)
from ringfence.enforce.apply import FABRIC, render_bundle
from ringfence.enforce.expiry import timed_paths
from ringfence.enforce.interface import RenderOptions
from ringfence.enforce.nftables import enforced_nodes
from ringfence.errors import RingfenceError
from ringfence.evidence import EvidenceStore, RecordKind
from ringfence.facts.changes import APPROVE_SOURCE
from ringfence.facts.interface import parse
from ringfence.policy import Policy, parse_policy, policy_digest
from ringfence.policy.matrix import resolve

HINT = "write it with: ringfence change propose POLICY --by ID --ticket T -o REQUEST.json"


@dataclass(frozen=True)
class ApprovedVersion:
    """The last approved version of a cluster's policy: its digest, text and the approval record."""

    sha256: str
    text: str
    evidence: str
    approvers: dict[str, str]


def _text_diff(old: str, new: str, old_name: str, new_name: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                        old_name, new_name, n=2))


def _rendered(policy: Policy | None, now: datetime) -> list[str]:
    if policy is None:
        return []
    m = resolve(policy)
    bundle = render_bundle(policy, [FABRIC, *enforced_nodes(m)], RenderOptions(timed=timed_paths(policy, now)), m)
    return json.dumps(bundle, indent=1, sort_keys=True).splitlines(keepends=True)


def last_approved(store: EvidenceStore, cluster: str) -> ApprovedVersion | None:
    """The cluster's latest approved policy version recorded in ``store`` (None: nothing approved yet)."""
    last = None
    for r in store.records():
        if (r.kind is RecordKind.ACTION and r.source == APPROVE_SOURCE and isinstance(r.data, dict)
                and r.data.get("cluster") == cluster):
            last = r
    if last is None:
        return None
    d: dict[str, Any] = last.data
    try:
        text = store.blob_path(str(d["policy"])).read_text()
    except (OSError, KeyError, UnicodeDecodeError) as exc:
        raise ChangeError(f"cannot read the approved policy of {last.id} from the evidence store: {exc}") from exc
    return ApprovedVersion(str(d["policy_sha256"]), text, str(last.id), dict(d.get("approvers") or {}))


def propose(policy_file: Path, *, by: str, ticket: str, store: EvidenceStore,
            now: datetime | None = None) -> RequestDoc:
    """A request for the committed version of ``policy_file``, diffed against the last approved one."""
    if not by.strip() or not ticket.strip():
        raise ChangeError("a request needs a requester (--by) and a ticket (--ticket)")
    at = now or datetime.now(UTC)
    c = committed(policy_file)
    policy = parse_policy(c.text, str(policy_file))
    base = last_approved(store, policy.cluster)
    base_policy = parse_policy(base.text, f"approved version {base.evidence}") if base else None
    pdiff = _text_diff(base.text if base else "", c.text, f"approved/{c.path}", f"proposed/{c.path}")
    rdiff = "".join(difflib.unified_diff(_rendered(base_policy, at), _rendered(policy, at), "approved-rulesets",
                                         "proposed-rulesets", n=1))
    digest = policy_digest(policy)
    req = ChangeRequest(
        format=REQUEST_FORMAT, cluster=policy.cluster, repository=str(c.repository), policy_path=c.path,
        commit=c.commit, policy_sha256=digest, policy_text=c.text, base_sha256=base.sha256 if base else None,
        policy_diff=pdiff, ruleset_diff=rdiff, diff_sha256=diff_hash(pdiff, rdiff, digest),
        requested_by=by.strip(), ticket=ticket.strip(), requested_at=at)
    return RequestDoc(request=req, request_sha256=request_hash(req))


def load_request(path: str | Path) -> RequestDoc:
    """A request file, strictly validated; a malformed one is an input error naming file and field."""
    return parse(path, RequestDoc, "change request", HINT)


def integrity_problems(doc: RequestDoc) -> list[str]:
    """Why the request is not what was proposed (edited after the fact), or an empty list."""
    req = doc.request
    problems = []
    if request_hash(req) != doc.request_sha256:
        problems.append("the request was edited after it was proposed (its hash no longer matches)")
    if diff_hash(req.policy_diff, req.ruleset_diff, req.policy_sha256) != req.diff_sha256:
        problems.append("its diffs do not match their recorded hash")
    try:
        if policy_digest(parse_policy(req.policy_text, "request policy_text")) != req.policy_sha256:
            problems.append("its policy text is not the version its digest names")
    except RingfenceError as exc:  # a policy that does not load is not the version that was proposed
        problems.append(f"its policy text is not a valid policy: {exc.message}")
    return problems


def request_bytes(doc: RequestDoc) -> bytes:
    """The file's bytes (indented JSON)."""
    return (json.dumps(doc.model_dump(mode="json"), indent=1) + "\n").encode()


__all__ = [
    "APPROVE_SOURCE",
    "ApprovedVersion",
    "integrity_problems",
    "last_approved",
    "load_request",
    "propose",
    "request_bytes",
]
