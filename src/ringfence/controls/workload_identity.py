"""Control point ``workload_identity``: workloads are known by identity, not only by address.

Reads the certificates ``ringfence verify keys`` writes (``Facts.keys["inventory"]``, entries of kind
``certificate``: ``{"kind": "certificate", "identity": "spiffe://…", "node": "storage", "not_after": "…"}``)
and its credential checks (``Facts.keys["credentials"]``: expired, revoked and foreign-CA certificates
that must be refused).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import pyarrow.compute as pc

from ringfence.controls._common import LIST_CAP, failing, flow_keys, flow_subject, parse_time, remediation_text, unknown
from ringfence.controls._drills import drill_failures
from ringfence.controls._flows import routed_flows
from ringfence.controls.interface import ControlMeta, Facts, Finding, Requirement, Side, Verdict
from ringfence.policy import Policy, Trust

#: Requirement ids.
ON_WIRE, CERTS, REFUSED = "identity-on-wire", "certificates-valid", "foreign-credential-refused"
VERIFY = "ringfence verify keys --target lab -o keys.json"
#: Node attestation (issue 16): the fabric admits only nodes whose TPM quote verified.
ATTESTED, ATTEST_DENIED = "attested-node-joins", "unattested-node-cut-off"
ATTEST = "ringfence attest verify --target lab --probe --drill NODE -o attest.json"

meta = ControlMeta(
    id="workload_identity",
    title="Workload identity",
    objective="Every internal node and job has a workload identity (SPIFFE ID) in the policy; identities "
    "seen on the wire match the inventory; workloads hold valid certificates for them.",
    acceptance="Permitted: a rank presenting its job identity is accepted by its peer. Denied: a workload "
    "presenting another workload's identity (or none) is flagged and refused by mTLS.",
    facts=("flows", "keys", "attestation", "drills"),
    requirements=(
        Requirement(ON_WIRE, Side.PERMITTED, "identities presented on the wire match the inventory", ("flows",),
                    "ringfence assess POLICY --captures hubble.json"),
        Requirement(CERTS, Side.PERMITTED, "workloads hold valid certificates for their identities", ("keys",), VERIFY),
        Requirement(REFUSED, Side.DENIED, "an expired, revoked or foreign-CA credential is refused by mTLS",
                    ("keys",), VERIFY),
        Requirement(ATTESTED, Side.PERMITTED, "a node whose TPM quote verified joins the fabric and reaches "
                    "its job's ranks", ("attestation",), ATTEST),
        Requirement(ATTEST_DENIED, Side.DENIED, "a node failing attestation cannot reach the job's ranks "
                    "(dropped at the fabric)", ("attestation",), ATTEST),
    ),
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
        f = failing(meta, policy, facts, flow_subject(row), why, flow_keys(row), facts.flow_evidence)
        out.append(dataclasses.replace(f, requirement=ON_WIRE))
    if len(bad_rows) > LIST_CAP:
        out.append(
            Finding(
                meta.id, Verdict.FAIL, f"{len(bad_rows) - LIST_CAP} more flows", "more identity mismatches not listed"
            )
        )
    out += [
        Finding(meta.id, Verdict.PASS, f"identity {ident}", f"presented on {n} flow(s), consistent with the inventory",
                facts.flow_evidence, requirement=ON_WIRE)
        for ident, n in sorted(good.items())
    ][:LIST_CAP]
    return out


def _certificates(keys: Mapping[str, Any]) -> list[Any] | None:
    inv = keys.get("inventory")
    if isinstance(inv, list):
        return [c for c in inv if isinstance(c, Mapping) and c.get("kind") == "certificate"]
    legacy = keys.get("certificates")  # hand-written facts of the first format
    return legacy if isinstance(legacy, list) else None


def _judge_certificates(policy: Policy, facts: Facts) -> list[Finding]:
    keys = facts.keys
    certs = _certificates(keys) if keys is not None else None
    if not certs:
        detail = "no certificate in the key facts' inventory" if keys is not None else ""
        return [unknown(meta, "workload certificates", "keys", detail)]
    out: list[Finding] = []
    have: set[str] = set()
    for cert in certs:
        if not isinstance(cert, Mapping) or not cert.get("identity"):
            out.append(Finding(meta.id, Verdict.UNKNOWN, "certificate", "a certificate entry names no identity"))
            continue
        ident = str(cert["identity"])
        not_after = parse_time(cert.get("not_after"))
        if not_after is None:
            out.append(Finding(meta.id, Verdict.UNKNOWN, f"certificate {ident}",
                               "certificate without a readable, timezone-aware expiry", requirement=CERTS))
        elif not_after <= facts.now:
            out.append(Finding(meta.id, Verdict.FAIL, f"certificate {ident}", f"expired at {not_after.isoformat()}",
                               remediation=remediation_text(meta), requirement=CERTS))
        else:
            have.add(ident)
            out.append(Finding(meta.id, Verdict.PASS, f"certificate {ident}", f"valid until {not_after.isoformat()}",
                               requirement=CERTS))
    internal = {z.name for z in policy.zones if z.trust is Trust.INTERNAL}
    # A node without a certificate in the inventory is not shown to hold one — unproven, not a violation:
    # it may authenticate another way (a tunnel key) that this control does not judge.
    out += [
        Finding(meta.id, Verdict.UNKNOWN, f"node {n.name}",
                f"no certificate for {n.identity} in the inventory `{VERIFY}` wrote")
        for n in policy.nodes
        if n.identity and n.zone in internal and n.identity not in have
    ]
    return out


def _judge_credentials(facts: Facts) -> list[Finding]:
    raw = facts.keys.get("credentials") if facts.keys is not None else None
    checks = [c for c in raw if isinstance(c, Mapping) and c.get("expected") == "refused"] if isinstance(
        raw, list) else []
    if not checks:
        detail = "no refused-credential check in the key facts" if facts.keys is not None else ""
        return [unknown(meta, "credentials that must be refused", "keys", detail)]
    out: list[Finding] = []
    for c in checks:
        subject = f"{c.get('kind', '?')} credential {c.get('identity', '?')}"
        verdict = c.get("verdict")
        outcome = f"{c.get('outcome', '?')}: {c.get('detail', '')}".rstrip(": ")
        if verdict == "pass":
            out.append(Finding(meta.id, Verdict.PASS, subject, f"refused ({outcome})", requirement=REFUSED))
        elif verdict == "fail":
            out.append(Finding(meta.id, Verdict.FAIL, subject, f"not refused ({outcome})",
                               remediation=remediation_text(meta), requirement=REFUSED))
        else:
            out.append(Finding(meta.id, Verdict.UNKNOWN, subject, f"no readable verdict ({verdict!r})",
                               requirement=REFUSED))
    return out


def _judge_attestation(facts: Facts) -> list[Finding]:
    """Permitted: a probe between admitted nodes connected. Denied: a probe to or from a refused node timed
    out at the gate. A probe that contradicts the gate fails; a refused port proves nothing (unknown)."""
    doc = facts.attestation
    probes = doc.get("probes") if doc is not None else None
    if not isinstance(probes, list) or not probes:
        detail = "no fabric probe in the attestation facts" if doc is not None else ""
        return [unknown(meta, "node attestation at the fabric", "attestation", detail)]
    out: list[Finding] = []
    for p in probes:
        if not isinstance(p, Mapping):
            continue
        req = ATTESTED if p.get("expected") == "reached" else ATTEST_DENIED
        subject = f"probe {p.get('source')} → {p.get('target')} ({p.get('address')}:{p.get('port')})"
        text = f"expected {p.get('expected')}, got {p.get('outcome')}"
        verdict = {"pass": Verdict.PASS, "fail": Verdict.FAIL}.get(str(p.get("verdict")), Verdict.UNKNOWN)
        out.append(Finding(meta.id, verdict, subject, text, requirement=req,
                           remediation=remediation_text(meta) if verdict is Verdict.FAIL else ""))
    return out


def evaluate(policy: Policy, facts: Facts) -> list[Finding]:
    """Identities on the wire must match the inventory; nodes in use need an identity and a
    valid certificate; refused credentials must be refused; without identity-bearing facts the verdict is
    ``unknown``."""
    return (_judge_flows(policy, facts) + _judge_certificates(policy, facts) + _judge_credentials(facts)
            + _judge_attestation(facts) + drill_failures(meta, facts))
