"""Control point ``zones``: traffic between security zones follows the approved matrix."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ringfence.controls._common import who
from ringfence.controls._flows import judge_paths, path_requirements
from ringfence.controls.interface import ControlMeta, Facts, Finding
from ringfence.policy import Policy

meta = ControlMeta(
    id="zones",
    title="Security zones and the approved communication matrix",
    objective="Every flow between zones (and inside one) is an entry of the approved matrix; "
    "everything else — lateral movement, unclassified traffic — is denied.",
    acceptance="Permitted: an approved zone pair (e.g. user → management API) is observed and connects. "
    "Denied: an unapproved pair (e.g. workload → workload on an unlisted port) times out or is reset "
    "by policy, and no such flow appears in captures.",
    facts=("flows", "probes"),
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
    ),
)


def _message(row: Mapping[str, Any]) -> str:
    unclassified = row.get("class") in (None, "unclassified")
    what = "unclassified traffic, not in the approved matrix" if unclassified else "not in the approved matrix"
    return f"{what}: {who(row, 'src')} → {who(row, 'dst')}"


def evaluate(policy: Policy, facts: Facts) -> list[Finding]:
    """Unapproved and unclassified flows fail; approved zone pairs observed pass; probes judged."""
    return judge_paths(meta, policy, facts, "between zones", _message)
