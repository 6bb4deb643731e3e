"""Parsers of the three TPM 2.0 structures the verifier reads (TPM 2.0 Library, Part 2), in plain Python.

``TPM2B_PUBLIC`` of the attestation key, ``TPMS_ATTEST`` of a quote and ``TPMT_SIGNATURE``. Every
length is checked against the bytes left, so a truncated or hostile structure is a
:class:`MalformedTpmData`, never an IndexError; trailing bytes are refused too (a quote with a tail
is not the structure the TPM signed).
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

from ringfence.attest.interface import MalformedTpmData

TPM_GENERATED = 0xFF544347
ST_ATTEST_QUOTE = 0x8018
ALG_RSA, ALG_ECC, ALG_NULL, ALG_SHA256, ALG_SHA384, ALG_SHA512 = 0x0001, 0x0023, 0x0010, 0x000B, 0x000C, 0x000D
#: the name algorithms of the TCG EK templates: sha256 (L-1, L-2, H-1, H-2), sha384 (H-3, H-6), sha512 (H-4, H-7)
EK_NAME_ALGS = frozenset({ALG_SHA256, ALG_SHA384, ALG_SHA512})
_NAME_HASH = {ALG_SHA256: "sha256", ALG_SHA384: "sha384", ALG_SHA512: "sha512"}
ALG_RSASSA, ALG_RSAPSS, ALG_ECDSA = 0x0014, 0x0016, 0x0018
CURVES = {0x0003: "secp256r1", 0x0004: "secp384r1", 0x0005: "secp521r1"}
# TPMA_OBJECT bits a quoting key must have: fixedTPM, fixedParent, sensitiveDataOrigin, restricted, sign.
FIXED_TPM, FIXED_PARENT, SENSITIVE_ORIGIN, RESTRICTED, SIGN = 1 << 1, 1 << 4, 1 << 5, 1 << 16, 1 << 18
AK_ATTRIBUTES = FIXED_TPM | FIXED_PARENT | SENSITIVE_ORIGIN | RESTRICTED | SIGN


class _Reader:
    def __init__(self, data: bytes, what: str) -> None:
        self.data, self.pos, self.what = data, 0, what

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise MalformedTpmData(f"{self.what}: truncated at byte {self.pos} (needed {n} more)")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def u8(self) -> int:
        return int(self.take(1)[0])

    def u16(self) -> int:
        return int(struct.unpack(">H", self.take(2))[0])

    def u32(self) -> int:
        return int(struct.unpack(">I", self.take(4))[0])

    def u64(self) -> int:
        return int(struct.unpack(">Q", self.take(8))[0])

    def tpm2b(self) -> bytes:
        return self.take(self.u16())

    def end(self) -> None:
        if self.pos != len(self.data):
            raise MalformedTpmData(f"{self.what}: {len(self.data) - self.pos} unexpected trailing bytes")


@dataclass(frozen=True)
class PublicKey:
    """An AK's public area: its TPM name (nameAlg ‖ H(TPMT_PUBLIC)), attributes and key numbers."""

    name: bytes
    attributes: int
    kind: str  # "ecc" or "rsa"
    curve: str | None  # for ecc
    x: int  # ecc x, or the rsa modulus
    y: int  # ecc y, or the rsa exponent

    @property
    def restricted_signing(self) -> bool:
        """fixedTPM, fixedParent, sensitiveDataOrigin, restricted and sign all set (what an AK must be)."""
        return self.attributes & AK_ATTRIBUTES == AK_ATTRIBUTES


def parse_public(tpm2b_public: bytes, name_algs: frozenset[int] = frozenset({ALG_SHA256})) -> PublicKey:
    """A ``TPM2B_PUBLIC`` (what ``tpm2_createak -u`` writes) of an ECC or RSA key.

    ``name_algs``: the name algorithms accepted: sha256 only for an AK (its name is what the credential
    binds and the quote names); :data:`EK_NAME_ALGS` for an EK, whose high-range templates use more.
    """
    outer = _Reader(tpm2b_public, "TPM2B_PUBLIC")
    area = outer.tpm2b()
    outer.end()
    r = _Reader(area, "TPMT_PUBLIC")
    kind, name_alg, attributes = r.u16(), r.u16(), r.u32()
    if name_alg not in name_algs:
        accepted = ", ".join(_NAME_HASH[a] for a in sorted(name_algs))
        raise MalformedTpmData(f"TPMT_PUBLIC: name algorithm 0x{name_alg:04x} (only {accepted} accepted)")
    r.tpm2b()  # authPolicy
    sym = r.u16()
    if sym != ALG_NULL:
        r.take(4)  # keyBits, mode: a restricted signing key has none, a decrypting parent does
    scheme = r.u16()
    if scheme != ALG_NULL:
        r.u16()
    if kind == ALG_ECC:
        curve_id = r.u16()
        if r.u16() != ALG_NULL:  # kdf
            r.u16()
        x, y = int.from_bytes(r.tpm2b(), "big"), int.from_bytes(r.tpm2b(), "big")
        curve = CURVES.get(curve_id)
        if curve is None:
            raise MalformedTpmData(f"TPMT_PUBLIC: unsupported ECC curve 0x{curve_id:04x}")
        r.end()
        return PublicKey(_name(area, name_alg), attributes, "ecc", curve, x, y)
    if kind == ALG_RSA:
        r.u16()  # keyBits
        exponent = r.u32() or 65537  # 0 means the default exponent
        modulus = int.from_bytes(r.tpm2b(), "big")
        r.end()
        return PublicKey(_name(area, name_alg), attributes, "rsa", None, modulus, exponent)
    raise MalformedTpmData(f"TPMT_PUBLIC: unsupported key type 0x{kind:04x}")


def _name(area: bytes, name_alg: int) -> bytes:
    return struct.pack(">H", name_alg) + hashlib.new(_NAME_HASH[name_alg], area).digest()


def public_area_digest(tpm2b_public: bytes) -> str:
    """sha256 (hex) of a public area: the fingerprint an EK is known by."""
    r = _Reader(tpm2b_public, "TPM2B_PUBLIC")
    area = r.tpm2b()
    r.end()
    return hashlib.sha256(area).hexdigest()


@dataclass(frozen=True)
class Attest:
    """The fields of a quote's ``TPMS_ATTEST`` the verifier judges."""

    signer: bytes  # qualifiedSigner
    extra_data: bytes  # the nonce, as the TPM saw it
    clock: int
    reset_count: int
    restart_count: int
    safe: bool
    firmware: int
    selection: tuple[tuple[int, tuple[int, ...]], ...]  # (hash alg, PCR indexes) per bank, in order
    pcr_digest: bytes


def parse_attest(data: bytes) -> Attest:
    """A quote's ``TPMS_ATTEST`` (``tpm2_quote -m``); anything but a TPM-generated quote is refused."""
    r = _Reader(data, "TPMS_ATTEST")
    if r.u32() != TPM_GENERATED:
        raise MalformedTpmData("TPMS_ATTEST: magic is not TPM_GENERATED_VALUE (not produced by a TPM)")
    if (kind := r.u16()) != ST_ATTEST_QUOTE:
        raise MalformedTpmData(f"TPMS_ATTEST: type 0x{kind:04x} is not a quote")
    signer, extra = r.tpm2b(), r.tpm2b()
    clock, reset, restart, safe, firmware = r.u64(), r.u32(), r.u32(), r.u8(), r.u64()
    banks = []
    for _ in range(r.u32()):
        alg, size = r.u16(), r.u8()
        bits = r.take(size)
        banks.append((alg, tuple(i for i in range(size * 8) if bits[i // 8] >> (i % 8) & 1)))
    digest = r.tpm2b()
    r.end()
    return Attest(signer, extra, clock, reset, restart, bool(safe), firmware, tuple(banks), digest)


@dataclass(frozen=True)
class Signature:
    """A ``TPMT_SIGNATURE``: the scheme, its hash, and the signature numbers (r, s) or bytes (RSA)."""

    scheme: int
    hash_alg: int
    r: int = 0
    s: int = 0
    rsa: bytes = b""


def parse_signature(data: bytes) -> Signature:
    """A ``TPMT_SIGNATURE`` (``tpm2_quote -s``, the default tss format)."""
    rd = _Reader(data, "TPMT_SIGNATURE")
    scheme, hash_alg = rd.u16(), rd.u16()
    if scheme == ALG_ECDSA:
        r, s = int.from_bytes(rd.tpm2b(), "big"), int.from_bytes(rd.tpm2b(), "big")
        rd.end()
        return Signature(scheme, hash_alg, r=r, s=s)
    if scheme in (ALG_RSASSA, ALG_RSAPSS):
        sig = rd.tpm2b()
        rd.end()
        return Signature(scheme, hash_alg, rsa=sig)
    raise MalformedTpmData(f"TPMT_SIGNATURE: unsupported scheme 0x{scheme:04x}")


__all__ = [
    "ALG_SHA256",
    "EK_NAME_ALGS",
    "Attest",
    "PublicKey",
    "Signature",
    "parse_attest",
    "parse_public",
    "parse_signature",
    "public_area_digest",
]
