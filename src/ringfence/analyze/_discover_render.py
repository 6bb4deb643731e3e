"""A proposal as a policy file (YAML, evidence in comments) and as a sidecar evidence document (JSON).

The YAML is the inventory, unchanged but for ``approved:``; above each entry a comment carries its
evidence and required protection, and after the entries the flagged flows follow as comments, each
with a commented-out entry that a human may uncomment to approve it. The text is checked to load
with :func:`ringfence.policy.parse_policy` before it is returned.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml

from ringfence.analyze._discover_types import FlaggedFlow, Proposal, ProposedRule
from ringfence.errors import RingfenceError
from ringfence.policy import ApprovedFlow, Policy, PolicyError, parse_policy

#: ``format`` of the sidecar evidence document.
EVIDENCE_FORMAT = "ringfence-discover/1"


def rule_data(rule: ApprovedFlow) -> dict[str, Any]:
    """An approved flow as the policy file writes it (``from``/``to``/``class``; proto always stated)."""
    data: dict[str, Any] = {
        "id": rule.id,
        "from": rule.source.model_dump(mode="json", exclude_none=True),
        "to": rule.destination.model_dump(mode="json", exclude_none=True),
        "proto": rule.proto,
    }
    if rule.ports is not None:
        data["ports"] = rule.ports
    data["class"] = rule.traffic_class.value
    if rule.description:
        data["description"] = rule.description
    return data


def _flow_yaml(data: Any) -> str:
    text: str = yaml.safe_dump(data, default_flow_style=True, sort_keys=False, width=1 << 20, allow_unicode=True)
    return text.strip()


def _comment(text: str) -> str:
    return " ".join(text.split())  # one line, whatever the evidence contained


def _rule_lines(r: ProposedRule) -> list[str]:
    ev = r.evidence.summary() if r.evidence is not None else "not observed"
    lines = [f"  # {r.rule.traffic_class.value}, protection {r.protection} — {_comment(ev)}"]
    lines += [f"  # note: {_comment(n)}" for n in r.notes]
    lines.append(f"  - {_flow_yaml(rule_data(r.rule))}")
    return lines


def _flag_lines(f: FlaggedFlow) -> list[str]:
    lines = [f"  # FLAGGED {_comment(f.describe())}", f"  #   {_comment(f.evidence.summary())}"]
    if f.suggested is not None:
        lines.append(f"  # - {_flow_yaml(rule_data(f.suggested))}")
    else:
        lines.append("  #   (no entry suggested: classify this traffic first — declare its service or job)")
    return lines


def _section(key: str, value: Any) -> str:
    # Block style for the top two levels, one flow-style line per item below: the shape of the
    # hand-written example policies, and one entry per line keeps a diff of two proposals readable.
    if isinstance(value, list):
        if not value:
            return f"{key}: []\n"
        return f"{key}:\n" + "".join(f"  - {_flow_yaml(item)}\n" for item in value)
    if isinstance(value, dict):
        if not value:
            return f"{key}: {{}}\n"
        return f"{key}:\n" + "".join(f"  {_flow_yaml({k: v})[1:-1]}\n" for k, v in value.items())
    text: str = yaml.safe_dump({key: value}, default_flow_style=False, allow_unicode=True)
    return text


def render_yaml(proposal: Proposal, header: Sequence[str] = ()) -> str:
    """The proposal as a complete policy file; ``header`` lines become comments at the top."""
    doc = proposal.policy.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    doc.pop("approved", None)
    parts = [f"# {_comment(h)}\n" for h in header]
    parts.append(_section("version", proposal.policy.version))
    for name, field in Policy.model_fields.items():
        key = field.alias or name
        if key == "version":
            continue
        if key == "approved":
            parts.append(_approved_block(proposal))
        elif key in doc:
            parts.append(_section(key, doc[key]))
    text = "".join(parts)
    try:
        loaded = parse_policy(text, "<proposal>")
    except PolicyError as exc:
        raise RingfenceError(f"the proposal does not load as a policy (a bug in discovery): {exc.message}") from exc
    if loaded.approved != proposal.policy.approved:
        raise RingfenceError("the proposal's approved entries changed in writing (a bug in discovery)")
    return text


def _approved_block(proposal: Proposal) -> str:
    lines = ["# Proposed by `ringfence discover`: evidence above each entry; flagged flows follow, NOT approved."]
    lines.append("approved:" if proposal.rules else "approved: []")
    for r in proposal.rules:
        lines += _rule_lines(r)
    if proposal.flagged:
        lines.append("  # ---- flagged: NOT approved. Review each; uncomment its entry to approve it by hand. ----")
        for f in proposal.flagged:
            lines += _flag_lines(f)
    return "\n".join(lines) + "\n"


def evidence_document(proposal: Proposal, inputs: Sequence[str] = ()) -> dict[str, Any]:
    """The sidecar: every rule with its evidence and rationale, every flagged flow, the settings used."""
    opt = proposal.options
    return {
        "format": EVIDENCE_FORMAT,
        "cluster": proposal.policy.cluster,
        "inputs": list(inputs),
        "flows": proposal.flows,
        "settings": {
            "ephemeral_range": list(opt.ephemeral),
            "admin_zones": None if opt.admin_zones is None else list(opt.admin_zones),
            "rendezvous": dict(opt.rendezvous),
            "assume_rendezvous": opt.assume_rendezvous,
            "max_fixed_runs": opt.max_fixed_runs,
            "min_zone_nodes": opt.min_zone_nodes,
        },
        "approved": [
            {
                "rule": rule_data(r.rule),
                "protection": r.protection,
                "rationale": r.rationale,
                "evidence": None if r.evidence is None else r.evidence.as_json(),
                "notes": list(r.notes),
            }
            for r in proposal.rules
        ],
        "flagged": [
            {
                "reasons": list(f.reasons),
                "source": f.source,
                "destination": f.destination,
                "proto": f.proto,
                "ports": f.ports,
                "class": f.traffic_class,
                "service": f.service,
                "evidence": f.evidence.as_json(),
                "suggested": None if f.suggested is None else rule_data(f.suggested),
            }
            for f in proposal.flagged
        ],
        "notes": list(proposal.notes),
    }


__all__ = ["EVIDENCE_FORMAT", "evidence_document", "render_yaml", "rule_data"]
