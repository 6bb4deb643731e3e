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
from ringfence.policy import Policy, TrafficClass, parse_duration

#: Requirement ids.
CHANGES, EXCEPTIONS = "approved-change-verified", "exceptions-valid"
TRACED, REVIEWED = "change-traced", "rules-reviewed"
#: The trace's steps, in order: propose, approve (another identity), apply the request, probe, roll back, probe.
_TRACE_GATHER = "ringfence change propose POLICY --by ID --ticket T -o REQ.json"
_TRACE_STEPS = ("then `ringfence change approve REQ.json --by OTHER`, `ringfence apply POLICY --request REQ.json`, "
                "a probe, `ringfence change rollback`, a probe with --changes")

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
        Requirement(TRACED, Side.PERMITTED, "a sampled change is traced through request, approval by someone "
                    "other than the requester, deployment with its effect observed by a probe, and rollback, each "
                    "with the live ruleset recorded", ("changes",), _TRACE_GATHER),
        Requirement(REVIEWED, Side.DENIED, "the rules were reviewed (an approved change or a recorded review) "
                    "within the policy's review interval (PCI DSS 1.2.7)", ("changes",),
                    "ringfence change review CHANGE --by ID"),
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
        if ch.get("emergency") is True:
            # an emergency change deploys first; the reviewer afterwards is its approver
            if not _named(ch.get("reviewed_by")):
                problems.append("emergency change not reviewed afterwards (ringfence change review)")
            elif ch.get("reviewed_by") == ch.get("deployed_by"):
                problems.append("emergency change reviewed by whoever deployed it")
            approver = ch.get("reviewed_by") or approver
        elif not _named(approver):
            problems.append("applied without a recorded approver")
        if _named(approver) and approver == ch.get("requested_by"):
            problems.append(f"approved by its own requester {approver} (separation of duties)")
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


def _named(value: object) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _trace_gaps(ch: Mapping[str, object], later: list[Mapping[str, object]]) -> list[str]:
    """What the trace request → approval → deploy (observed) → rollback lacks for the deploy ``ch``."""
    gaps = []
    if not _named(ch.get("request")):
        gaps.append("no change request")
    if not _named(ch.get("approved_by")):
        gaps.append("no approval")
    elif ch.get("approved_by") == ch.get("requested_by") or not _named(ch.get("requested_by")):
        gaps.append("no approval by someone other than the requester")
    if ch.get("verified") is not True:
        gaps.append("its effect was not observed by a probe after the deploy")
    if not _named(ch.get("live")):
        gaps.append("no live ruleset recorded after the deploy")
    rollbacks = [r for r in later if r.get("action") == "rollback" and r.get("previous") == ch.get("version")]
    if not rollbacks:
        gaps.append("no rollback of it recorded")
    elif not any(_named(r.get("live")) for r in rollbacks):
        gaps.append("no live ruleset recorded after its rollback")
    return gaps


def _traced(facts: Facts) -> list[Finding]:
    if not facts.changes:
        return []  # the history's absence is already unknown (see _changes); the requirement gate names it
    changes = [c for c in facts.changes if isinstance(c, Mapping)]
    best: tuple[Mapping[str, object], list[str]] | None = None
    for i, ch in enumerate(changes):
        if ch.get("action") != "apply":
            continue
        gaps = _trace_gaps(ch, changes[i + 1:])
        if not gaps:
            evidence = tuple(str(e) for e in (ch.get("evidence"), ch.get("live")) if e)
            return [Finding(meta.id, Verdict.PASS, f"change {ch.get('id')}",
                            f"traced: request {str(ch['request'])[:16]} by {ch.get('requested_by')}, approved by "
                            f"{ch['approved_by']}, deployed and observed ({ch.get('verified_by')}), rolled back",
                            evidence, requirement=TRACED)]
        if best is None or len(gaps) <= len(best[1]):
            best = (ch, gaps)
    detail = (f"change {best[0].get('id')}: {'; '.join(best[1])}" if best else "no deploy recorded")
    return [Finding(meta.id, Verdict.UNKNOWN, "sampled change trace",
                    f"no change is traced through request, approval, observed deploy and rollback ({detail}): "
                    f"`{_TRACE_GATHER}`, {_TRACE_STEPS}", requirement=TRACED)]


def _reviewed(policy: Policy, facts: Facts) -> list[Finding]:
    if not facts.changes:
        return []
    interval = parse_duration(policy.change_control.review_interval)
    times = []
    for ch in facts.changes:
        if not isinstance(ch, Mapping):
            continue
        if ch.get("emergency") is not True and _named(ch.get("approved_by")) and ch.get("approved_by") != ch.get(
                "requested_by"):
            times.append(parse_time(ch.get("applied_at")))
        if _named(ch.get("reviewed_by")):
            times.append(parse_time(ch.get("reviewed_at")))
    known = [t for t in times if t is not None]
    subject = "rule review"
    if not known:
        return [Finding(meta.id, Verdict.FAIL, subject, "the rules were never reviewed: no approved change or "
                        "recorded review in the history", remediation=remediation_text(meta), requirement=REVIEWED)]
    last = max(known)
    if facts.now - last > interval:
        return [Finding(meta.id, Verdict.FAIL, subject, f"the rules were last reviewed {last.isoformat()}, longer "
                        f"ago than the review interval {policy.change_control.review_interval} (PCI DSS 1.2.7)",
                        remediation=remediation_text(meta), requirement=REVIEWED)]
    return [Finding(meta.id, Verdict.PASS, subject, f"last reviewed {last.isoformat()}, within "
                    f"{policy.change_control.review_interval}", requirement=REVIEWED)]


def evaluate(policy: Policy, facts: Facts) -> list[Finding]:
    """Exceptions judged from the policy (expired ones fail); changes, their trace and the rules' review
    from the change history."""
    return _exceptions(policy, facts) + _changes(facts) + _traced(facts) + _reviewed(policy, facts)
