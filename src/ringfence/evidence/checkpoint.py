"""Signed checkpoints: the store's head, signed with Ed25519 at every commit.

The hash chain alone proves only that the records agree with each other: whoever can write the log
can append a record with a recomputed hash, rewrite the tail, or delete the last record and rewrite
``head``. The checkpoint file ``checkpoint`` in the store holds ``SEQ:SHA256`` of the last committed
record and a signature over it by a key that is **not in the store**, so ``verify`` detects each of
those edits without an anchor remembered from earlier.

Where the key lives
    ``$RINGFENCE_EVIDENCE_KEY`` names the private key file (PEM, PKCS#8, mode 0600); without it,
    ``$XDG_CONFIG_HOME/ringfence/evidence-signing.key`` (``~/.config/…``). It is created on first
    use. Keep it where the people who can write the store cannot read it (another user, a secrets
    mount) — a writer who holds the key can sign anything. ``ringfence evidence pubkey`` prints the
    public key for a verifier on another machine (``verify --pubkey FILE``).

What it does not stop
    Replacing the whole store *and* the checkpoint with an older, genuinely signed state (a
    rollback to an earlier head) looks like a store that stopped there: that needs an anchor kept
    elsewhere (``verify --anchor``) or a monotonic counter (a TPM NV index where a TPM exists).
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from ringfence.evidence.interface import ChainHead, EvidenceError

CHECKPOINT: Final = "checkpoint"
KEY_ENV: Final = "RINGFENCE_EVIDENCE_KEY"
_DOMAIN: Final = b"ringfence evidence checkpoint v1\n"
_MAX_CHECKPOINT_BYTES: Final = 4096


def default_key_path() -> Path:
    """``$RINGFENCE_EVIDENCE_KEY``, else ``$XDG_CONFIG_HOME/ringfence/evidence-signing.key``."""
    env = os.environ.get(KEY_ENV)
    if env:
        return Path(env)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "ringfence" / "evidence-signing.key"


def _message(head: ChainHead) -> bytes:
    return _DOMAIN + f"{head}\n".encode("ascii")


def public_bytes(key: Ed25519PublicKey) -> bytes:
    """The raw 32-byte public key."""
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


@dataclass(frozen=True)
class Signer:
    """Holds the private key and signs checkpoints."""

    key: Ed25519PrivateKey
    path: Path

    @property
    def public_key(self) -> Ed25519PublicKey:
        """The key a verifier checks checkpoints with."""
        return self.key.public_key()

    def sign(self, head: ChainHead) -> bytes:
        """The checkpoint file's bytes for ``head``."""
        doc = {
            "head": str(head),
            "key": public_bytes(self.public_key).hex(),
            "sig": self.key.sign(_message(head)).hex(),
        }
        return (json.dumps(doc, sort_keys=True) + "\n").encode("ascii")


def load_signer(path: Path | None = None, *, create: bool = True) -> Signer:
    """The signing key at ``path`` (default :func:`default_key_path`), created 0600 if missing and allowed."""
    p = path or default_key_path()
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        if not create:
            raise EvidenceError(f"{p}: no evidence signing key") from None
        return _create_key(p)
    except OSError as exc:
        raise EvidenceError(f"cannot read the evidence signing key {p}: {exc.strerror or exc}") from exc
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise EvidenceError(f"{p}: not a PEM private key ({exc})") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise EvidenceError(f"{p}: not an Ed25519 key")
    return Signer(key, p)


def _create_key(p: Path) -> Signer:
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    try:
        p.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.")  # 0600 from the start
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(pem)
                fh.flush()
                os.fsync(fh.fileno())
            # link, not rename: two processes creating the key at once must agree on one key.
            os.link(tmp, p)
        except FileExistsError:
            pass
        finally:
            Path(tmp).unlink(missing_ok=True)
    except OSError as exc:
        raise EvidenceError(f"cannot create the evidence signing key {p}: {exc.strerror or exc}") from exc
    return load_signer(p, create=False)


def load_public_key(path: Path) -> Ed25519PublicKey:
    """A verification key file: PEM public key, 64 hex digits, or a private key (its public half)."""
    try:
        data = path.read_bytes()[:_MAX_CHECKPOINT_BYTES]
    except OSError as exc:
        raise EvidenceError(f"cannot read the verification key {path}: {exc.strerror or exc}") from exc
    text = data.strip()
    try:
        if len(text) == 64:
            return Ed25519PublicKey.from_public_bytes(bytes.fromhex(text.decode("ascii")))
        if b"PRIVATE KEY" in text:
            return load_signer(path, create=False).public_key
        key = serialization.load_pem_public_key(text)
    except (ValueError, TypeError, UnicodeDecodeError) as exc:
        raise EvidenceError(f"{path}: not an Ed25519 public key ({exc})") from exc
    if not isinstance(key, Ed25519PublicKey):
        raise EvidenceError(f"{path}: not an Ed25519 public key")
    return key


def write_checkpoint(store_dir: Path, signer: Signer, head: ChainHead) -> None:
    """Sign ``head`` and replace the store's checkpoint file (temp, fsync, rename)."""
    path = store_dir / CHECKPOINT
    fd, tmp = tempfile.mkstemp(dir=store_dir, prefix=f".{CHECKPOINT}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(signer.sign(head))
            fh.flush()
            os.fchmod(fh.fileno(), 0o644)
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_checkpoint(store_dir: Path, key: Ed25519PublicKey) -> ChainHead | str:
    """The signed head, or why there is none that ``key`` vouches for (missing, malformed, bad signature)."""
    path = store_dir / CHECKPOINT
    try:
        with path.open("rb") as fh:
            data = fh.read(_MAX_CHECKPOINT_BYTES + 1)
    except FileNotFoundError:
        return "the signed checkpoint is missing"
    except OSError as exc:
        return f"the signed checkpoint is unreadable ({exc.strerror or exc})"
    if len(data) > _MAX_CHECKPOINT_BYTES:
        return "the signed checkpoint is not a checkpoint (too large)"
    try:
        doc = json.loads(data.decode("ascii"))
        head = ChainHead.parse(doc["head"])
        signer_key = bytes.fromhex(doc["key"])
        sig = bytes.fromhex(doc["sig"])
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        return f"the signed checkpoint is malformed ({type(exc).__name__})"
    if signer_key != public_bytes(key):
        trusted = public_bytes(key).hex()[:16]
        return f"the checkpoint is signed by key {signer_key.hex()[:16]}…, not the trusted key {trusted}…"
    try:
        key.verify(sig, _message(head))
    except InvalidSignature:
        return f"the checkpoint's signature over {head} does not verify"
    return head


__all__ = [
    "CHECKPOINT",
    "KEY_ENV",
    "Signer",
    "default_key_path",
    "load_public_key",
    "load_signer",
    "public_bytes",
    "read_checkpoint",
    "write_checkpoint",
]
