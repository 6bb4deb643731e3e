"""Read ``swanctl --list-certs``: which end-entity certificates one charon holds, and the CRLs it loaded.

Pure parsing of the command's text output (strongSwan 5.9). Sections start with ``List of X.509 End Entity
Certificates``, ``List of X.509 CA Certificates`` or ``List of X.509 CRLs``; in them a certificate is a
``subject:`` line followed by its ``serial:`` (and a ``pubkey:`` line that says ``has private key`` when it
is charon's own credential rather than a peer's it received), a CRL an ``issuer:`` line followed by ``N revoked
certificates:`` and one ``SERIAL: DATE, REASON`` line per revoked certificate. Serials are colon-separated
hex, read as integers. Lines it does not know are skipped (strongSwan adds some by version); a revoked
entry outside a CRL, or a count that disagrees with the entries listed, is a
:class:`~ringfence.secure.layers.interface.LayerError`: the text is then not what we think it is, and a
revocation check must not pass on it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ringfence.secure.layers.interface import LayerError

_SECTION = re.compile(r"^List of X\.509 (?P<kind>End Entity Certificates|CA Certificates|CRLs)\s*$")
_SUBJECT = re.compile(r'^\s+subject:\s+"(?P<subject>[^"]*)"')
_ISSUER = re.compile(r'^\s+issuer:\s+"(?P<issuer>[^"]*)"')
_SERIAL = re.compile(r"^\s+serial:\s+(?P<serial>[0-9a-f]{2}(?::[0-9a-f]{2})*)\s*$")
_COUNT = re.compile(r"^\s+(?P<n>\d+) revoked certificates?:\s*$")
_PUBKEY = re.compile(r"^\s+pubkey:\s+.*\bhas private key\b")
_REVOKED = re.compile(r"^\s+(?P<serial>[0-9a-f]{2}(?::[0-9a-f]{2})*): ")


@dataclass(frozen=True)
class LoadedCert:
    """An end-entity certificate charon holds (its own, or a peer's it received)."""

    subject: str
    serial: int
    own: bool = False  # charon holds its private key: the node's own credential, not a peer's it received


@dataclass(frozen=True)
class LoadedCrl:
    """A CRL charon loaded: its issuer and the serials it revokes."""

    issuer: str
    revoked: frozenset[int]


@dataclass(frozen=True)
class Listing:
    """Everything ``swanctl --list-certs`` showed."""

    certs: tuple[LoadedCert, ...]
    crls: tuple[LoadedCrl, ...]

    def revoked(self) -> frozenset[int]:
        """Every serial some loaded CRL revokes."""
        return frozenset(s for c in self.crls for s in c.revoked)


def _serial(text: str) -> int:
    return int(text.replace(":", ""), 16)


def parse_certs(text: str) -> Listing:
    """The end-entity certificates and CRLs in ``swanctl --list-certs`` output (empty text: none)."""
    certs: list[LoadedCert] = []
    crls: list[LoadedCrl] = []
    section = ""
    subject: str | None = None
    issuer: str | None = None
    expected: int | None = None
    revoked: set[int] = set()

    def close_crl() -> None:
        nonlocal issuer, expected, revoked
        if issuer is not None:
            if expected is not None and expected != len(revoked):
                raise LayerError(f"swanctl --list-certs: the CRL of {issuer!r} says {expected} revoked "
                                 f"certificates and lists {len(revoked)}")
            crls.append(LoadedCrl(issuer, frozenset(revoked)))
        issuer, expected, revoked = None, None, set()

    for line in text.splitlines():
        if m := _SECTION.match(line):
            close_crl()
            section, subject = m["kind"], None
        elif section == "End Entity Certificates":
            if m := _SUBJECT.match(line):
                subject = m["subject"]
            elif (m := _SERIAL.match(line)) and subject is not None:
                certs.append(LoadedCert(subject, _serial(m["serial"])))
                subject = None
            elif _PUBKEY.match(line) and certs:
                certs[-1] = LoadedCert(certs[-1].subject, certs[-1].serial, own=True)
        elif section == "CRLs":
            if m := _ISSUER.match(line):
                close_crl()
                issuer = m["issuer"]
            elif m := _COUNT.match(line):
                if issuer is None:
                    raise LayerError(f"swanctl --list-certs: revoked certificates outside a CRL: {line.strip()!r}")
                expected = int(m["n"])
            elif expected is not None and (m := _REVOKED.match(line)):
                revoked.add(_serial(m["serial"]))
    close_crl()
    return Listing(tuple(certs), tuple(crls))


__all__ = ["Listing", "LoadedCert", "LoadedCrl", "parse_certs"]
