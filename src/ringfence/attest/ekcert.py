"""The EK certificate check at enrolment: the node's EK must be certified by a TPM manufacturer the policy trusts.

Without it, enrolment is trust-on-first-use: any TPM — a software one included — can claim a name the
first time. With ``attestation.ek_roots`` (PEM files of the manufacturers' CAs, roots and, where the
vendor uses them, intermediates) the node's EK certificate must

- be read from an NV index the TCG EK Credential Profile (v2.4+, section 2.2.1.4 low range, 2.2.1.5 high
  range) defines for the EK's own algorithm: an RSA EK from an RSA index (``0x01c00002``, RSA 2048,
  template L-1; high range ``0x01c00012`` H-1, ``0x01c0001c`` RSA 3072 H-6, ``0x01c0001e`` RSA 4096
  H-7), an ECC EK from an ECC index (``0x01c0000a``, NIST P-256, template L-2; high range ``0x01c00014``
  P-256 H-2, ``0x01c00016`` P-384 H-3, ``0x01c00018`` P-521 H-4). Observed: swtpm 0.7.1
  (``swtpm_setup --create-ek-cert``) stores its RSA 3072 EK's certificate at ``0x01c00002`` and its
  P-384 EK's at ``0x01c00016``; the binding is the key, so the index only says where to look;
- be one certificate in DER (NV indexes are often padded after it: the DER length decides),
- certify exactly the EK public key the TPM showed (modulus and exponent; curve and point), with an RSA
  key of at least 2048 bits or a NIST P-256/P-384/P-521 key — any other algorithm is refused by name;
- be an end-entity certificate (not a CA) whose keyUsage (required) allows what the profile says the EK
  does: keyEncipherment for an RSA EK, keyAgreement for an ECC EK (section 3.2, Key Usage);
- chain, by signature and name, through listed certificates to a listed self-signed root, every issuer
  a CA (basicConstraints, its pathLenConstraint kept, keyUsage allowing keyCertSign when present) and
  every certificate inside its validity at the time of the check;
- with ``attestation.ek_crls``, be unrevoked, and so every CA below the root (``ringfence.attest.ekcrl``).

A missing certificate, or any of those failing, refuses the enrolment (fail closed). The check is in
Python on ``cryptography``; the verifier needs no TPM for it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from ringfence.attest._x509 import extension
from ringfence.attest.ekcrl import EkCrl, revocation_problem
from ringfence.attest.interface import AttestError, MalformedTpmData
from ringfence.attest.structures import EK_NAME_ALGS, PublicKey, parse_public

#: NV index of the RSA 2048 EK certificate (TCG EK Credential Profile, section 2.2.1.4, low range)
EK_CERT_NV_RSA = "0x01c00002"
#: NV index of the ECC NIST P-256 EK certificate (TCG EK Credential Profile, section 2.2.1.4, low range)
EK_CERT_NV_ECC = "0x01c0000a"
#: Where an EK's certificate may be, by the EK's algorithm (low range first, then the high range, 2.2.1.5)
EK_CERT_INDICES: Mapping[str, tuple[str, ...]] = {
    "rsa": (EK_CERT_NV_RSA, "0x01c00012", "0x01c0001c", "0x01c0001e"),
    "ecc": (EK_CERT_NV_ECC, "0x01c00014", "0x01c00016", "0x01c00018"),
}
MAX_CHAIN = 6
_CURVES = {"secp256r1", "secp384r1", "secp521r1"}
_OTHER_KEY = "the EK certificate certifies another key than this TPM's EK"


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


def ek_kind(ek_public: bytes) -> str:
    """``rsa`` or ``ecc``: the EK's algorithm, which decides where its certificate is (EK_CERT_INDICES)."""
    return parse_public(ek_public, EK_NAME_ALGS).kind


def _key_problem(cert: x509.Certificate, ek: PublicKey) -> str | None:
    """Why ``cert`` does not certify the EK ``ek``, or None when its key is exactly the EK's."""
    try:
        key = cert.public_key()
    except (ValueError, UnsupportedAlgorithm) as exc:
        return f"the EK certificate's public key cannot be read ({exc})"
    if isinstance(key, rsa.RSAPublicKey):
        if ek.kind != "rsa":
            return f"the EK certificate certifies an RSA key; this TPM's EK is {ek.kind.upper()}"
        if key.key_size < 2048:
            return f"the EK certificate's RSA key has {key.key_size} bits (the profile's EKs have 2048 or more)"
        nums = key.public_numbers()
        return None if (nums.n, nums.e) == (ek.x, ek.y) else _OTHER_KEY
    if isinstance(key, ec.EllipticCurvePublicKey):
        if ek.kind != "ecc":
            return f"the EK certificate certifies an ECC key; this TPM's EK is {ek.kind.upper()}"
        if key.curve.name not in _CURVES:
            return f"the EK certificate's curve {key.curve.name} is not one of the profile's (NIST P-256/384/521)"
        pn = key.public_numbers()
        same = (pn.x, pn.y) == (ek.x, ek.y) and key.curve.name == ek.curve
        return None if same else _OTHER_KEY
    return f"the EK certificate's key is {type(key).__name__}: not an RSA or ECC EK (TCG EK Credential Profile)"


def _usage_problem(cert: x509.Certificate, kind: str) -> str | None:
    """The profile's keyUsage of an EK certificate: keyEncipherment (RSA) or keyAgreement (ECC); no CA."""
    bc = extension(cert, x509.BasicConstraints)
    if bc is not None and bc.ca:
        return "the EK certificate is a CA certificate (basicConstraints CA), not an EK's"
    usage = extension(cert, x509.KeyUsage)
    if usage is None:
        return "the EK certificate has no keyUsage (the profile requires keyEncipherment or keyAgreement)"
    if kind == "rsa" and not usage.key_encipherment:
        return "the RSA EK certificate's keyUsage lacks keyEncipherment (TCG EK Credential Profile)"
    if kind == "ecc" and not usage.key_agreement:
        return "the ECC EK certificate's keyUsage lacks keyAgreement (TCG EK Credential Profile)"
    return None


def _ca_path_length(cert: x509.Certificate) -> tuple[bool, int | None]:
    """(is a CA, its pathLenConstraint) from basicConstraints; a keyUsage without keyCertSign is no CA."""
    bc = extension(cert, x509.BasicConstraints)
    usage = extension(cert, x509.KeyUsage)
    if bc is None or (usage is not None and not usage.key_cert_sign):
        return False, None
    return bool(bc.ca), bc.path_length


def _valid(cert: x509.Certificate, now: datetime) -> bool:
    return cert.not_valid_before_utc <= now <= cert.not_valid_after_utc


def _issued(child: x509.Certificate, parent: x509.Certificate) -> bool:
    try:
        child.verify_directly_issued_by(parent)
    except (ValueError, TypeError, InvalidSignature, UnsupportedAlgorithm):
        return False
    return True


def _parent(tip: x509.Certificate, below: int, anchors: Sequence[x509.Certificate]) -> x509.Certificate | None:
    """A listed CA that signed ``tip`` and whose pathLenConstraint allows the ``below`` CAs under it."""
    for a in anchors:
        if a is tip or a.subject != tip.issuer:
            continue
        ca, path_len = _ca_path_length(a)
        if ca and (path_len is None or below <= path_len) and _issued(tip, a):
            return a
    return None


def _chain_problem(cert: x509.Certificate, anchors: Sequence[x509.Certificate], crls: Sequence[EkCrl],
                   when: datetime) -> str | None:
    chain = [cert]
    for _ in range(MAX_CHAIN):
        tip = chain[-1]
        if not _valid(tip, when):
            return (f"{tip.subject.rfc4514_string() or 'the EK certificate'} is outside its validity "
                    f"({tip.not_valid_before_utc:%Y-%m-%d} to {tip.not_valid_after_utc:%Y-%m-%d})")
        if tip is not cert and tip.issuer == tip.subject and _issued(tip, tip):
            return None  # a listed, self-signed root
        parent = _parent(tip, len(chain) - 1, anchors)  # CAs between the parent and the EK certificate
        if parent is None:
            return (f"the EK certificate does not chain to a listed TPM manufacturer root (no listed CA "
                    f"issued {tip.subject.rfc4514_string() or 'it'}; issuer {tip.issuer.rfc4514_string()})")
        if (why := revocation_problem(tip, parent, tip is not cert, crls, when)) is not None:
            return why
        chain.append(parent)
    return f"the EK certificate chain is longer than {MAX_CHAIN}"


def check_ek_certificate(cert_der: bytes, ek_public: bytes, anchors: Sequence[x509.Certificate],
                         now: datetime | None = None, crls: Sequence[EkCrl] = ()) -> str | None:
    """Why the EK certificate is not acceptable, or None when it certifies this EK and chains to a root
    (and, with ``crls``, neither it nor a CA of its chain is revoked)."""
    when = now or datetime.now(UTC)
    try:
        ek = parse_public(ek_public, EK_NAME_ALGS)
    except MalformedTpmData as exc:
        return f"the TPM's EK: {exc.message}"
    if not cert_der:
        return (f"the TPM holds no EK certificate for its {ek.kind.upper()} EK (NV "
                f"{', '.join(EK_CERT_INDICES[ek.kind])}); the policy requires one (ek_roots)")
    try:
        cert = parse_ek_certificate(cert_der)
    except MalformedTpmData as exc:
        return exc.message
    why = _key_problem(cert, ek) or _usage_problem(cert, ek.kind)
    return why if why is not None else _chain_problem(cert, anchors, crls, when)


def check_ek_certificates(found: Mapping[str, bytes], ek_public: bytes, anchors: Sequence[x509.Certificate],
                          now: datetime | None = None, crls: Sequence[EkCrl] = ()) -> str | None:
    """:func:`check_ek_certificate` on what the TPM holds at its EK kind's indices (``found``: index →
    bytes, empty for none): the certificate of this EK's key decides; None when it is acceptable."""
    present = {i: d for i, d in found.items() if d}
    if not present:
        return check_ek_certificate(b"", ek_public, anchors, now, crls)
    try:
        ek = parse_public(ek_public, EK_NAME_ALGS)
    except MalformedTpmData as exc:
        return f"the TPM's EK: {exc.message}"
    others = []
    for index, der in present.items():
        try:
            why = _key_problem(parse_ek_certificate(der), ek)
        except MalformedTpmData as exc:
            why = exc.message
        if why is not None:
            others.append(f"NV {index}: {why}")
            continue
        why = check_ek_certificate(der, ek_public, anchors, now, crls)  # this EK's own certificate decides
        return None if why is None else f"{why} (NV {index})"
    return "; ".join(others)


__all__ = ["EK_CERT_INDICES", "EK_CERT_NV_ECC", "EK_CERT_NV_RSA", "check_ek_certificate", "check_ek_certificates",
           "ek_kind", "load_ek_roots", "parse_ek_certificate"]
