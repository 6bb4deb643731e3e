"""The quote check, in Python on ``cryptography``: the verifier needs no TPM.

:func:`check_quote` returns every reason a quote must be refused; an empty list is the only pass.
It checks, in this order and without stopping at the first failure: the structure parses; the
signature verifies under the *enrolled* AK (never a key the node sends now); the AK is a restricted
signing key; ``extraData`` equals the fresh nonce; the quoted PCR selection is exactly the policy's;
the PCR digest equals the replay of the event log; and the TPM's reset/restart counters and clock
never go back from the last quote accepted (a replayed old quote, or a TPM whose state was rolled
back). ``cryptography``'s InvalidSignature and our parse errors are translated here, in one place.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

from ringfence.attest.interface import MalformedTpmData
from ringfence.attest.structures import ALG_ECDSA as _ECDSA
from ringfence.attest.structures import ALG_RSAPSS as _PSS
from ringfence.attest.structures import (
    ALG_SHA256,
    Attest,
    PublicKey,
    parse_attest,
    parse_public,
    parse_signature,
)

_CURVES: dict[str, ec.EllipticCurve] = {"secp256r1": ec.SECP256R1(), "secp384r1": ec.SECP384R1(),
                                        "secp521r1": ec.SECP521R1()}


@dataclass(frozen=True)
class QuoteCheck:
    """The outcome: refusal reasons (empty: verified) and the parsed quote, when it parsed."""

    problems: tuple[str, ...]
    attest: Attest | None

    @property
    def ok(self) -> bool:
        """Verified: no reason to refuse."""
        return not self.problems


def _signature_ok(key: PublicKey, message: bytes, signature: bytes) -> str | None:
    """None when ``signature`` over ``message`` verifies under ``key``; else why not."""
    sig = parse_signature(signature)
    if sig.hash_alg != ALG_SHA256:
        return f"signature hash 0x{sig.hash_alg:04x} is not sha256"
    try:
        if key.kind == "ecc":
            if sig.scheme != _ECDSA:
                return "an ECC AK must sign with ECDSA"
            curve = _CURVES[key.curve or ""]
            pub = ec.EllipticCurvePublicNumbers(key.x, key.y, curve).public_key()
            pub.verify(encode_dss_signature(sig.r, sig.s), message, ec.ECDSA(hashes.SHA256()))
        else:
            rpub = rsa.RSAPublicNumbers(key.y, key.x).public_key()
            pad: padding.AsymmetricPadding = (
                padding.PSS(padding.MGF1(hashes.SHA256()), padding.PSS.AUTO) if sig.scheme == _PSS
                else padding.PKCS1v15())
            rpub.verify(sig.rsa, message, pad, hashes.SHA256())
    except InvalidSignature:
        return "the signature does not verify under the enrolled AK"
    except (ValueError, UnsupportedAlgorithm) as exc:  # a point off the curve, a bad modulus
        return f"the enrolled AK cannot verify anything: {exc}"
    return None


def check_quote(
    *,
    ak_public: bytes,
    quote: bytes,
    signature: bytes,
    nonce: bytes,
    pcrs: tuple[int, ...],
    expected_digest: bytes,
    last: tuple[int, int, int] | None,
) -> QuoteCheck:
    """Every reason to refuse ``quote`` (see the module docstring); ``last`` is (reset, restart, clock)
    of the last accepted quote of this TPM, None before the first."""
    problems: list[str] = []
    try:
        key = parse_public(ak_public)
    except MalformedTpmData as exc:
        return QuoteCheck((f"enrolled AK unreadable: {exc.message}",), None)
    if not key.restricted_signing:
        problems.append("the enrolled AK is not a restricted signing key of this TPM")
    try:
        why = _signature_ok(key, quote, signature)
    except MalformedTpmData as exc:
        why = f"signature unreadable: {exc.message}"
    if why:
        problems.append(why)
    try:
        att = parse_attest(quote)
    except MalformedTpmData as exc:
        return QuoteCheck((*problems, f"quote unreadable: {exc.message}"), None)
    if not hmac.compare_digest(att.extra_data, nonce):
        problems.append("the quote's nonce is not the one just sent (a replayed or foreign quote)")
    if att.selection != ((ALG_SHA256, tuple(sorted(pcrs))),):
        problems.append(f"the quote covers {_selection(att)}, not exactly the policy's sha256 PCRs {sorted(pcrs)}")
    elif not hmac.compare_digest(att.pcr_digest, expected_digest):
        problems.append("the quoted PCR digest differs from the event log's replay (a measurement not in the log)")
    if last is not None:
        reset, restart, clock = last
        if att.reset_count < reset:
            problems.append(f"TPM reset count went back ({att.reset_count} < {reset})")
        elif att.reset_count == reset and (att.restart_count < restart or att.clock <= clock):
            problems.append(f"TPM clock went back or stood still ({att.clock} ≤ {clock} ms since reset {reset}):"
                            " an old quote")
        # clockInfo.safe is not judged: it is clear after any unorderly start until the TPM next writes
        # its clock to NV (tens of minutes), while within one reset cycle the clock only moves forward in
        # the TPM's RAM — the comparison above holds either way, and the fresh nonce is the replay guard.
    return QuoteCheck(tuple(problems), att)


def _selection(att: Attest) -> str:
    return "; ".join(f"bank 0x{alg:04x} PCRs {list(idx)}" for alg, idx in att.selection) or "no PCR"


def ak_name(ak_public: bytes) -> bytes:
    """The TPM name of an AK public area (what credential activation binds)."""
    return parse_public(ak_public).name


def sha256_hex(data: bytes) -> str:
    """Hex sha256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


__all__ = ["QuoteCheck", "ak_name", "check_quote", "sha256_hex"]
