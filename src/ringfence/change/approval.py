"""Approvals: an Ed25519 signature by the approver over the request's hash, as evidence checkpoints are signed.

The signed message names the request's hash, the approver and the time, under a domain tag, so a
signature cannot be replayed onto another request, another identity or another kind of document.
Whose key counts for which identity is the policy's ``change_control.approvers``: a valid signature
by a key the policy does not list for that identity approves nothing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from ringfence.change.interface import Approval
from ringfence.evidence.checkpoint import Signer, public_bytes

KEY_ENV: Final = "RINGFENCE_APPROVER_KEY"
_DOMAIN: Final = b"ringfence change approval v1\n"


def default_approver_key() -> Path:
    """``$RINGFENCE_APPROVER_KEY``, else ``$XDG_CONFIG_HOME/ringfence/approver-signing.key``."""
    env = os.environ.get(KEY_ENV)
    if env:
        return Path(env)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "ringfence" / "approver-signing.key"


def _message(request_sha256: str, by: str, at: datetime) -> bytes:
    return _DOMAIN + f"{request_sha256}\n{by}\n{at.isoformat()}\n".encode()


def sign_approval(signer: Signer, request_sha256: str, by: str, at: datetime) -> Approval:
    """``by``'s approval of the request whose hash is ``request_sha256``."""
    sig = signer.key.sign(_message(request_sha256, by, at))
    return Approval(by=by, at=at, request_sha256=request_sha256, key=public_bytes(signer.public_key).hex(),
                    sig=sig.hex())


def approval_problem(a: Approval, request_sha256: str, trusted: Mapping[str, str]) -> str | None:
    """Why ``a`` does not approve the request ``request_sha256`` under the trusted keys, or None."""
    if a.request_sha256 != request_sha256:
        return f"the approval by {a.by} is for another request ({a.request_sha256[:16]}…)"
    want = trusted.get(a.by)
    if want is None:
        return f"{a.by} is not an approver of this policy (change_control.approvers)"
    if want != a.key:
        return f"the approval by {a.by} is signed with key {a.key[:16]}…, not {a.by}'s key {want[:16]}…"
    try:
        Ed25519PublicKey.from_public_bytes(bytes.fromhex(a.key)).verify(bytes.fromhex(a.sig),
                                                                         _message(request_sha256, a.by, a.at))
    except (InvalidSignature, ValueError):
        return f"the approval by {a.by} does not verify: the request or the approval was edited after signing"
    return None


__all__ = ["KEY_ENV", "approval_problem", "default_approver_key", "sign_approval"]
