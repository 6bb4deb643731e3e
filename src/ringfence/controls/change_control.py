"""Control point ``change_control``: exceptions expire and are owned; changes are approved.

Reads ``Facts.changes`` when gathered: a sequence of applied ruleset versions, each a mapping with
``id``, ``applied_at`` (ISO time), ``approved_by`` and optionally ``ticket`` and ``verified`` (whether
the effect was observed after applying).
"""

from __future__ import annotations

from collections.abc import Mapping

from ringfence.controls._common import CONTROL_IDS, parse_time, remediation_text, unknown
from ringfence.controls.interface import ControlMeta, Facts, Finding, Verdict
from ringfence.policy import Policy

meta = ControlMeta(
    id="change_control",
    title="Change and exception control",
    objective="Every exception has an owner, a reason, a future expiry and a review trigger, and lapses "
    "when it expires; every applied ruleset change is approved and its effect observed.",
    acceptance="Permitted: an owned, unexpired exception exempts its subject and an approved change is "
    "applied. Denied: an expired exception no longer exempts (its subject fails) and an unapproved change "
    "is flagged.",
    facts=("changes",),
    remediation={
        "nftables": "apply rulesets only through `ringfence enforce apply`, which records version and approver",
        "networkpolicy": "apply policies through reviewed GitOps changes; record the approver per change",
        "cilium": "apply policies through reviewed GitOps changes; record the approver per change",
        "process": "renew or close expired exceptions; give each an owner, an expiry and a review trigger",
    },
)


def _exceptions(policy: Policy, facts: Facts) -> list[Finding]:
    today = facts.now.date()
    if not policy.exceptions:
        return [Finding(meta.id, Verdict.PASS, "exceptions", "the policy holds no open exceptions")]
    out = []
    for e in policy.exceptions:
        subject = f"exception {e.id}"
        problems = []
        if e.expires < today:
            problems.append(f"expired on {e.expires.isoformat()}")
        if not e.owner.strip():
            problems.append("no owner")
        if not e.review_trigger.strip():
            problems.append("no review trigger")
        if not e.reason.strip():
            problems.append("no reason")
        if e.control not in CONTROL_IDS:
            problems.append(f"names unknown control {e.control!r}")
        if problems:
            out.append(Finding(meta.id, Verdict.FAIL, subject, "; ".join(problems), remediation=remediation_text(meta)))
        else:
            out.append(
                Finding(
                    meta.id,
                    Verdict.PASS,
                    subject,
                    f"{e.control} / {e.subject}: owner {e.owner}, expires {e.expires.isoformat()}, "
                    f"review when {e.review_trigger}",
                )
            )
    return out


def _changes(facts: Facts) -> list[Finding]:
    if facts.changes is None:
        return [unknown(meta, "ruleset changes", "changes")]
    if not facts.changes:
        return [unknown(meta, "ruleset changes", "changes", "the change history is empty")]
    out = []
    for i, ch in enumerate(facts.changes):
        if not isinstance(ch, Mapping):
            out.append(Finding(meta.id, Verdict.UNKNOWN, f"change #{i}", "change record is not a mapping"))
            continue
        subject = f"change {ch.get('id', f'#{i}')}"
        problems = []
        if not ch.get("approved_by"):
            problems.append("applied without a recorded approver")
        if parse_time(ch.get("applied_at")) is None:
            problems.append("no readable application time")
        if ch.get("verified") is False:
            problems.append("its effect was not observed after applying")
        if problems:
            out.append(Finding(meta.id, Verdict.FAIL, subject, "; ".join(problems), remediation=remediation_text(meta)))
        else:
            ticket = f" ({ch['ticket']})" if ch.get("ticket") else ""
            out.append(
                Finding(
                    meta.id,
                    Verdict.PASS,
                    subject,
                    f"approved by {ch['approved_by']}{ticket}, applied {ch['applied_at']}",
                )
            )
    return out


def evaluate(policy: Policy, facts: Facts) -> list[Finding]:
    """Exceptions judged from the policy (expired ones fail); changes from the change history."""
    return _exceptions(policy, facts) + _changes(facts)
