"""The verifier's record of enrolled nodes: each name bound to one EK, its AK, and the last clock seen.

A name is bound to the EK it first enrolled with: a second TPM claiming an enrolled name is refused
(Keylime CVE-2025-13609), and so is one EK claiming a second name. The record is the verifier's own
file (``.ringfence/attest/<site>.json`` by default), written atomically; a damaged file is an error,
never an empty registry (that would let any TPM enrol under any name).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError

from ringfence.atomic import write_atomic
from ringfence.attest.interface import AttestError

_HEX = r"^[0-9a-f]+$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Enrolment(_Strict):
    """One enrolled node."""

    node: str
    ek_sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]  # sha256 of the EK's public area
    ak_public: Annotated[str, Field(pattern=_HEX)]  # TPM2B_PUBLIC, hex
    ak_name: Annotated[str, Field(pattern=_HEX)]
    enrolled: AwareDatetime
    # (reset count, restart count, clock) of the last quote accepted: a later one must not go back
    last_clock: tuple[int, int, int] | None = None


class Registry(_Strict):
    """Every enrolment of one site."""

    format: str = "ringfence-attest-registry-1"
    site: str
    nodes: dict[str, Enrolment] = {}


def default_registry_path(site: str) -> Path:
    """``$RINGFENCE_ATTEST_DIR/<site>.json``, else ``.ringfence/attest/<site>.json`` under the current directory."""
    return Path(os.environ.get("RINGFENCE_ATTEST_DIR") or ".ringfence/attest") / f"{site}.json"


def read_registry(path: Path, site: str) -> Registry:
    """The registry at ``path`` (an empty one when the file does not exist yet)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return Registry(site=site)
    except OSError as exc:
        raise AttestError(f"cannot read the attestation registry {path}: {exc.strerror or exc}") from exc
    try:
        reg = Registry.model_validate_json(raw)
    except ValidationError as exc:
        raise AttestError(f"{path}: not an attestation registry ({exc.error_count()} problem(s))",
                          hint="restore it from backup; re-enrolling from scratch forgets every EK binding") from exc
    if reg.site != site:
        raise AttestError(f"{path} is the registry of site {reg.site!r}, not {site!r}")
    return reg


def write_registry(path: Path, reg: Registry) -> None:
    """Write ``reg`` atomically (0600: it holds no secret, but it is the verifier's trust)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, reg.model_dump_json(indent=2).encode(), mode=0o600)


def with_enrolment(reg: Registry, entry: Enrolment) -> Registry:
    """``reg`` with ``entry`` added or replaced."""
    return reg.model_copy(update={"nodes": {**reg.nodes, entry.node: entry}})


__all__ = ["Enrolment", "Registry", "default_registry_path", "read_registry", "with_enrolment", "write_registry"]
