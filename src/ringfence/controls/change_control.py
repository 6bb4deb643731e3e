"""Control point ``change_control``: exceptions expire and are owned; changes are approved.

Reads ``Facts.changes`` when gathered: a sequence of applied ruleset versions, each a mapping with
``id``, ``applied_at`` (ISO time), ``approved_by`` and optionally ``ticket`` and ``verified`` (whether
the effect was observed after applying).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping

from ringfence.controls._common import CONTROL_IDS, parse_time, remediation_text, unknown
from ringfence.controls.interface import ControlMeta, Facts, Finding, Requirement, Side, Verdict
from ringfence.policy import Policy, TrafficClass

#: Requirement ids.
CHANGES, EXCEPTIONS = "approved-change-verified", "exceptions-valid"

meta = ControlMeta(
    id="change_control",
    title="Change and exception control",
    objective="Every exception has an owner, a reason, a future expiry and a review trigger, and lapses "
    "when it expires; every applied ruleset change is approved and its effect observed.",
    acceptance="Permitted: an owned, unexpired exception exempts its subject and an approved change is "
    "applied. Denied: an expired exception no longer exempts (its subject fails) and an unapproved change "
    "is flagged.",
    facts=("changes",),
    requirements=(
        Requirement(CHANGES, Side.PERMITTED, "every applied ruleset change is approved and its effect observed "
                    "by a probe run after it", ("changes",),
                    "ringfence probe POLICY --target lab -o probes.json --changes changes.json"),
        Requirement(EXCEPTIONS, Side.DENIED, "every exception is owned, unexpired, names a real control and a "
                    "subject of the inventory (an expired one no longer exempts)", (), "ringfence policy check POLICY"),
    ),
    remediation={
        "nftables": "apply rulesets only through `ringfence apply POLICY --target lab --approved-by WHO`, which "
        "records version and approver",
        "networkpolicy": "apply policies through reviewed GitOps changes; record the approver per change",
        "cilium": "apply policies through reviewed GitOps changes; record the approver per change",
        "process": "renew or close expired exceptions; give each an owner, an expiry and a review trigger",
    },
)


def subject_problem(policy: Policy, subject: str) -> str | None:
    """Why an exception subject matches nothing in the policy's inventory (None if it names something)."""
    kind, sep, value = subject.partition(":")
    names: dict[str, set[str]] = {
        "class": {c.value for c in TrafficClass},
        "flow": {f.id for f in policy.approved},
        "node": {n.name for n in policy.nodes},
        "zone": {z.name for z in policy.zones},
        "job": {j.name for j in policy.jobs},
        "service": {s.name for s in policy.services},
    }
    if not sep or kind not in (*names, "address"):
        return f"subject {subject!r} is not KIND:NAME with KIND one of {', '.join((*names, 'address'))}"
    if kind == "address":
        try:
            ipaddress.ip_network(value, strict=False)
        except ValueError:
            return f"subject {subject!r} is not an IP address or network"
        return None
    if value not in names[kind]:
        return f"subject {subject!r} names no {kind} of the inventory, so it would exempt nothing"
    return None


def _exceptions(policy: Policy, facts: Facts) -> list[Finding]:
    today = facts.now.date()
    if not policy.exceptions:
        return [Finding(meta.id, Verdict.PASS, "exceptions", "the policy holds no open exceptions",
                        requirement=EXCEPTIONS)]
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
        if (why := subject_problem(policy, e.subject)) is not None:
            problems.append(why)
        if problems:
            out.append(Finding(meta.id, Verdict.FAIL, subject, "; ".join(problems), remediation=remediation_text(meta),
                               requirement=EXCEPTIONS))
        else:
            out.append(
                Finding(
                    meta.id,
                    Verdict.PASS,
                    subject,
                    f"{e.control} / {e.subject}: owner {e.owner}, expires {e.expires.isoformat()}, "
                    f"review when {e.review_trigger}",
                    requirement=EXCEPTIONS,
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
            out.append(Finding(meta.id, Verdict.UNKNOWN, f"change #{i}", "change record is not a mapping",
                               requirement=CHANGES))
            continue
        subject = f"change {ch.get('id', f'#{i}')}"
        evidence = tuple(str(e) for e in (ch.get("evidence"), ch.get("verified_by")) if isinstance(e, str) and e)
        approver = ch.get("approved_by")
        problems = []
        if not isinstance(approver, str) or not approver.strip():
            problems.append("applied without a recorded approver")
        if ch.get("verified") is False:
            problems.append("its effect was not observed after applying (the probe run after it failed)")
        if problems:
            out.append(Finding(meta.id, Verdict.FAIL, subject, "; ".join(problems), evidence,
                               remediation=remediation_text(meta), requirement=CHANGES))
            continue
        unproven = []
        if parse_time(ch.get("applied_at")) is None:
            unproven.append("no readable, timezone-aware application time")
        if ch.get("verified") is not True:
            # None: no probe run followed the change, so nobody observed its effect.
            unproven.append(f"its effect was never verified (verified: {ch.get('verified')!r}): run "
                            "`ringfence probe POLICY --target lab -o probes.json` after applying")
        if unproven:
            out.append(Finding(meta.id, Verdict.UNKNOWN, subject, "; ".join(unproven), evidence, requirement=CHANGES))
            continue
        ticket = f" ({ch['ticket']})" if ch.get("ticket") else ""
        verified_by = f", verified by {ch['verified_by']}" if ch.get("verified_by") else ""
        out.append(Finding(meta.id, Verdict.PASS, subject,
                           f"approved by {approver}{ticket}, applied {ch['applied_at']}{verified_by}", evidence,
                           requirement=CHANGES))
    return out


def evaluate(policy: Policy, facts: Facts) -> list[Finding]:
    """Exceptions judged from the policy (expired ones fail); changes from the change history."""
    return _exceptions(policy, facts) + _changes(facts)
