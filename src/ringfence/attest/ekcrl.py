"""Revocation of EK certificates and their CAs: the CRLs the policy lists in ``attestation.ek_crls``.

TPM manufacturers publish a CRL for each EK-issuing CA (and their roots one for the intermediates) at the
URL in the certificates' CRL distribution point. ringfence never fetches it: the operator downloads the
CRLs (as for any offline verifier) and lists the files, PEM or DER. Once any CRL is listed, every
certificate of an EK chain below the root must be covered by a CRL of its issuer, and each CRL used must

- be signed by that issuer's listed certificate (whose keyUsage, when present, allows cRLSign),
- be current: ``thisUpdate`` not in the future and ``nextUpdate`` present and not passed (a stale CRL
  cannot tell a certificate revoked since; RFC 5280 section 5.1.2.5),
- be a complete CRL of the issuer: a delta CRL, an indirect CRL or one partitioned by reasons is not
  used (an issuing distribution point limited to CA or to end-entity certificates covers those only),
- not list the certificate's serial number.

Any of those failing refuses the enrolment with the certificate's serial and issuer, or the CRL's file,
named (fail closed). A listed file that is missing, unreadable or holds no CRL is an :class:`AttestError`
naming it (exit 2), never a silent "no revocation".
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm

from ringfence.attest._x509 import extension
from ringfence.attest.interface import AttestError

_PEM_CRL = re.compile(rb"-----BEGIN X509 CRL-----\s.*?-----END X509 CRL-----", re.S)
#: CRL extensions understood here; any other critical one makes the CRL unusable (RFC 5280 section 5.2)
_KNOWN = {x509.CRLNumber, x509.AuthorityKeyIdentifier, x509.IssuingDistributionPoint, x509.IssuerAlternativeName,
          x509.AuthorityInformationAccess, x509.DeltaCRLIndicator}


@dataclass(frozen=True)
class EkCrl:
    """One CRL of the policy and the file it came from (named in every refusal that involves it)."""

    path: str
    crl: x509.CertificateRevocationList


def _parse(data: bytes, path: Path) -> list[x509.CertificateRevocationList]:
    if b"-----BEGIN" in data:  # PEM, text around the blocks allowed (bundles often carry comments)
        blocks = _PEM_CRL.findall(data)
        if not blocks:
            raise ValueError("PEM without an X509 CRL block")
        crls = [x509.load_pem_x509_crl(b) for b in blocks]
    else:
        crls = [x509.load_der_x509_crl(data)]
    for crl in crls:  # parse everything now: a malformed entry is the file's error, not a later surprise
        _ = crl.extensions, crl.next_update_utc, crl.last_update_utc, crl.issuer.rfc4514_string()
        for entry in crl:
            _ = entry.serial_number, entry.revocation_date_utc, entry.extensions
    return crls


def load_ek_crls(paths: Sequence[str], base: Path) -> tuple[EkCrl, ...]:
    """Every CRL of the files ``paths`` (PEM, one or more CRLs, or one DER CRL; relative from ``base``)."""
    out: list[EkCrl] = []
    for p in paths:
        path = Path(p) if Path(p).is_absolute() else base / p
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise AttestError(f"attestation.ek_crls: {path}: {exc.strerror or exc}",
                              hint="download the CRL from the CA certificate's CRL distribution point") from exc
        try:
            crls = _parse(data, path)
        except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
            raise AttestError(f"attestation.ek_crls: {path}: not a CRL in PEM or DER ({exc})") from exc
        out += [EkCrl(str(path), c) for c in crls]
    return tuple(out)


def _cdp(cert: x509.Certificate) -> str:
    """Where the certificate's issuer publishes its CRL (for the message), or a note that it does not say."""
    try:
        points = cert.extensions.get_extension_for_class(x509.CRLDistributionPoints).value
    except (x509.ExtensionNotFound, ValueError):
        return "the certificate names no CRL distribution point: ask its manufacturer"
    urls = [n.value for p in points for n in (p.full_name or ()) if isinstance(n, x509.UniformResourceIdentifier)]
    return f"its CRL distribution point: {', '.join(urls)}" if urls else "see its CRL distribution point"


def _name(cert: x509.Certificate) -> str:
    return cert.subject.rfc4514_string() or "(empty subject)"


def _covers(crl: x509.CertificateRevocationList, cert_is_ca: bool) -> str | bool:
    """True when ``crl`` is a complete CRL for a certificate of this kind, False when out of its scope,
    or why it cannot be used at all."""
    for ext in crl.extensions:
        if ext.critical and type(ext.value) not in _KNOWN:
            return f"it has a critical extension ringfence does not know ({ext.oid.dotted_string})"
    if extension(crl, x509.DeltaCRLIndicator) is not None:
        return "it is a delta CRL: list the issuer's full CRL"
    idp = extension(crl, x509.IssuingDistributionPoint)
    if idp is None:
        return True
    if idp.indirect_crl or idp.only_some_reasons or idp.only_contains_attribute_certs:
        return "it is an indirect or partitioned CRL (issuing distribution point): list the issuer's full CRL"
    if idp.only_contains_ca_certs:
        return cert_is_ca
    if idp.only_contains_user_certs:
        return not cert_is_ca
    return True


def _allows_crl_sign(issuer: x509.Certificate) -> bool:
    usage = extension(issuer, x509.KeyUsage)
    return True if usage is None else bool(usage.crl_sign)  # no keyUsage: every use allowed (RFC 5280 4.2.1.3)


def revocation_problem(cert: x509.Certificate, issuer: x509.Certificate, cert_is_ca: bool,
                       crls: Sequence[EkCrl], now: datetime) -> str | None:
    """Why ``cert`` (issued by ``issuer``) is not known to be unrevoked, or None when a current CRL of its
    issuer, verified by the issuer's key, covers it and does not list it. Without CRLs: None (not checked)."""
    if not crls:
        return None
    serial = f"serial 0x{cert.serial_number:x}"
    mine = [c for c in crls if c.crl.issuer == issuer.subject]
    if not mine:
        return (f"no CRL given for {_name(issuer)}, the issuer of {_name(cert)} ({serial}); download it "
                f"({_cdp(cert)}) and list it in attestation.ek_crls")
    covering = []
    for c in mine:
        if not _allows_crl_sign(issuer):
            return f"CRL {c.path}: its issuer {_name(issuer)} may not sign CRLs (keyUsage without cRLSign)"
        try:
            signed = c.crl.is_signature_valid(issuer.public_key())  # type: ignore[arg-type]
        except (TypeError, ValueError, UnsupportedAlgorithm):
            signed = False
        if not signed:
            return f"CRL {c.path}: its signature does not verify with the key of {_name(issuer)}"
        if c.crl.last_update_utc > now:
            return f"CRL {c.path}: thisUpdate {c.crl.last_update_utc:%Y-%m-%d %H:%M}Z is in the future (check clocks)"
        nxt = c.crl.next_update_utc
        if nxt is None:
            return f"CRL {c.path} of {_name(issuer)} has no nextUpdate: its freshness cannot be judged"
        if nxt < now:
            return (f"CRL {c.path} of {_name(issuer)} is stale (nextUpdate {nxt:%Y-%m-%d %H:%M}Z has passed): "
                    f"download the current one ({_cdp(cert)}) and replace the file")
        scope = _covers(c.crl, cert_is_ca)
        if isinstance(scope, str):
            return f"CRL {c.path}: {scope}"
        if scope:
            covering.append(c)
        entry = c.crl.get_revoked_certificate_by_serial_number(cert.serial_number)
        if entry is not None and scope:
            why = extension(entry, x509.CRLReason)
            reason = f", reason {why.reason.name}" if why is not None else ""
            return (f"{_name(cert)} ({serial}, issuer {_name(issuer)}) is revoked since "
                    f"{entry.revocation_date_utc:%Y-%m-%d}{reason} (CRL {c.path})")
    if not covering:
        kind = "CA" if cert_is_ca else "end-entity"
        return (f"no listed CRL of {_name(issuer)} covers {kind} certificates such as {_name(cert)} ({serial}); "
                f"list its full CRL ({_cdp(cert)})")
    return None


__all__ = ["EkCrl", "load_ek_crls", "revocation_problem"]
