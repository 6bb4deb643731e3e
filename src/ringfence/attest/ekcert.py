"""The EK certificate check at enrolment: the node's EK must be certified by a TPM manufacturer the policy trusts.

Without it, enrolment is trust-on-first-use: any TPM — a software one included — can claim a name the
first time. With ``attestation.ek_roots`` (PEM files of the manufacturers' CAs, roots and, where the
vendor uses them, intermediates) the node's EK certificate, read from the TPM's NV index for the RSA EK
certificate (``0x01c00002``, TCG EK Credential Profile), must

- be one certificate in DER (NV indexes are often padded after it: the DER length decides),
- certify exactly the EK public key the TPM showed (the modulus and exponent of its public area),
- chain, by signature and name, through listed certificates to a listed self-signed root, every issuer
  a CA (basicConstraints) and every certificate inside its validity at the time of the check.

A missing certificate, or any of those failing, refuses the enrolment (fail closed). The check is in
Python on ``cryptography``; the verifier needs no TPM for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from ringfence.attest.interface import AttestError, MalformedTpmData
from ringfence.attest.structures import parse_public

#: NV index of the RSA 2048 EK certificate (TCG EK Credential Profile, section 2.2.1.4)
EK_CERT_NV_RSA = "0x01c00002"
MAX_CHAIN = 6


def load_ek_roots(paths: Sequence[str], base: Path) -> tuple[x509.Certificate, ...]:
    """Every certificate of the PEM files ``paths`` (relative ones from ``base``, the policy's folder)."""
    out: list[x509.Certificate] = []
    for p in paths:
        path = Path(p) if Path(p).is_absolute() else base / p
        try:
            certs = x509.load_pem_x509_certificates(path.read_bytes())
        except OSError as exc:
            raise AttestError(f"attestation.ek_roots: {path}: {exc.strerror or exc}") from exc
        except ValueError as exc:
            raise AttestError(f"attestation.ek_roots: {path}: not PEM certificates ({exc})") from exc
        out += certs
    return tuple(out)


def _der_length(data: bytes) -> int:
    """The length of the DER SEQUENCE at the start of ``data`` (header included)."""
    if len(data) < 2 or data[0] != 0x30:
        raise MalformedTpmData("EK certificate: not a DER certificate (no SEQUENCE at byte 0)")
    first = data[1]
    if first < 0x80:
        return 2 + first
    n = first & 0x7F
    if not 1 <= n <= 3 or len(data) < 2 + n:
        raise MalformedTpmData(f"EK certificate: DER length of {n} bytes at byte 1")
    return 2 + n + int.from_bytes(data[2 : 2 + n], "big")


def parse_ek_certificate(data: bytes) -> x509.Certificate:
    """The EK certificate from an NV read (DER, possibly padded after its end)."""
    size = _der_length(data)
    if size > len(data):
        raise MalformedTpmData(f"EK certificate: DER says {size} bytes, the NV index held {len(data)}")
    try:
        return x509.load_der_x509_certificate(data[:size])
    except ValueError as exc:
        raise MalformedTpmData(f"EK certificate: not a certificate ({exc})") from exc


def _matches_ek(cert: x509.Certificate, ek_public: bytes) -> bool:
    ek = parse_public(ek_public)
    key = cert.public_key()
    if ek.kind == "rsa" and isinstance(key, rsa.RSAPublicKey):
        nums = key.public_numbers()
        return (nums.n, nums.e) == (ek.x, ek.y)
    if ek.kind == "ecc" and isinstance(key, ec.EllipticCurvePublicKey):
        pn = key.public_numbers()
        return (pn.x, pn.y) == (ek.x, ek.y) and key.curve.name == ek.curve
    return False


def _is_ca(cert: x509.Certificate) -> bool:
    try:
        return bool(cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca)
    except x509.ExtensionNotFound:
        return False


def _valid(cert: x509.Certificate, now: datetime) -> bool:
    return cert.not_valid_before_utc <= now <= cert.not_valid_after_utc


def _issued(child: x509.Certificate, parent: x509.Certificate) -> bool:
    try:
        child.verify_directly_issued_by(parent)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def check_ek_certificate(cert_der: bytes, ek_public: bytes, anchors: Sequence[x509.Certificate],
                         now: datetime | None = None) -> str | None:
    """Why the EK certificate is not acceptable, or None when it certifies this EK and chains to a root."""
    when = now or datetime.now(UTC)
    if not cert_der:
        return f"the TPM holds no EK certificate (NV {EK_CERT_NV_RSA}); the policy requires one (ek_roots)"
    try:
        cert = parse_ek_certificate(cert_der)
        matches = _matches_ek(cert, ek_public)
    except MalformedTpmData as exc:
        return exc.message
    if not matches:
        return "the EK certificate certifies another key than this TPM's EK"
    chain = [cert]
    for _ in range(MAX_CHAIN):
        tip = chain[-1]
        if not _valid(tip, when):
            return (f"{tip.subject.rfc4514_string() or 'the EK certificate'} is outside its validity "
                    f"({tip.not_valid_before_utc:%Y-%m-%d} to {tip.not_valid_after_utc:%Y-%m-%d})")
        if tip is not cert and tip.issuer == tip.subject and _issued(tip, tip):
            return None  # a listed, self-signed root
        parents = [a for a in anchors if a.subject == tip.issuer and a is not tip and _is_ca(a) and _issued(tip, a)]
        if not parents:
            return (f"the EK certificate does not chain to a listed TPM manufacturer root (no listed CA "
                    f"issued {tip.subject.rfc4514_string() or 'it'}; issuer {tip.issuer.rfc4514_string()})")
        chain.append(parents[0])
    return f"the EK certificate chain is longer than {MAX_CHAIN}"


__all__ = ["EK_CERT_NV_RSA", "check_ek_certificate", "load_ek_roots", "parse_ek_certificate"]
