"""Control point ``containment``: a compromised node can be isolated quickly, without hurting the rest.

Reads ``Facts.containment`` when gathered: ``{"drills": [{"node": "aux", "isolated": true,
"by_policy": true, "others_unaffected": true, "restored": true, "seconds": 1.8, "evidence": ["…"]}]}``,
and ``Facts.drills`` (``ringfence drill run SCENARIO -o``) when the policy lists incident scenarios
(``incident_drills.scenarios``): each needs its newest drill passed, no older than ``incident_drills.every``.
"""

from __future__ import annotations

from collections.abc import Mapping

from ringfence.controls._common import remediation_text, unknown
from ringfence.controls._drills import finished_at, newest_reports
from ringfence.controls.interface import ControlMeta, Facts, Finding, Requirement, Side, Verdict
from ringfence.controls.requirements import max_age
from ringfence.policy import Policy

#: Requirement ids.
ISOLATED, OTHERS, RESTORED = "isolated-by-policy", "others-unaffected", "restored"
INCIDENTS = "incident-drills"
DRILL = "ringfence contain --node NODE --drill --target lab -o containment.json"
# the gather command of one scenario (the unmet-requirement finding names each missing scenario with its own)
SCENARIO_DRILL = "ringfence drill run malicious-job --target lab -o drill-malicious-job.json"

meta = ControlMeta(
    id="containment",
    title="Incident containment",
    objective="A suspect node can be cut off by policy within seconds while the training job and the "
    "rest of the cluster keep running, and restored afterwards.",
    acceptance="Permitted: after containment, the rest of the cluster (and the job) still communicates and "
    "the node is restored when the drill ends. Denied: every path to and from the contained node times out "
    "or is reset by policy during the drill.",
    facts=("containment", "drills"),
    requirements=(
        Requirement(OTHERS, Side.PERMITTED,
                    "during containment the rest of the cluster and the job keep communicating", ("containment",),
                    DRILL),
        Requirement(RESTORED, Side.PERMITTED, "the node is restored when the drill ends",
                    ("containment",), DRILL),
        Requirement(ISOLATED, Side.DENIED,
                    "every path to and from the contained node is blocked by policy, at the node and the fabric",
                    ("containment",), DRILL),
        Requirement(INCIDENTS, Side.DENIED,
                    "every incident scenario the policy lists (incident_drills.scenarios) was played recently: "
                    "each attack stopped and detected, contained, the bystander job inside its budget",
                    ("drills",), SCENARIO_DRILL, needed=lambda p: bool(p.incident_drills.scenarios)),
    ),
    remediation={
        "nftables": "a per-node quarantine set matched first in every chain (drop in and out, keep logging)",
        "networkpolicy": "label the pod quarantined; a deny-all policy selects that label",
        "cilium": "label the endpoint quarantined; a CiliumNetworkPolicy denies all for that label",
        "process": "run `ringfence contain --node NODE --drill --target lab` drills on a schedule; keep the "
        "incident-response plan current",
    },
)


def _is(value: object) -> bool:
    # Only a real boolean True proves anything: "yes", 1, None and a missing key do not.
    return value is True


def _judge(known: set[str], d: Mapping[str, object]) -> list[Finding]:
    node = str(d.get("node", "?"))
    subject = f"containment of node {node}"
    raw = d.get("evidence", ())
    evidence = tuple(str(e) for e in raw) if isinstance(raw, list | tuple) else ()
    if node not in known:
        return [Finding(meta.id, Verdict.FAIL, subject, "the contained node is not in the inventory", evidence,
                        remediation_text(meta), requirement=ISOLATED)]
    seconds = d.get("seconds")
    timing = f" in {seconds:.1f} s" if isinstance(seconds, int | float) and not isinstance(seconds, bool) else ""
    points = d.get("points")
    points = points if isinstance(points, Mapping) else {}
    out: list[Finding] = []
    isolated, by_policy = d.get("isolated"), d.get("by_policy")
    if isolated is False:
        out.append(Finding(meta.id, Verdict.FAIL, subject, "the node still communicated while contained", evidence,
                           remediation_text(meta), requirement=ISOLATED))
    else:
        missing = [why for ok, why in (
            (_is(isolated), f"isolation not measured (isolated: {isolated!r})"),
            (_is(by_policy), f"isolation not shown to be caused by policy (by_policy: {by_policy!r})"),
            (_is(points.get("node")), "no proven denial at the node's own ruleset"),
            (_is(points.get("fabric")), "no proven denial at the fabric"),
        ) if not ok]
        if missing:
            out.append(Finding(meta.id, Verdict.UNKNOWN, subject, "; ".join(missing), evidence, requirement=ISOLATED))
        else:
            out.append(Finding(meta.id, Verdict.PASS, subject, f"isolated by policy at the node and the fabric{timing}",
                               evidence, requirement=ISOLATED))
    others = d.get("others_unaffected")
    if others is False:
        out.append(Finding(meta.id, Verdict.FAIL, f"{subject}: the rest of the cluster",
                           "containment disrupted other nodes or the job", evidence, remediation_text(meta),
                           requirement=OTHERS))
    elif _is(others):
        out.append(Finding(meta.id, Verdict.PASS, f"{subject}: the rest of the cluster",
                           "other jobs kept training and the collector stayed reachable", evidence, requirement=OTHERS))
    else:
        out.append(Finding(meta.id, Verdict.UNKNOWN, f"{subject}: the rest of the cluster",
                           f"not shown unaffected (others_unaffected: {others!r}; is another job watched?)", evidence,
                           requirement=OTHERS))
    restored = d.get("restored")
    if restored is False:
        out.append(Finding(meta.id, Verdict.FAIL, f"{subject}: release", "the node was not restored after the drill",
                           evidence, remediation_text(meta), requirement=RESTORED))
    elif _is(restored):
        out.append(Finding(meta.id, Verdict.PASS, f"{subject}: release", "released; its approved paths connect again",
                           evidence, requirement=RESTORED))
    else:
        out.append(Finding(meta.id, Verdict.UNKNOWN, f"{subject}: release",
                           f"restoration not shown (restored: {restored!r}): release with "
                           f"`ringfence contain --node {node} --release --target lab`", evidence, requirement=RESTORED))
    return out


def _incidents(policy: Policy, facts: Facts) -> list[Finding]:
    """The newest drill of each scenario: the policy's scenarios must each have passed recently; a failed
    drill of any scenario is a failure (it names what got through)."""
    newest = {name: (at, d) for name, d in newest_reports(facts).items()
              if (at := finished_at(d)) is not None}
    every = policy.incident_drills.every
    limit = max_age(policy, "drills")
    out: list[Finding] = []
    for name in sorted({*policy.incident_drills.scenarios, *newest}):
        subject = f"incident drill {name}"
        cmd = f"ringfence drill run {name} --target lab -o drill-{name}.json"
        if name not in newest:
            out.append(Finding(meta.id, Verdict.UNKNOWN, subject, f"never drilled: run `{cmd}`",
                               requirement=INCIDENTS))
            continue
        at, d = newest[name]
        raw = d.get("evidence", ())
        evidence = tuple(str(e) for e in raw) if isinstance(raw, list | tuple) else ()
        why, verdict = str(d.get("why", "")), d.get("verdict")
        where = f"on {d.get('target', '?')} at {at.isoformat()}"
        if verdict == Verdict.FAIL.value:
            out.append(Finding(meta.id, Verdict.FAIL, subject, f"the drill {where} was not stopped: {why}", evidence,
                               remediation_text(meta), requirement=INCIDENTS))
        elif verdict != Verdict.PASS.value:
            out.append(Finding(meta.id, Verdict.UNKNOWN, subject, f"the drill {where} proved nothing: {why}; "
                               f"run `{cmd}` again", evidence, requirement=INCIDENTS))
        elif facts.now - at > limit:
            out.append(Finding(meta.id, Verdict.UNKNOWN, subject, f"the last passing drill ({where}) is older than "
                               f"the policy's {every}: run `{cmd}`", evidence, requirement=INCIDENTS))
        else:
            detect, contain = d.get("detection_seconds"), d.get("containment_seconds")
            timing = "".join(f"; {label} {v:.1f} s" for label, v in (("detected in", detect), ("contained in", contain))
                             if isinstance(v, int | float) and not isinstance(v, bool))
            out.append(Finding(meta.id, Verdict.PASS, subject, f"stopped and proven {where}{timing}", evidence,
                               requirement=INCIDENTS))
    return out


def evaluate(policy: Policy, facts: Facts) -> list[Finding]:
    """Each drill: isolation by policy at both points, no collateral damage and restoration — each
    proven by a real ``True``; ``False`` fails; anything else is unknown. Then each incident scenario."""
    incidents = _incidents(policy, facts) if policy.incident_drills.scenarios or facts.drills else []
    data = facts.containment
    if data is None:
        return [unknown(meta, "containment drills", "containment"), *incidents]
    drills = data.get("drills")
    if not isinstance(drills, list) or not drills:
        return [unknown(meta, "containment drills", "containment", "the containment facts hold no drill"), *incidents]
    known = {n.name for n in policy.nodes}
    out: list[Finding] = [*incidents]
    for i, d in enumerate(drills):
        if not isinstance(d, Mapping):
            out.append(Finding(meta.id, Verdict.UNKNOWN, f"containment drill #{i}",
                               "the drill record is not an object"))
            continue
        out += _judge(known, d)
    return out
