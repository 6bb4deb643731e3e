"""The verifier: enrol nodes (EK, AK, credential activation) and judge their quotes; any failure refuses.

Everything the verifier trusts is its own: the registry's enrolled AK (never a key a node sends with a
quote), a nonce it drew just now, and the policy's allowlist. A node that does not answer, is not
enrolled, or sends anything that does not verify is refused with every reason found.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from cryptography import x509

from ringfence.attest.credential import make_credential
from ringfence.attest.ekcert import check_ek_certificates, ek_kind
from ringfence.attest.ekcrl import EkCrl
from ringfence.attest.eventlog import judge_events, pcr_digest
from ringfence.attest.interface import AttestError, Decision, Evidence, MalformedTpmData, TpmUnreachable
from ringfence.attest.measured import read_measurements
from ringfence.attest.node import NodeTpm
from ringfence.attest.quote import check_quote
from ringfence.attest.registry import Enrolment, read_registry, with_enrolment, write_registry
from ringfence.attest.structures import parse_attest, parse_public, public_area_digest
from ringfence.policy.attestation import Attestation

#: How a quote is fetched from a node: (tpm, nonce, pcrs) → evidence. Tests pass one that tampers.
Collector = Callable[[NodeTpm, bytes, tuple[int, ...]], Evidence]


def collect(tpm: NodeTpm, nonce: bytes, pcrs: tuple[int, ...]) -> Evidence:
    """The real collector: ask the node's TPM for a quote."""
    return tpm.quote(nonce, pcrs)


@dataclass(frozen=True)
class EnrolOutcome:
    """One node's enrolment: enrolled, or refused and why."""

    node: str
    enrolled: bool
    reason: str
    ek_sha256: str = ""


def _enrol_one(tpm: NodeTpm, bound: dict[str, str], ek_roots: Sequence[x509.Certificate],
               ek_crls: Sequence[EkCrl]) -> tuple[EnrolOutcome, Enrolment | None]:
    node = tpm.node
    try:
        ek_pub, ak_pub, name = tpm.keys()
        ek_fp = public_area_digest(ek_pub)
        ak = parse_public(ak_pub)
        # the EK in use decides which certificate: an RSA EK's from an RSA index, an ECC EK's from an ECC one
        ek_certs = tpm.ek_certificates(ek_kind(ek_pub)) if ek_roots else {}
    except (TpmUnreachable, MalformedTpmData) as exc:
        return EnrolOutcome(node, False, exc.message), None
    if ek_roots and (why := check_ek_certificates(ek_certs, ek_pub, ek_roots, crls=ek_crls)) is not None:
        return EnrolOutcome(node, False, f"EK certificate: {why}", ek_fp), None
    if bound.get(node, ek_fp) != ek_fp:
        return EnrolOutcome(node, False, f"name {node} is bound to another TPM (EK sha256 {bound[node][:16]}…); "
                            f"this TPM's EK is {ek_fp[:16]}… (CVE-2025-13609)", ek_fp), None
    other = [n for n, fp in bound.items() if fp == ek_fp and n != node]
    if other:
        return EnrolOutcome(node, False, f"this TPM is already enrolled as {other[0]}", ek_fp), None
    if ak.name != name:
        return EnrolOutcome(node, False, "the AK's name does not match its public area", ek_fp), None
    if not ak.restricted_signing:
        return EnrolOutcome(node, False, "the AK is not a restricted, fixed signing key", ek_fp), None
    secret = secrets.token_bytes(32)
    try:
        got = tpm.activate(make_credential(ek_pub, ak.name, secret))
    except TpmUnreachable as exc:
        return EnrolOutcome(node, False, f"credential activation failed: {exc.message}", ek_fp), None
    if not hmac.compare_digest(got, secret):
        return EnrolOutcome(node, False, "credential activation returned the wrong secret: the AK is not "
                            "in the EK's TPM", ek_fp), None
    entry = Enrolment(node=node, ek_sha256=ek_fp, ak_public=ak_pub.hex(), ak_name=ak.name.hex(),
                      enrolled=datetime.now(UTC))
    return EnrolOutcome(node, True, "EK and AK enrolled; credential activated", ek_fp), entry


def enrol(tpms: Sequence[NodeTpm], registry: Path, site: str, *,
          ek_roots: Sequence[x509.Certificate] = (), ek_crls: Sequence[EkCrl] = ()) -> list[EnrolOutcome]:
    """Enrol every node; a node already enrolled with the same EK gets a fresh AK, another EK is refused.
    With ``ek_roots`` (the policy's TPM manufacturer CAs) a node's EK must also carry a certificate that
    chains to one of them, unrevoked by ``ek_crls`` (when given); without, a name's first enrolment is
    trusted (trust-on-first-use)."""
    reg = read_registry(registry, site)
    bound = {n: e.ek_sha256 for n, e in reg.nodes.items()}
    out = []
    for tpm in tpms:
        outcome, entry = _enrol_one(tpm, bound, ek_roots, ek_crls)
        out.append(outcome)
        if entry is not None:
            reg = with_enrolment(reg, entry)
            bound[entry.node] = entry.ek_sha256
    write_registry(registry, reg)
    return out


def _quoted_digest(quote: bytes) -> bytes | None:
    """The PCR digest a quote claims (only to find the IMA entries it covers; check_quote verifies it)."""
    try:
        return parse_attest(quote).pcr_digest
    except MalformedTpmData:
        return None


def judge(enrolment: Enrolment, evidence: Evidence, nonce: bytes, policy: Attestation,
          addresses: tuple[str, ...] = ()) -> Decision:
    """The verdict on one quote: admitted only when the quote, the log and the allowlist all agree."""
    problems: list[str] = []
    try:
        measured = read_measurements(evidence.event_log, evidence.ima_list, policy, enrolment.node,
                                     _quoted_digest(evidence.quote))
        problems += measured.problems
        problems += judge_events(measured.log, policy)
        expected = pcr_digest(measured.pcrs, policy.pcrs)
    except MalformedTpmData as exc:
        problems.append(exc.message)
        expected = b""
    qc = check_quote(ak_public=bytes.fromhex(enrolment.ak_public), quote=evidence.quote,
                     signature=evidence.signature, nonce=nonce, pcrs=policy.pcrs, expected_digest=expected,
                     last=enrolment.last_clock)
    problems += qc.problems
    clock = (qc.attest.reset_count, qc.attest.restart_count, qc.attest.clock) if qc.attest else None
    return Decision(enrolment.node, not problems, tuple(problems), addresses, clock, evidence.quote,
                    evidence.signature, nonce)


def verify(tpms: Sequence[NodeTpm], policy: Attestation, registry: Path, site: str, *,
           addresses: dict[str, tuple[str, ...]], collector: Collector = collect) -> list[Decision]:
    """Quote every node with a fresh nonce and judge it; the registry keeps each TPM's last clock."""
    reg = read_registry(registry, site)
    out = []
    for tpm in tpms:
        addrs = addresses.get(tpm.node, ())
        entry = reg.nodes.get(tpm.node)
        if entry is None:
            out.append(Decision(tpm.node, False, ("not enrolled (run: ringfence attest enroll)",), addrs))
            continue
        nonce = secrets.token_bytes(32)  # fresh per quote: an old quote can never answer it
        try:
            evidence = collector(tpm, nonce, policy.pcrs)
        except TpmUnreachable as exc:
            out.append(Decision(tpm.node, False, (f"no quote: {exc.message}",), addrs))
            continue
        decision = judge(entry, evidence, nonce, policy, addrs)
        if decision.admitted and decision.clock is not None:
            reg = with_enrolment(reg, entry.model_copy(update={"last_clock": decision.clock}))
        out.append(decision)
    write_registry(registry, reg)
    return out


def require_policy(policy: Attestation | None, source: str) -> Attestation:
    """The policy's attestation section, or an error: without an allowlist nothing can be admitted."""
    if policy is None:
        raise AttestError(f"{source} has no attestation section (the measured-stack allowlist)",
                          hint="add `attestation:` to the policy (docs/fabric.md, Node attestation)")
    return policy


__all__ = ["Collector", "EnrolOutcome", "collect", "enrol", "judge", "require_policy", "verify"]
