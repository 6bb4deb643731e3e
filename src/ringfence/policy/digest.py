"""The identity of a policy version: a digest of its meaning, not of its file's bytes."""

from __future__ import annotations

import hashlib
import json

from ringfence.policy.model import Policy


def policy_digest(policy: Policy) -> str:
    """sha256 over the canonical JSON of the loaded policy: reformatting the YAML keeps the version."""
    doc = policy.model_dump(mode="json", by_alias=True)
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


__all__ = ["policy_digest"]
