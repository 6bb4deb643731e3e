"""What ``repair`` and ``append`` check before they touch a store: never hide what verify would report."""

from __future__ import annotations

from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from ringfence.evidence.checkpoint import CHECKPOINT, read_checkpoint
from ringfence.evidence.interface import ChainHead, StoreDamaged
from ringfence.evidence.verify import BadLine, bounded_lines, decode_line

_REPAIR_HINT = (
    "run `ringfence evidence verify`; if the records after the checkpoint are yours (a crash between an append "
    "and its signature, or a store from before signed checkpoints), `ringfence evidence repair` adopts them "
    "with a note"
)


def refuse_if_committed(log: Path, head_path: Path, store: Path, key: Ed25519PublicKey, last: ChainHead) -> None:
    """Refuse when the head file or the signed checkpoint is beyond the last complete record."""
    claims: list[tuple[str, int]] = []
    try:
        claims.append(("head file", ChainHead.parse(head_path.read_text(encoding="ascii")).seq))
    except (OSError, ValueError, UnicodeDecodeError):
        pass  # an unreadable head claims nothing; verify reports it
    signed = read_checkpoint(store, key)
    if isinstance(signed, ChainHead):
        claims.append(("signed checkpoint", signed.seq))
    for label, seq in claims:
        if seq > last.seq:
            raise StoreDamaged(
                f"{log}: the {label} says seq {seq} was committed, but the last complete record is "
                f"seq {last.seq}: records were cut off, not interrupted",
                hint="this is truncation, not a crash: restore the store from a copy; repair will not hide it",
            )


def refuse_if_record(log: Path, fragment: bytes, last: ChainHead) -> None:
    """Refuse when the unterminated last line is a whole, chained record (only its newline is gone)."""
    try:
        record = decode_line(fragment)
    except BadLine:
        return
    if record.seq == last.seq + 1 and record.prev == last.hash:
        raise StoreDamaged(
            f"{log}: the last line is complete record seq {record.seq} without its newline",
            hint="repair never removes a complete record; restore the newline or the store from a copy",
        )


def _hash_at(log: Path, seq: int) -> str | None:
    with log.open("rb") as fh:
        for line in bounded_lines(fh):
            if not line.endswith(b"\n"):
                return None
            try:
                record = decode_line(line, check_hash=False)
            except BadLine:
                return None
            if record.seq == seq:
                return record.hash
    return None


def unsigned_tail(log: Path, store: Path, key: Ed25519PublicKey, last: ChainHead) -> tuple[int, str] | None:
    """``(first unsigned seq, what the checkpoint said)`` when records follow the signed checkpoint, else None.

    Refuses (:class:`StoreDamaged`) when the checkpoint names a record the chain holds differently or is
    signed by another key: that is a rewrite, and adopting it would launder it.
    """
    signed = read_checkpoint(store, key)
    if isinstance(signed, ChainHead):
        if signed == last:
            return None
        if signed.seq < last.seq and (signed.seq == 0 or _hash_at(log, signed.seq) == signed.hash):
            return signed.seq + 1, str(signed)
        raise StoreDamaged(
            f"{log}: the signed checkpoint {signed} is not on the chain (its last record is {last})",
            hint="records were rewritten: restore the store from a copy; repair will not adopt them",
        )
    if "missing" in signed:
        return (1, "none") if last.seq > 0 else None
    raise StoreDamaged(f"{log}: {signed}", hint="a checkpoint this key did not sign is not adopted: verify the key")


def legacy_store(store: Path, last: ChainHead) -> int | None:
    """``1`` when the store has records and has never had a checkpoint file (made before they existed).

    Only a *missing* file counts: a checkpoint that is present but stale, forged or unreadable is
    tampering or a crash, and is refused until ``repair`` (which says what it adopts).
    """
    return 1 if last.seq > 0 and not (store / CHECKPOINT).exists() else None


def require_signed_tail(log: Path, store: Path, key: Ed25519PublicKey, last: ChainHead) -> None:
    """Refuse to append when the tail is not exactly what the signed checkpoint names."""
    signed = read_checkpoint(store, key)
    if isinstance(signed, ChainHead) and signed == last:
        return
    if not isinstance(signed, ChainHead) and last.seq == 0 and "missing" in signed:
        return  # an empty store from before signed checkpoints: nothing to vouch for
    what = signed if isinstance(signed, str) else f"the signed checkpoint is {signed}, the last record {last}"
    raise StoreDamaged(f"{log}: {what}: refusing to sign on top of it", hint=_REPAIR_HINT)


__all__ = ["legacy_store", "refuse_if_committed", "refuse_if_record", "require_signed_tail", "unsigned_tail"]
