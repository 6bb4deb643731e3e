"""The change-control family's documents and base error.

A request file is ``{"request": {...}, "request_sha256": "...", "approvals": [...]}``: ``request`` is
what was proposed (and all an approver signs, through its hash); approvals are added by
``ringfence change approve``. Every field is validated strictly (frozen, ``extra="forbid"``).
"""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Final, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from ringfence.errors import RingfenceError

REQUEST_FORMAT: Final = "ringfence-change-request/1"
_HEX64 = r"^[0-9a-f]{64}$"
Hex64 = Annotated[str, Field(pattern=_HEX64)]


class ChangeError(RingfenceError):
    """Change control cannot proceed: no git repository, nothing approved to roll back to, a bad key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class ChangeRequest(_Strict):
    """One proposed change: what changes (both diffs), who asks, why (ticket), and the hashes binding it."""

    format: Literal["ringfence-change-request/1"]
    cluster: str
    repository: str  # the git repository's top level, as the requester saw it
    policy_path: str  # the policy file, relative to the repository
    commit: Annotated[str, Field(pattern=r"^[0-9a-f]{40}([0-9a-f]{24})?$")]
    policy_sha256: Hex64  # ringfence.policy.policy_digest of the proposed version
    policy_text: str  # the committed file, so the approver sees exactly what is deployed
    base_sha256: Hex64 | None  # the last approved version (None: the first one)
    policy_diff: str
    ruleset_diff: str
    diff_sha256: Hex64  # over both diffs and the proposed version's digest
    requested_by: Annotated[str, Field(min_length=1, max_length=200)]
    ticket: Annotated[str, Field(min_length=1, max_length=200)]
    requested_at: AwareDatetime


class Approval(_Strict):
    """One approval: the approver, when, and an Ed25519 signature over the request's hash."""

    by: Annotated[str, Field(min_length=1, max_length=200)]
    at: AwareDatetime
    request_sha256: Hex64
    key: Hex64  # the approver's public key (raw, hex); the policy says whose keys count
    sig: Annotated[str, Field(pattern=r"^[0-9a-f]{128}$")]


class RequestDoc(_Strict):
    """The request file."""

    request: ChangeRequest
    request_sha256: Hex64
    approvals: tuple[Approval, ...] = ()


def canonical_sha256(value: object) -> str:
    """sha256 of the canonical JSON of ``value`` (sorted keys, no spaces)."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def request_hash(request: ChangeRequest) -> str:
    """The hash approvals sign: every field of the request, canonically."""
    return canonical_sha256(request.model_dump(mode="json"))


def diff_hash(policy_diff: str, ruleset_diff: str, policy_sha256: str) -> str:
    """The diff's hash: both diffs and the version they lead to."""
    return canonical_sha256({"policy_diff": policy_diff, "ruleset_diff": ruleset_diff, "to": policy_sha256})


__all__ = [
    "REQUEST_FORMAT",
    "Approval",
    "ChangeError",
    "ChangeRequest",
    "Hex64",
    "RequestDoc",
    "canonical_sha256",
    "diff_hash",
    "request_hash",
]
