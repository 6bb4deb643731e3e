"""Results of the live drills of ``ringfence verify keys``: rotation, fail-closed, credential refusal.

Frozen records with their own verdicts, computed from measurements only (see
:mod:`ringfence.secure.drills`), so :mod:`ringfence.secure.verify` can judge without a lab.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ringfence.controls.interface import Verdict


@dataclass(frozen=True)
class RotationResult:
    """Keys of one layer rotated while the job ran."""

    layer: str
    nodes: tuple[str, ...]
    job_survived: bool  # every rank alive, no collective failure, steps and checkpoints continued
    stall_s: float  # longest gap without an all-reduce step of any rank around the rotation
    baseline_step_s: float  # median gap between steps before the rotation
    storage_stall_s: float  # longest gap without a completed storage request around the rotation
    request_failures: int  # storage/management requests that failed during the window
    new_in_use: bool  # the new key/certificate was seen completing handshakes after the rotation
    old_refused: bool  # a handshake with the old key/certificate was refused
    verdict: Verdict
    detail: str
    old_ids: tuple[str, ...] = ()  # fingerprints / public keys
    new_ids: tuple[str, ...] = ()
    at: str = ""  # ISO time of the rotation
    failed_steps: int | None = None  # all-reduce steps that failed around it (None: the job was not watched)


@dataclass(frozen=True)
class FailClosedResult:
    """A deliberately broken key or certificate, and what the wire showed while it was broken."""

    layer: str
    traffic_class: str
    drill: str  # what was broken, in words
    traffic_stopped: bool
    error: str  # the clear error the operator sees
    plaintext_bytes: int  # plaintext payload bytes of the class from the drilled nodes in the capture
    flows_seen: int
    recovered: bool  # traffic resumed after the fault was removed
    verdict: Verdict
    detail: str
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CredentialCheck:
    """A credential that must be refused (expired, revoked, foreign CA) — or, as control, accepted."""

    kind: str  # expired | revoked | foreign-ca | current
    identity: str
    fingerprint: str
    expected: str  # refused | accepted
    outcome: str  # what the probe saw
    verdict: Verdict
    detail: str


__all__ = ["CredentialCheck", "FailClosedResult", "RotationResult"]
