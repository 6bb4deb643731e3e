"""Control point ``workload_identity``: workloads are known by identity, not only by address.

Reads ``Facts.keys["certificates"]`` when gathered: ``[{"identity": "spiffe://…", "node": "worker-0",
"not_after": "2026-12-01T00:00:00+00:00"}]``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow.compute as pc

from ringfence.controls._common import LIST_CAP, failing, flow_keys, flow_subject, parse_time, remediation_text, unknown
from ringfence.controls._flows import routed_flows
from ringfence.controls.interface import ControlMeta, Facts, Finding, Verdict
from ringfence.policy import Policy, Trust

meta = ControlMeta(
    id="workload_identity",
    title="Workload identity",
    objective="Every internal node and job has a workload identity (SPIFFE ID) in the policy; identities "
    "seen on the wire match the inventory; workloads hold valid certificates for them.",
    acceptance="Permitted: a rank presenting its job identity is accepted by its peer. Denied: a workload "
    "presenting another workload's identity (or none) is flagged and refused by mTLS.",
    facts=("flows", "keys"),
    remediation={
        "nftables": "not enforceable by addresses alone: pair address sets with mTLS on the services",
        "networkpolicy": "select peers by service-account labels, and enforce mTLS in the mesh",
        "cilium": "identity-based CiliumNetworkPolicy; enable mutual authentication (SPIFFE)",
        "process": "issue a SPIFFE identity per node and job; rotate certificates within cert_lifetime",
    },
)


def _expected(policy: Policy) -> dict[str, set[str]]:
    """node → identities it may present: its own, and its jobs'."""
    out = {n.name: {n.identity} if n.identity else set() for n in policy.nodes}
    for j in policy.jobs:
        for m in j.members:
            out.setdefault(m, set()).add(j.identity)
    return out


def _judge_flows(policy: Policy, facts: Facts) -> list[Finding]:
    table = routed_flows(policy, facts)
    if table is None:
        return [unknown(meta, "workload identities on the wire", "flows")]
    out: list[Finding] = []
    internal = {z.name for z in policy.zones if z.trust is Trust.INTERNAL}
    seen_nodes = set(table.column("src_node").drop_null().to_pylist()) | set(
        table.column("dst_node").drop_null().to_pylist()
    )
    out += [
        Finding(
            meta.id,
            Verdict.FAIL,
            f"node {n.name}",
            f"node {n.name} (zone {n.zone}) carries traffic but has no workload identity in the policy",
            remediation=remediation_text(meta),
        )
        for n in policy.nodes
        if n.name in seen_nodes and n.zone in internal and not n.identity
    ]
    with_ident = table.filter(
        pc.or_(pc.is_valid(table.column("src_identity")), pc.is_valid(table.column("dst_identity")))
    )
    if with_ident.num_rows == 0:
        return [*out, unknown(meta, "workload identities on the wire", "identity")]
    known = {n.identity for n in policy.nodes if n.identity} | {j.identity for j in policy.jobs}
    expected = _expected(policy)
    good: dict[str, int] = {}
    bad_rows: list[tuple[Mapping[str, Any], str]] = []
    for row in with_ident.to_pylist():
        problems = []
        for side in ("src", "dst"):
            ident, node = row.get(f"{side}_identity"), row.get(f"{side}_node")
            if not ident:
                continue
            if ident not in known:
                problems.append(f"{side} presents identity {ident}, which the policy does not know")
            elif node and ident not in expected.get(node, set()):
                problems.append(f"node {node} presents identity {ident}, which the policy gives to another workload")
            else:
                good[ident] = good.get(ident, 0) + 1
        if problems:
            bad_rows.append((row, "; ".join(problems)))
    for row, why in bad_rows[:LIST_CAP]:
        out.append(failing(meta, policy, facts, flow_subject(row), why, flow_keys(row), facts.flow_evidence))
    if len(bad_rows) > LIST_CAP:
        out.append(
            Finding(
                meta.id, Verdict.FAIL, f"{len(bad_rows) - LIST_CAP} more flows", "more identity mismatches not listed"
            )
        )
    out += [
        Finding(meta.id, Verdict.PASS, f"identity {ident}", f"presented on {n} flow(s), consistent with the inventory")
        for ident, n in sorted(good.items())
    ][:LIST_CAP]
    return out


def _judge_certificates(policy: Policy, facts: Facts) -> list[Finding]:
    keys = facts.keys
    certs = keys.get("certificates") if keys is not None else None
    if not isinstance(certs, list):
        detail = "no certificate inventory in the key facts" if keys is not None else ""
        return [unknown(meta, "workload certificates", "keys", detail)]
    out: list[Finding] = []
    have: set[str] = set()
    for cert in certs:
        if not isinstance(cert, Mapping) or not cert.get("identity"):
            continue
        ident = str(cert["identity"])
        not_after = parse_time(cert.get("not_after"))
        if not_after is None:
            out.append(
                Finding(meta.id, Verdict.UNKNOWN, f"certificate {ident}", "certificate without a readable expiry")
            )
        elif not_after <= facts.now:
            out.append(
                Finding(
                    meta.id,
                    Verdict.FAIL,
                    f"certificate {ident}",
                    f"expired at {not_after}",
                    remediation=remediation_text(meta),
                )
            )
        else:
            have.add(ident)
            out.append(Finding(meta.id, Verdict.PASS, f"certificate {ident}", f"valid until {not_after}"))
    internal = {z.name for z in policy.zones if z.trust is Trust.INTERNAL}
    out += [
        Finding(
            meta.id,
            Verdict.FAIL,
            f"node {n.name}",
            f"no valid certificate for {n.identity}",
            remediation=remediation_text(meta),
        )
        for n in policy.nodes
        if n.identity and n.zone in internal and n.identity not in have
    ]
    return out


def evaluate(policy: Policy, facts: Facts) -> list[Finding]:
    """Identities on the wire must match the inventory; nodes in use need an identity and a
    valid certificate; without identity-bearing facts the verdict is ``unknown``."""
    return _judge_flows(policy, facts) + _judge_certificates(policy, facts)
