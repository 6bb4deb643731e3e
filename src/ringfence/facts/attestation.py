"""Attestation facts (``ringfence attest verify --probe -o attest.json``): each node's verdict and the
fabric probes that show what the gate did with it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, Field

from ringfence.facts.interface import Loaded, Strict, parse

FORMAT = "ringfence-attestation-1"
HINT = "write it with: ringfence attest verify --target lab --probe -o attest.json"


class NodeModel(Strict):
    """One node's attestation verdict."""

    node: str
    admitted: bool
    reasons: tuple[str, ...]
    addresses: tuple[str, ...]
    drill: bool = False  # refused on purpose (a replayed quote) to prove the denied side
    evidence: str = ""


class ProbeModel(Strict):
    """A collective-port probe between two fabric members after the gate acted."""

    source: str
    target: str
    address: str
    port: Annotated[int, Field(ge=1, le=65535)]
    expected: Literal["reached", "blocked"]
    outcome: Literal["connected", "timeout", "refused", "error"]
    verdict: Literal["pass", "fail", "unknown"]
    detail: str = ""


class AttestationDoc(Strict):
    """The attestation facts file."""

    format: Literal["ringfence-attestation-1"]
    site: str
    generated: AwareDatetime
    interval: str
    nodes: tuple[NodeModel, ...]
    probes: tuple[ProbeModel, ...] = ()


def load(path: str | Path, data: bytes | None = None) -> Loaded:
    """``Facts.attestation`` (the validated document as plain JSON values) and when it was generated."""
    doc = parse(path, AttestationDoc, "attestation facts", HINT, fmt=FORMAT, data=data)
    value: dict[str, Any] = doc.model_dump(mode="json")
    return Loaded("attestation", str(path), value, doc.generated)


__all__ = ["FORMAT", "AttestationDoc", "NodeModel", "ProbeModel", "load"]
