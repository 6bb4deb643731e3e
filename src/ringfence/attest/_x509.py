"""One X.509 lookup the EK certificate and CRL checks share."""

from __future__ import annotations

from typing import Protocol, TypeVar

from cryptography import x509

_E = TypeVar("_E", bound=x509.ExtensionType)


class _HasExtensions(Protocol):
    @property
    def extensions(self) -> x509.Extensions: ...


def extension(holder: _HasExtensions, kind: type[_E]) -> _E | None:
    """The value of ``holder``'s (a certificate's, CRL's or CRL entry's) extension ``kind``; None without one."""
    try:
        return holder.extensions.get_extension_for_class(kind).value
    except x509.ExtensionNotFound:
        return None


__all__ = ["extension"]
