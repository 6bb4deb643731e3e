"""Control point ``containment``: a compromised node can be isolated quickly, without hurting the rest.

Reads ``Facts.containment`` when gathered: ``{"drills": [{"node": "aux", "isolated": true,
"by_policy": true, "others_unaffected": true, "restored": true, "seconds": 1.8, "evidence": ["…"]}]}``.
"""

from __future__ import annotations

from collections.abc import Mapping

from ringfence.controls._common import remediation_text, unknown
from ringfence.controls.interface import ControlMeta, Facts, Finding, Verdict
from ringfence.policy import Policy

meta = ControlMeta(
    id="containment",
    title="Incident containment",
    objective="A suspect node can be cut off by policy within seconds while the training job and the "
    "rest of the cluster keep running, and restored afterwards.",
    acceptance="Permitted: after containment, the rest of the cluster (and the job) still communicates and "
    "the node is restored when the drill ends. Denied: every path to and from the contained node times out "
    "or is reset by policy during the drill.",
    facts=("containment",),
    remediation={
        "nftables": "a per-node quarantine set matched first in every chain (drop in and out, keep logging)",
        "networkpolicy": "label the pod quarantined; a deny-all policy selects that label",
        "cilium": "label the endpoint quarantined; a CiliumNetworkPolicy denies all for that label",
        "process": "run `ringfence contain` drills on a schedule; keep the incident-response plan current",
    },
)


def evaluate(policy: Policy, facts: Facts) -> list[Finding]:
    """Each containment drill: isolation by policy and no collateral damage pass; else fail."""
    data = facts.containment
    if data is None:
        return [unknown(meta, "containment drills", "containment")]
    drills = data.get("drills")
    if not isinstance(drills, list) or not drills:
        return [unknown(meta, "containment drills", "containment", "the containment facts hold no drill")]
    known = {n.name for n in policy.nodes}
    out: list[Finding] = []
    for d in drills:
        if not isinstance(d, Mapping):
            continue
        node = str(d.get("node", "?"))
        subject = f"containment of node {node}"
        evidence = tuple(str(e) for e in d.get("evidence", ()) or ())
        problems, unproven = [], []
        if node not in known:
            problems.append("the node is not in the inventory")
        if d.get("isolated") is False:
            problems.append("the node still communicated while contained")
        elif d.get("isolated") is None:
            unproven.append("isolation not measured")
        if d.get("isolated") is True and d.get("by_policy") is not True:
            unproven.append("isolation not shown to be caused by policy")
        if d.get("others_unaffected") is False:
            problems.append("containment disrupted other nodes or the job")
        if d.get("restored") is False:
            problems.append("the node was not restored after the drill")
        seconds = d.get("seconds")
        timing = f" in {seconds:.1f} s" if isinstance(seconds, int | float) else ""
        if problems:
            out.append(Finding(meta.id, Verdict.FAIL, subject, "; ".join(problems), evidence, remediation_text(meta)))
        elif unproven:
            out.append(Finding(meta.id, Verdict.UNKNOWN, subject, "; ".join(unproven), evidence))
        else:
            out.append(
                Finding(meta.id, Verdict.PASS, subject, f"isolated by policy{timing}, rest unaffected", evidence)
            )
    return out
