"""Control point ``zones``: traffic between security zones follows the approved matrix."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ringfence.controls._common import remediation_text, unknown, who
from ringfence.controls._flows import judge_paths, path_requirements
from ringfence.controls.interface import ControlMeta, Facts, Finding, Requirement, Side, Verdict
from ringfence.policy import Policy

#: Requirement id: the live enforcement state equals what the approved matrix renders.
LIVE = "live-state-matches"
RULESET = "ringfence probe POLICY --target lab -o probes.json --ruleset ruleset.json"

meta = ControlMeta(
    id="zones",
    title="Security zones and the approved communication matrix",
    objective="Every flow between zones (and inside one) is an entry of the approved matrix; "
    "everything else — lateral movement, unclassified traffic — is denied.",
    acceptance="Permitted: an approved zone pair (e.g. user → management API) is observed and connects. "
    "Denied: an unapproved pair (e.g. workload → workload on an unlisted port) times out or is reset "
    "by policy, and no such flow appears in captures.",
    facts=("flows", "probes", "ruleset"),
    remediation={
        "nftables": "default-drop forward/input chains; accept only the approved zone pairs and ports",
        "networkpolicy": "a default-deny NetworkPolicy per namespace plus one allow policy per approved entry",
        "cilium": "CiliumNetworkPolicy with endpoint/entity selectors per zone; policy-enforcement: always",
        "process": "add the flow to `approved:` with an owner if it is legitimate, else find and stop its source",
    },
    requirements=path_requirements(
        'an approved zone pair (e.g. user → management API) connects',
        'an unapproved zone pair times out or is reset by policy',
        'any zone pair',
    ) + (
        Requirement(LIVE, Side.DENIED, "the live ruleset of every enforcement point accepts exactly the approved "
                    "flows expected there (no drift from what "
                    "`ringfence compile POLICY --to nftables -o DIR` renders)", ("ruleset",), RULESET),
    ),
)


def _message(row: Mapping[str, Any]) -> str:
    unclassified = row.get("class") in (None, "unclassified")
    what = "unclassified traffic, not in the approved matrix" if unclassified else "not in the approved matrix"
    return f"{what}: {who(row, 'src')} → {who(row, 'dst')}"


def _point(scope: str, point: Mapping[str, Any]) -> list[Finding]:
    subject = f"enforcement point {scope}"
    fix = remediation_text(meta)
    if point.get("present") is not True:
        return [Finding(meta.id, Verdict.FAIL, subject, "no ringfence ruleset is loaded: nothing enforces the "
                        "approved matrix here", remediation=fix, requirement=LIVE)]
    out = []
    if point.get("audit") is not False:
        out.append(Finding(meta.id, Verdict.FAIL, subject, "the ruleset is in audit mode: it logs what it would drop "
                           "and drops nothing", remediation=fix, requirement=LIVE))
    out += [Finding(meta.id, Verdict.FAIL, f"{subject}: flow {fid}", f"drift: approved flow {fid} has no accept rule "
                    "in the live ruleset (it differs from what compile renders)", remediation=fix, requirement=LIVE)
            for fid in point.get("missing_flows") or ()]
    out += [Finding(meta.id, Verdict.FAIL, f"{subject}: flow {fid}", f"drift: the live ruleset accepts flow {fid}, "
                    "which the approved matrix does not place here", remediation=fix, requirement=LIVE)
            for fid in point.get("extra_flows") or ()]
    if not out:
        n = len(point.get("flows") or ())
        out.append(Finding(meta.id, Verdict.PASS, subject, f"the live ruleset accepts exactly the {n} approved flow(s) "
                           f"expected here ({point.get('rules')} rules)", requirement=LIVE))
    return out


def _live(policy: Policy, facts: Facts) -> list[Finding]:
    """The live rulesets against the approved matrix (``ringfence probe --ruleset``)."""
    ruleset = facts.ruleset
    if ruleset is None:
        return [unknown(meta, "live enforcement state", "ruleset")]
    points = ruleset.get("points")
    if not isinstance(points, Mapping) or not points:
        return [unknown(meta, "live enforcement state", "ruleset", "the ruleset facts hold no enforcement point")]
    out: list[Finding] = []
    approved = sorted(f.id for f in policy.approved)
    fabric = points.get("fabric")
    if isinstance(fabric, Mapping) and sorted(fabric.get("expected_flows") or ()) != approved:
        out.append(Finding(meta.id, Verdict.UNKNOWN, "live enforcement state", "the ruleset facts were gathered "
                           "against another approved matrix than this policy's: gather them again", requirement=LIVE))
    for scope, point in sorted(points.items()):
        if not isinstance(point, Mapping) or point.get("enforced") is False:
            continue  # nodes outside the trust boundary carry no ruleset of ours
        out += _point(str(scope), point)  # the routed (inet) family; the bridge copy is the fabric's own business
    return out


def evaluate(policy: Policy, facts: Facts) -> list[Finding]:
    """Unapproved and unclassified flows fail; approved zone pairs observed pass; probes judged; the
    live rulesets diffed with the approved matrix (drift fails, naming the point and the flow)."""
    return judge_paths(meta, policy, facts, "between zones", _message) + _live(policy, facts)
