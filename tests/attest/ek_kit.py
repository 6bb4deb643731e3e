"""A TPM manufacturer's PKI for EK tests, made here with cryptography: root, EK CA, EK certificates, CRLs."""

from __future__ import annotations

import dataclasses
import struct
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import NameOID

NOW = datetime(2026, 12, 1, tzinfo=UTC)
Key = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey
PublicKey = rsa.RSAPublicKey | ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey
_CURVE_IDS = {"secp256r1": (0x0003, 32), "secp384r1": (0x0004, 48)}

#: keyUsage of a CA (keyCertSign, cRLSign), an RSA EK (keyEncipherment) and an ECC EK (keyAgreement)
CA_USAGE = {"key_cert_sign": True, "crl_sign": True}
RSA_EK_USAGE = {"key_encipherment": True}
ECC_EK_USAGE = {"key_agreement": True}


def name(cn: str) -> x509.Name:
    """A name of one common name."""
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def usage(**bits: bool) -> x509.KeyUsage:
    """A keyUsage with ``bits`` set and every other bit clear."""
    fields = ("digital_signature", "content_commitment", "key_encipherment", "data_encipherment",
              "key_agreement", "key_cert_sign", "crl_sign", "encipher_only", "decipher_only")
    return x509.KeyUsage(**{f: bits.get(f, False) for f in fields})


def cert(subject: str, key: Key | PublicKey, issuer: str, signer: Key, *, ca: bool,
         days: tuple[int, int] = (-30, 3650), key_usage: dict[str, bool] | None = None,
         path_length: int | None = None, cdp: str | None = None, at: datetime = NOW) -> x509.Certificate:
    """A certificate of ``key`` for ``subject`` by ``signer`` (as ``issuer``), valid ``days`` around ``at``;
    keyUsage as given (None: none)."""
    pub = key.public_key() if isinstance(key, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey) else key
    b = (x509.CertificateBuilder().subject_name(name(subject)).issuer_name(name(issuer))
         .public_key(pub).serial_number(x509.random_serial_number())
         .not_valid_before(at + timedelta(days=days[0])).not_valid_after(at + timedelta(days=days[1]))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=path_length if ca else None), critical=True))
    if key_usage is not None:
        b = b.add_extension(usage(**key_usage), critical=True)
    if cdp is not None:
        b = b.add_extension(x509.CRLDistributionPoints([x509.DistributionPoint(
            [x509.UniformResourceIdentifier(cdp)], None, None, None)]), critical=False)
    return b.sign(signer, hashes.SHA256())


def der(c: x509.Certificate) -> bytes:
    """The certificate in DER, as an NV index holds it."""
    return c.public_bytes(serialization.Encoding.DER)


def ek_public_rsa(key: rsa.RSAPublicKey) -> bytes:
    """The TPM2B_PUBLIC of an RSA 2048 EK (template L-1: AES-128-CFB, no scheme, default exponent)."""
    n = key.public_numbers().n.to_bytes(256, "big")
    area = (struct.pack(">HHI", 0x0001, 0x000B, 0x000300B2) + struct.pack(">H", 32) + bytes(32)
            + struct.pack(">HHH", 0x0006, 128, 0x0043) + struct.pack(">H", 0x0010)
            + struct.pack(">HI", 2048, 0) + struct.pack(">H", len(n)) + n)
    return struct.pack(">H", len(area)) + area


def ek_public_ecc(key: ec.EllipticCurvePublicKey, name_alg: int = 0x000B) -> bytes:
    """The TPM2B_PUBLIC of an ECC EK (template L-2 for P-256: AES-128-CFB, no scheme, no KDF)."""
    curve, size = _CURVE_IDS[key.curve.name]
    nums = key.public_numbers()
    area = (struct.pack(">HHI", 0x0023, name_alg, 0x000300B2) + struct.pack(">H", 32) + bytes(32)
            + struct.pack(">HHH", 0x0006, 128, 0x0043) + struct.pack(">H", 0x0010)
            + struct.pack(">HH", curve, 0x0010)
            + struct.pack(">H", size) + nums.x.to_bytes(size, "big") + struct.pack(">H", size)
            + nums.y.to_bytes(size, "big"))
    return struct.pack(">H", len(area)) + area


@dataclass(frozen=True)
class Pki:
    """A vendor root, its EK CA, and an RSA and an ECC EK certified by that CA."""

    root_key: ec.EllipticCurvePrivateKey
    mid_key: ec.EllipticCurvePrivateKey
    root: x509.Certificate
    mid: x509.Certificate
    rsa_key: rsa.RSAPrivateKey
    rsa_ek: x509.Certificate
    ecc_key: ec.EllipticCurvePrivateKey
    ecc_ek: x509.Certificate
    at: datetime = NOW

    @property
    def anchors(self) -> list[x509.Certificate]:
        """What ``ek_roots`` lists: the root and the EK CA."""
        return [self.root, self.mid]

    def ek_cert(self, key: Key | PublicKey, *, days: tuple[int, int] = (-30, 3650),
                key_usage: dict[str, bool] | None = None) -> x509.Certificate:
        """An EK certificate of ``key`` by the EK CA (keyUsage by the key's type unless given)."""
        if key_usage is None:
            key_usage = RSA_EK_USAGE if isinstance(key, rsa.RSAPrivateKey | rsa.RSAPublicKey) else ECC_EK_USAGE
        return cert("TPM EK", key, "TPM Vendor EK CA 1", self.mid_key, ca=False, days=days, key_usage=key_usage,
                    cdp="http://crl.tpm-vendor.example/ekca1.crl", at=self.at)

    def rsa_ek_public(self) -> bytes:
        """The RSA EK's TPM2B_PUBLIC."""
        return ek_public_rsa(self.rsa_key.public_key())

    def ecc_ek_public(self) -> bytes:
        """The ECC EK's TPM2B_PUBLIC."""
        return ek_public_ecc(self.ecc_key.public_key())


def make_pki(at: datetime = NOW) -> Pki:
    """A fresh vendor PKI valid around ``at`` (ECDSA P-384 CAs, an RSA 2048 and an ECC P-256 EK)."""
    root_key, mid_key = ec.generate_private_key(ec.SECP384R1()), ec.generate_private_key(ec.SECP384R1())
    root = cert("TPM Vendor Root", root_key, "TPM Vendor Root", root_key, ca=True, key_usage=CA_USAGE, at=at)
    mid = cert("TPM Vendor EK CA 1", mid_key, "TPM Vendor Root", root_key, ca=True, key_usage=CA_USAGE,
               cdp="http://crl.tpm-vendor.example/root.crl", at=at)
    rsa_key, ecc_key = rsa.generate_private_key(65537, 2048), ec.generate_private_key(ec.SECP256R1())
    pki = Pki(root_key, mid_key, root, mid, rsa_key, root, ecc_key, root, at)
    return dataclasses.replace(pki, rsa_ek=pki.ek_cert(rsa_key), ecc_ek=pki.ek_cert(ecc_key))


def crl(issuer: str, signer: Key, *, revoked: tuple[int, ...] = (), days: tuple[int, int] = (-1, 30),
        extensions: tuple[tuple[x509.ExtensionType, bool], ...] = (), at: datetime = NOW
        ) -> x509.CertificateRevocationList:
    """A CRL of ``issuer`` signed by ``signer``: thisUpdate/nextUpdate ``days`` from ``at``, ``revoked`` serials."""
    b = (x509.CertificateRevocationListBuilder().issuer_name(name(issuer))
         .last_update(at + timedelta(days=days[0])).next_update(at + timedelta(days=days[1]))
         .add_extension(x509.CRLNumber(7), critical=False))
    for serial in revoked:
        b = b.add_revoked_certificate(
            x509.RevokedCertificateBuilder().serial_number(serial).revocation_date(at - timedelta(days=3))
            .add_extension(x509.CRLReason(x509.ReasonFlags.key_compromise), critical=False).build())
    for ext, critical in extensions:
        b = b.add_extension(ext, critical=critical)
    return b.sign(signer, hashes.SHA256())
