"""Key-management facts (``ringfence verify keys -o keys.json``): rotation, fail-closed, coverage, scope,
credentials and the certificate/key inventory, as :meth:`ConfidentialityReport.facts_keys` writes them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, Field

from ringfence.facts.interface import Loaded, Strict, parse

HINT = "write it with: ringfence verify keys --target lab -o keys.json"
VerdictText = Literal["pass", "fail", "exempt", "unknown"]


class RotationModel(Strict):
    """A rotation as encryption_keys reads it. ``at`` empty: the time was not measured (proves nothing)."""

    layer: str
    at: AwareDatetime | Literal[""] | None
    ok: bool
    dropped_job: bool
    detail: str = ""


class MismatchModel(Strict):
    """A key-mismatch drill as encryption_keys reads it."""

    layer: str
    failed_closed: bool
    detail: str = ""


class CoverageModel(Strict):
    """verify's coverage of one class."""

    traffic_class: str
    status: Literal["covered", "exempt", "uncovered", "not-required"]
    layer: str | None
    verdict: VerdictText
    reason: str
    exception: dict[str, Any] | None = None
    seen_on_wire: bool | None = None


class ScopeModel(Strict):
    """verify's scope check of one approved path."""

    path: str
    traffic_class: str
    boundary: str
    transport: str
    routed: bool
    layer: str | None
    verdict: VerdictText
    reason: str


class CredentialModel(Strict):
    """A credential that must be refused (or, as control, accepted)."""

    kind: str
    identity: str
    fingerprint: str
    expected: Literal["refused", "accepted"]
    outcome: str
    verdict: VerdictText
    detail: str


class CertificateModel(Strict):
    """A workload certificate (fingerprint only, never key material)."""

    kind: Literal["certificate"]
    node: str
    identity: str
    fingerprint: str
    not_after: AwareDatetime


class CaModel(Strict):
    """The cluster CA."""

    kind: Literal["ca"]
    fingerprint: str


class TunnelKeyModel(Strict):
    """A WireGuard public key."""

    kind: Literal["wireguard"]
    node: str
    public_key: str


Inventory = Annotated[CertificateModel | CaModel | TunnelKeyModel, Field(discriminator="kind")]


class KeysDoc(Strict):
    """The keys facts file."""

    source: str
    generated: AwareDatetime
    verdict: VerdictText
    classes: dict[str, dict[str, Any]]
    before: dict[str, dict[str, Any]] = {}
    coverage: dict[str, CoverageModel]
    scope: list[ScopeModel]
    rotation: list[dict[str, Any]] = []
    fail_closed: list[dict[str, Any]] = []
    credentials: list[CredentialModel] = []
    inventory: list[Inventory] = []
    rotations: list[RotationModel] = []
    mismatch: list[MismatchModel] = []
    evidence: list[str] = []


def load(path: str | Path, data: bytes | None = None) -> Loaded:
    """``Facts.keys`` (the validated document as plain JSON values) and when verify generated it;
    ``data``: the file's bytes, if already read."""
    doc = parse(path, KeysDoc, "key facts", HINT, data=data)
    value: dict[str, Any] = doc.model_dump(mode="json")
    return Loaded("keys", str(path), value, doc.generated)


def load_key_facts(path: str | Path) -> dict[str, Any]:
    """``Facts.keys`` from a file written by ``ringfence verify keys -o``."""
    value: dict[str, Any] = load(path).value
    return value


__all__ = ["KeysDoc", "RotationModel", "load", "load_key_facts"]
