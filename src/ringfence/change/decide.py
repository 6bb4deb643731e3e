"""The decisions of change control: approve a request, let a deploy through, review an emergency change.

Each refusal is :class:`Refused` (the CLI's exit 1: a finding, not a usage error) and says why.
Separation of duties is checked everywhere it matters: an approval by the requester is refused when
asked for and ignored when found in a file; an emergency change is reviewed by someone other than
whoever deployed it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from ringfence.change.approval import approval_problem, sign_approval
from ringfence.change.interface import ChangeError, RequestDoc
from ringfence.change.request import APPROVE_SOURCE, integrity_problems, last_approved
from ringfence.enforce.apply import SOURCE as APPLY_SOURCE
from ringfence.evidence import EvidenceStore, RecordKind
from ringfence.evidence.checkpoint import Signer
from ringfence.facts.changes import REVIEW_SOURCE
from ringfence.policy import Policy, parse_policy, policy_digest


class Refused(ChangeError):
    """Change control said no: separation of duties, a tampered request, no valid approval."""


def trusted_approvers(doc: RequestDoc, store: EvidenceStore) -> dict[str, str]:
    """Whose keys count: the last approved version's approvers (a request cannot enrol its own
    approvers), or for the very first version the proposed policy's."""
    base = last_approved(store, doc.request.cluster)
    if base is not None and base.approvers:
        return base.approvers
    return dict(parse_policy(doc.request.policy_text, "request policy_text").change_control.approvers)


def approve(doc: RequestDoc, *, by: str, signer: Signer, store: EvidenceStore,
            now: datetime | None = None) -> tuple[RequestDoc, str]:
    """``doc`` with ``by``'s signed approval added, and the approval's evidence id; :class:`Refused` when
    ``by`` asked for the change, the request was edited, or ``by``'s key is not trusted for ``by``."""
    req = doc.request
    problems = integrity_problems(doc)
    if by.strip() == req.requested_by:
        problems.insert(0, f"{by} requested this change and cannot approve it (separation of duties)")
    if problems:
        raise Refused(f"approval refused: {'; '.join(problems)}")
    approval = sign_approval(signer, doc.request_sha256, by.strip(), now or datetime.now(UTC))
    why = approval_problem(approval, doc.request_sha256, trusted_approvers(doc, store))
    if why is not None:
        raise Refused(f"approval refused: {why}", hint="list the approver's public key (ringfence change pubkey) "
                      "under change_control.approvers of the approved policy")
    art = store.add_artifact(req.policy_text.encode(), f"policy-{req.policy_sha256[:16]}.yaml", source=APPROVE_SOURCE)
    blob = store.get(art).data["blob"]
    approvers = dict(parse_policy(req.policy_text, "request policy_text").change_control.approvers)
    ev = store.append(RecordKind.ACTION, APPROVE_SOURCE, f"change {doc.request_sha256[:16]}", {
        "action": "approve", "cluster": req.cluster, "request_sha256": doc.request_sha256,
        "policy_sha256": req.policy_sha256, "diff_sha256": req.diff_sha256, "by": approval.by,
        "requested_by": req.requested_by, "ticket": req.ticket, "commit": req.commit, "policy": blob,
        "approvers": approvers,
    }, {"policy": blob})
    return doc.model_copy(update={"approvals": (*doc.approvals, approval)}), str(ev)


def deploy_approval(doc: RequestDoc, policy: Policy, store: EvidenceStore) -> dict[str, Any]:
    """What an apply records of the approved request it deploys; :class:`Refused` unless ``policy`` is
    exactly the requested version and someone other than the requester approved that request."""
    req = doc.request
    problems = integrity_problems(doc)
    if policy_digest(policy) != req.policy_sha256:
        problems.append(f"the policy being applied ({policy_digest(policy)[:16]}…) is not the version this request "
                        f"names ({req.policy_sha256[:16]}…)")
    trusted = trusted_approvers(doc, store)
    valid, notes = [], []
    for a in doc.approvals:
        if a.by == req.requested_by:
            notes.append(f"the approval by {a.by} is by the requester and does not count")
            continue
        why = approval_problem(a, doc.request_sha256, trusted)
        if why:
            notes.append(why)
        else:
            valid.append(a.by)
    if not valid:
        problems.append("no valid approval by someone other than the requester" + (f" ({'; '.join(notes)})"
                                                                                  if notes else ""))
    if problems:
        raise Refused(f"deploy refused: {'; '.join(problems)}",
                      hint="ringfence change approve REQUEST.json --by ID (someone other than the requester)")
    return {"request": doc.request_sha256, "requested_by": req.requested_by, "approved_by": valid[0],
            "ticket": req.ticket, "commit": req.commit, "diff_sha256": req.diff_sha256}


def _applied(store: EvidenceStore, evidence_id: str) -> Mapping[str, Any]:
    rec = store.get(evidence_id)  # UnknownEvidence (a RingfenceError) names a missing or malformed id
    if rec.source != APPLY_SOURCE or not isinstance(rec.data, dict):
        raise ChangeError(f"evidence record {evidence_id} is not a deployed change (source {rec.source})")
    return rec.data


def review(store: EvidenceStore, evidence_id: str, *, by: str, note: str = "") -> str:
    """Record ``by``'s after-the-fact review of the deployed change ``evidence_id`` (an emergency change);
    :class:`Refused` when ``by`` deployed it."""
    data = _applied(store, evidence_id)
    if not by.strip():
        raise ChangeError("a review needs the reviewer's identity (--by)")
    if by.strip() == data.get("deployed_by"):
        raise Refused(f"{by} deployed change {evidence_id} and cannot review it (separation of duties)")
    ev = store.append(RecordKind.ACTION, REVIEW_SOURCE, f"change {evidence_id}", {
        "action": "review", "target": data.get("target"), "change": evidence_id, "by": by.strip(), "note": note,
    })
    return str(ev)


__all__ = ["REVIEW_SOURCE", "Refused", "approve", "deploy_approval", "review", "trusted_approvers"]
