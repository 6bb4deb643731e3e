"""Workload PKI: a cluster CA and short-lived X.509 workload certificates with SPIFFE-style identities.

Layout of a PKI directory (``ringfence pki init DIR``)::

    DIR/ca/ca.pem          the CA certificate (public; copied next to every issued cert)
    DIR/ca/ca.key          the CA private key, mode 0600
    DIR/ca/revoked.txt     fingerprints (``sha256:<hex>``) of revoked certificates, one a line
    DIR/nodes/<name>/      one directory per node or workload: cert.pem, key.pem (0600), ca.pem

Identities are URIs in the certificate's subjectAltName: ``spiffe://<cluster>/job/<job>/rank/<n>``,
``spiffe://<cluster>/node/<name>`` or ``spiffe://<cluster>/user/<name>``. A private key is written
once, into its own directory, and never copied anywhere else; only fingerprints (sha256 of the DER
certificate) leave through :class:`CertInfo` for the evidence store.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ringfence.atomic import write_atomic
from ringfence.errors import InputError, RingfenceError

#: Key algorithms the CA and workloads may use.
ALGORITHMS = ("ec-p256", "ed25519")

PrivateKey = ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey

_DURATION = re.compile(r"^\s*(\d+)\s*([smhdw])\s*$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
_NAME = r"[a-z0-9]([a-z0-9._-]{0,62}[a-z0-9])?"
_IDENTITY = re.compile(
    rf"^spiffe://(?P<cluster>{_NAME})/(?:job/(?P<job>{_NAME})/rank/(?P<rank>0|[1-9][0-9]{{0,6}})"
    rf"|node/(?P<node>{_NAME})|user/(?P<user>{_NAME}))$"
)
# Clock skew between nodes: a certificate issued "now" on one node must verify on another at once.
_BACKDATE = timedelta(minutes=5)


class PkiError(RingfenceError):
    """A PKI operation failed (missing CA, unreadable file, unusable key)."""


class CertificateRejected(PkiError):
    """A certificate failed verification: expired, not yet valid, revoked, foreign CA, wrong identity."""


def parse_duration(text: str, *, where: str = "duration") -> timedelta:
    """Parse ``"24h"``, ``"30m"``, ``"7d"``, ``"90s"``, ``"2w"`` into a positive timedelta."""
    m = _DURATION.match(text)
    if not m or int(m.group(1)) == 0:
        raise InputError(where, f"{text!r} is not a duration like 30m, 24h or 7d")
    return timedelta(**{_UNITS[m.group(2)]: int(m.group(1))})


@dataclass(frozen=True)
class Identity:
    """A parsed workload identity URI."""

    uri: str
    cluster: str
    kind: str  # "job-rank" | "node" | "user"
    name: str  # job name, node name or user name
    rank: int | None = None

    @property
    def directory_name(self) -> str:
        """The default per-node/workload directory name for this identity."""
        if self.kind == "job-rank":
            return f"job-{self.name}-rank-{self.rank}"
        return f"{self.kind}-{self.name}"


def parse_identity(uri: str) -> Identity:
    """Parse a SPIFFE-style identity URI; :class:`InputError` when it is not one ringfence issues."""
    m = _IDENTITY.match(uri)
    if not m:
        raise InputError(
            "identity",
            f"{uri!r} is not spiffe://<cluster>/job/<job>/rank/<n>, spiffe://<cluster>/node/<name> "
            "or spiffe://<cluster>/user/<name>",
        )
    if m.group("job"):
        return Identity(uri, m.group("cluster"), "job-rank", m.group("job"), int(m.group("rank")))
    if m.group("node"):
        return Identity(uri, m.group("cluster"), "node", m.group("node"))
    return Identity(uri, m.group("cluster"), "user", m.group("user"))


def job_rank_identity(cluster: str, job: str, rank: int) -> str:
    """``spiffe://<cluster>/job/<job>/rank/<rank>``."""
    return parse_identity(f"spiffe://{cluster}/job/{job}/rank/{rank}").uri


@dataclass(frozen=True)
class CertInfo:
    """Public facts about a certificate — what the evidence store may keep (never key material)."""

    subject: str
    identity: str | None  # the URI SAN, if any
    fingerprint: str  # "sha256:<hex of DER>"
    serial: int
    not_before: datetime
    not_after: datetime
    issuer: str
    is_ca: bool
    key_algorithm: str

    def as_dict(self) -> dict[str, object]:
        """JSON-ready form."""
        return {
            "subject": self.subject,
            "identity": self.identity,
            "fingerprint": self.fingerprint,
            "serial": f"{self.serial:x}",
            "not_before": self.not_before.isoformat(),
            "not_after": self.not_after.isoformat(),
            "issuer": self.issuer,
            "is_ca": self.is_ca,
            "key_algorithm": self.key_algorithm,
        }


@dataclass(frozen=True)
class IssuedCert:
    """Where an issued certificate and its key live, and its public facts."""

    directory: Path
    cert_path: Path
    key_path: Path
    ca_path: Path
    info: CertInfo


def fingerprint(cert: x509.Certificate) -> str:
    """``sha256:<hex>`` of the DER encoding."""
    return "sha256:" + cert.fingerprint(hashes.SHA256()).hex()


def _key_algorithm(key: object) -> str:
    if isinstance(key, ec.EllipticCurvePublicKey | ec.EllipticCurvePrivateKey):
        return "ec-p256" if key.curve.name == "secp256r1" else f"ec-{key.curve.name}"
    if isinstance(key, ed25519.Ed25519PublicKey | ed25519.Ed25519PrivateKey):
        return "ed25519"
    return type(key).__name__


def cert_identity(cert: x509.Certificate) -> str | None:
    """The first ``spiffe://`` URI SAN of ``cert``, or None."""
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return None
    uris = [u for u in san.get_values_for_type(x509.UniformResourceIdentifier) if u.startswith("spiffe://")]
    return uris[0] if uris else None


def cert_info(cert: x509.Certificate) -> CertInfo:
    """Public facts of ``cert``."""
    try:
        is_ca = cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        is_ca = False
    return CertInfo(
        subject=cert.subject.rfc4514_string(),
        identity=cert_identity(cert),
        fingerprint=fingerprint(cert),
        serial=cert.serial_number,
        not_before=cert.not_valid_before_utc,
        not_after=cert.not_valid_after_utc,
        issuer=cert.issuer.rfc4514_string(),
        is_ca=is_ca,
        key_algorithm=_key_algorithm(cert.public_key()),
    )


def _new_key(algorithm: str) -> PrivateKey:
    if algorithm == "ec-p256":
        return ec.generate_private_key(ec.SECP256R1())
    if algorithm == "ed25519":
        return ed25519.Ed25519PrivateKey.generate()
    raise InputError("algorithm", f"{algorithm!r} is not one of {', '.join(ALGORITHMS)}")


def _sign_hash(key: PrivateKey) -> hashes.SHA256 | None:
    # Ed25519 signs the message itself; x509 builders want None as the hash for it.
    return None if isinstance(key, ed25519.Ed25519PrivateKey) else hashes.SHA256()


def _write_key(path: Path, key: PrivateKey) -> None:
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    write_atomic(path, pem)  # mkstemp creates 0600, the rename keeps it
    os.chmod(path, 0o600)


def load_certificate(path: str | Path) -> x509.Certificate:
    """Read one PEM (or DER) certificate; :class:`InputError` naming the file when it is not one."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise PkiError(f"cannot read certificate {p}: {exc.strerror or exc}") from exc
    try:
        if b"-----BEGIN" in data:
            return x509.load_pem_x509_certificate(data)
        return x509.load_der_x509_certificate(data)
    except ValueError as exc:
        raise InputError(str(p), f"not an X.509 certificate ({exc})") from exc


def load_private_key(path: str | Path) -> PrivateKey:
    """Read a PEM private key (EC P-256 or Ed25519); refuses a key file readable by group or others."""
    p = Path(path)
    try:
        mode = p.stat().st_mode & 0o777
        data = p.read_bytes()
    except OSError as exc:
        raise PkiError(f"cannot read private key {p}: {exc.strerror or exc}") from exc
    if mode & 0o077:
        raise PkiError(f"private key {p} has mode {mode:o}; it must be 0600", hint=f"chmod 600 {p}")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise InputError(str(p), f"not an unencrypted PEM private key ({exc})") from exc
    if not isinstance(key, ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey):
        raise InputError(str(p), f"unsupported key type {type(key).__name__}; use ec-p256 or ed25519")
    return key


def _ca_paths(pki_dir: Path) -> tuple[Path, Path]:
    return pki_dir / "ca" / "ca.pem", pki_dir / "ca" / "ca.key"


def init_ca(
    pki_dir: str | Path,
    cluster: str,
    *,
    algorithm: str = "ec-p256",
    lifetime: timedelta = timedelta(days=365),
    force: bool = False,
    now: datetime | None = None,
) -> CertInfo:
    """Create the cluster CA in ``pki_dir/ca`` (refuses to overwrite one unless ``force``)."""
    pki = Path(pki_dir)
    cert_path, key_path = _ca_paths(pki)
    if cert_path.exists() and not force:
        raise PkiError(f"a CA already exists in {cert_path.parent}", hint="use --force to replace it")
    if not re.fullmatch(_NAME, cluster):
        raise InputError("cluster", f"{cluster!r} is not a valid cluster name")
    key = _new_key(algorithm)
    t = now or datetime.now(UTC)
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, f"ringfence CA {cluster}"),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "ringfence"),
        ]
    )
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(t - _BACKDATE)
        .not_valid_after(t + lifetime)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .add_extension(ski, critical=False)
        .add_extension(
            x509.SubjectAlternativeName([x509.UniformResourceIdentifier(f"spiffe://{cluster}")]), critical=False
        )
        .sign(key, _sign_hash(key))
    )
    _write_key(key_path, key)
    write_atomic(cert_path, cert.public_bytes(serialization.Encoding.PEM))
    revoked = pki / "ca" / "revoked.txt"
    if force or not revoked.exists():
        write_atomic(revoked, b"")
    return cert_info(cert)


def load_ca(pki_dir: str | Path) -> tuple[x509.Certificate, PrivateKey]:
    """The CA certificate and key of ``pki_dir``."""
    cert_path, key_path = _ca_paths(Path(pki_dir))
    if not cert_path.exists():
        raise PkiError(f"no CA in {cert_path.parent}", hint=f"run `ringfence pki init {pki_dir} --cluster NAME`")
    return load_certificate(cert_path), load_private_key(key_path)


def ca_cluster(ca: x509.Certificate) -> str:
    """The cluster name a ringfence CA was made for (from its ``spiffe://<cluster>`` SAN)."""
    uri = cert_identity(ca)
    if uri is None:
        raise PkiError(f"CA {ca.subject.rfc4514_string()} has no spiffe:// trust-domain SAN")
    return uri.removeprefix("spiffe://")


def issue(
    pki_dir: str | Path,
    identity: str,
    *,
    lifetime: timedelta,
    out_dir: str | Path | None = None,
    algorithm: str = "ec-p256",
    now: datetime | None = None,
) -> IssuedCert:
    """Issue a workload certificate for ``identity`` with a fresh key, written into its own directory.

    The directory defaults to ``pki_dir/nodes/<job-J-rank-N | node-NAME | user-NAME>``; an existing
    certificate and key there are replaced (that is what :func:`rotate` does).
    """
    ident = parse_identity(identity)
    ca, ca_key = load_ca(pki_dir)
    cluster = ca_cluster(ca)
    if ident.cluster != cluster:
        raise InputError("identity", f"{identity} is not in this CA's trust domain spiffe://{cluster}")
    t = now or datetime.now(UTC)
    not_after = min(t + lifetime, ca.not_valid_after_utc)
    key = _new_key(algorithm)
    ca_ski = ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ident.uri)]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(t - _BACKDATE)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(True, False, False, False, False, False, False, False, False), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH, ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .add_extension(x509.SubjectAlternativeName([x509.UniformResourceIdentifier(ident.uri)]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
        .sign(ca_key, _sign_hash(ca_key))
    )
    directory = Path(out_dir) if out_dir is not None else Path(pki_dir) / "nodes" / ident.directory_name
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    key_path, cert_path, ca_path = directory / "key.pem", directory / "cert.pem", directory / "ca.pem"
    # Key first: a crash between the two writes leaves a new key with the old cert (fails loudly at
    # handshake), never a cert whose key is gone.
    _write_key(key_path, key)
    write_atomic(cert_path, cert.public_bytes(serialization.Encoding.PEM))
    write_atomic(ca_path, ca.public_bytes(serialization.Encoding.PEM))
    return IssuedCert(directory, cert_path, key_path, ca_path, cert_info(cert))


def rotate(
    pki_dir: str | Path, cert_dir: str | Path, *, lifetime: timedelta, now: datetime | None = None
) -> tuple[CertInfo, IssuedCert]:
    """Re-issue the certificate in ``cert_dir`` with a new key; returns (old info, new cert)."""
    old = load_certificate(Path(cert_dir) / "cert.pem")
    ident = cert_identity(old)
    if ident is None:
        raise PkiError(f"{cert_dir}/cert.pem has no spiffe:// identity to rotate")
    algorithm = _key_algorithm(old.public_key())
    return cert_info(old), issue(pki_dir, ident, lifetime=lifetime, out_dir=cert_dir, algorithm=algorithm, now=now)


def load_revocations(path: str | Path | None) -> frozenset[str]:
    """Fingerprints in a revocation list (one ``sha256:<hex>`` a line, ``#`` comments); empty if None."""
    if path is None:
        return frozenset()
    p = Path(path)
    try:
        lines = p.read_text().splitlines()
    except FileNotFoundError:
        return frozenset()
    except OSError as exc:
        raise PkiError(f"cannot read revocation list {p}: {exc.strerror or exc}") from exc
    out: set[str] = set()
    for i, raw in enumerate(lines, 1):
        line = raw.split("#", 1)[0].strip().lower()
        if not line:
            continue
        if not re.fullmatch(r"sha256:[0-9a-f]{64}", line):
            raise InputError(f"{p}:{i}", f"{raw.strip()!r} is not a fingerprint like sha256:<64 hex digits>")
        out.add(line)
    return frozenset(out)


def revoke(pki_dir: str | Path, cert_path: str | Path) -> str:
    """Add the fingerprint of ``cert_path`` to the CA's revocation list (and its serial to the CRL's); returns it."""
    cert = load_certificate(cert_path)
    fp = fingerprint(cert)
    path = Path(pki_dir) / "ca" / "revoked.txt"
    current = load_revocations(path)
    if fp not in current:
        write_atomic(path, "".join(f"{f}\n" for f in sorted(current | {fp})).encode())
    # Consumers that check revocation by CRL (strongSwan's IKE) know serials, not our fingerprints.
    serials = revoked_serials(pki_dir)
    if cert.serial_number not in serials:
        write_atomic(_serials_path(Path(pki_dir)), "".join(f"{s:x}\n" for s in sorted(serials | {cert.serial_number}))
                     .encode())
    return fp


def _serials_path(pki_dir: Path) -> Path:
    return pki_dir / "ca" / "revoked-serials.txt"


def revoked_serials(pki_dir: str | Path) -> frozenset[int]:
    """Serial numbers of the certificates revoked with :func:`revoke` (hex, one a line; empty if none)."""
    p = _serials_path(Path(pki_dir))
    try:
        lines = p.read_text().split()
    except FileNotFoundError:
        return frozenset()
    except OSError as exc:
        raise PkiError(f"cannot read {p}: {exc.strerror or exc}") from exc
    try:
        return frozenset(int(w, 16) for w in lines)
    except ValueError as exc:
        raise InputError(str(p), f"not a list of hex serial numbers ({exc})") from exc


def crl(pki_dir: str | Path, *, lifetime: timedelta = timedelta(days=1), now: datetime | None = None) -> bytes:
    """A DER CRL signed by the cluster CA listing every serial :func:`revoke` recorded.

    For consumers that only understand CRLs (strongSwan loads it with ``swanctl --load-creds``).
    Certificates revoked before serials were recorded are in ``revoked.txt`` only and not listed here.
    """
    ca, key = load_ca(pki_dir)
    t = now or datetime.now(UTC)
    builder = (
        x509.CertificateRevocationListBuilder()
        .issuer_name(ca.subject)
        .last_update(t - _BACKDATE)
        .next_update(t + lifetime)
        # strongSwan finds a CRL by its issuer's key identifier; RFC 5280 requires both extensions.
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(
            ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value), critical=False)
        .add_extension(x509.CRLNumber(int(t.timestamp() * 1000)), critical=False)
    )
    for serial in sorted(revoked_serials(pki_dir)):
        builder = builder.add_revoked_certificate(
            x509.RevokedCertificateBuilder().serial_number(serial).revocation_date(t - _BACKDATE).build()
        )
    return builder.sign(key, _sign_hash(key)).public_bytes(serialization.Encoding.DER)


def verify_certificate(
    cert: x509.Certificate,
    ca: x509.Certificate,
    *,
    now: datetime | None = None,
    revoked: frozenset[str] = frozenset(),
    expected_identity: str | None = None,
) -> CertInfo:
    """Verify ``cert`` against the cluster CA; returns its facts or raises :class:`CertificateRejected`.

    Checks: signed by ``ca`` (and ``ca`` is a CA), inside both validity windows, not revoked, not a
    CA itself, carries a spiffe identity in ``ca``'s trust domain, equal to ``expected_identity`` if given.
    """
    info = cert_info(cert)
    who = info.identity or info.subject
    t = now or datetime.now(UTC)
    ca_info = cert_info(ca)
    if not ca_info.is_ca:
        raise CertificateRejected(f"{ca_info.subject} is not a CA certificate")
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature) as exc:
        raise CertificateRejected(
            f"certificate of {who} ({info.fingerprint}) was not issued by the cluster CA {ca_info.subject} "
            f"(issuer {info.issuer})"
        ) from exc
    for name, i in (("certificate of " + who, info), ("cluster CA", ca_info)):
        if t < i.not_before:
            raise CertificateRejected(f"{name} is not valid before {i.not_before.isoformat()}")
        if t > i.not_after:
            raise CertificateRejected(f"{name} expired at {i.not_after.isoformat()} ({i.fingerprint})")
    if info.fingerprint in revoked:
        raise CertificateRejected(f"certificate of {who} ({info.fingerprint}) is revoked")
    if info.is_ca:
        raise CertificateRejected(f"{who} is a CA certificate, not a workload certificate")
    if info.identity is None:
        raise CertificateRejected(f"certificate {info.subject} carries no spiffe:// identity")
    if ca_info.identity is not None and not info.identity.startswith(ca_info.identity + "/"):
        raise CertificateRejected(f"identity {info.identity} is outside the CA's trust domain {ca_info.identity}")
    if expected_identity is not None and info.identity != expected_identity:
        raise CertificateRejected(f"identity {info.identity} is not the expected {expected_identity}")
    return info


def show(path: str | Path) -> CertInfo:
    """Public facts of the certificate at ``path`` (a file, or a directory holding ``cert.pem``/``ca.pem``)."""
    p = Path(path)
    if p.is_dir():
        p = p / "cert.pem" if (p / "cert.pem").exists() else p / "ca" / "ca.pem"
    return cert_info(load_certificate(p))


def ensure_ca(pki_dir: str | Path, cluster: str, *, lifetime: timedelta = timedelta(days=30)) -> CertInfo:
    """The CA in ``pki_dir``, made for ``cluster`` (``lifetime``) when there is none yet — what every layer
    that issues from the cluster PKI (TLS, IPsec, the collective transport) starts with."""
    ca = Path(pki_dir) / "ca" / "ca.pem"
    if ca.exists():
        return show(ca)
    return init_ca(pki_dir, cluster, lifetime=lifetime)


__all__ = [
    "ensure_ca",
    "ALGORITHMS",
    "CertInfo",
    "CertificateRejected",
    "Identity",
    "IssuedCert",
    "PkiError",
    "PrivateKey",
    "ca_cluster",
    "cert_identity",
    "cert_info",
    "crl",
    "fingerprint",
    "init_ca",
    "issue",
    "job_rank_identity",
    "load_ca",
    "load_certificate",
    "load_private_key",
    "load_revocations",
    "parse_duration",
    "parse_identity",
    "revoke",
    "revoked_serials",
    "rotate",
    "show",
    "verify_certificate",
]
