"""Decoding stored lines and verifying a whole chain: what :meth:`EvidenceStore.verify` runs.

Verification walks the log once, in order, and stops at the first problem. Per line, in this order:
the line is complete; it is a JSON object of the record's shape; its ``hash`` is the sha256 of its
other fields and the line is their canonical encoding (else *edited*); its ``seq`` is the next one
(else *deleted* when the missing number never appears, *reordered* when it does); its ``prev`` is
the hash of the record before (else *broken chain*: a record was replaced by one with a recomputed
hash); the blob it names, if any, exists and has its sha256. After the walk, the head file and the
anchor (if given) must name a record on the chain (else *truncated* or a mismatch).
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO, Final

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from ringfence.evidence.checkpoint import read_checkpoint
from ringfence.evidence.interface import (
    GENESIS,
    ChainHead,
    Record,
    RecordKind,
    TamperReason,
    VerifyReport,
    canonical_json,
    is_sha256,
    record_hash,
    sha256_file,
)

_FIELDS: Final = frozenset({"seq", "time", "kind", "source", "subject", "data", "inputs", "prev", "hash"})
#: The longest line a record may take. Bulky content belongs in a blob; a longer "line" is not a
#: record (it is, say, gigabytes of zeros appended), and reading it whole would cost its size in memory.
MAX_RECORD_BYTES: Final = 64 << 20


def bounded_lines(fh: BinaryIO, limit: int = MAX_RECORD_BYTES) -> Iterator[bytes]:
    """The lines of ``fh``; a line longer than ``limit`` is yielded cut at ``limit + 1`` bytes (no
    newline), and iteration stops there — memory stays bounded by ``limit`` whatever the file holds."""
    while True:
        line = fh.readline(limit + 1)
        if not line:
            return
        yield line
        if not line.endswith(b"\n"):
            return


class BadLine(Exception):
    """A stored line that is not a good record (internal; callers turn it into a report or error)."""

    def __init__(self, reason: TamperReason, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def decode_line(line: bytes, *, check_hash: bool = True) -> Record:
    """Decode one stored line (with or without its newline) into a :class:`Record`.

    With ``check_hash`` the record must hash to its ``hash`` and be in canonical form. Raises
    :class:`BadLine` with the reason.
    """
    body = line[:-1] if line.endswith(b"\n") else line
    try:
        obj = json.loads(body)
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are both ValueErrors
        raise BadLine(TamperReason.MALFORMED, f"not JSON ({exc})") from None
    if not isinstance(obj, dict) or set(obj) != _FIELDS:
        raise BadLine(TamperReason.MALFORMED, "not a JSON object with exactly the record fields")
    if check_hash:
        claimed = obj["hash"]
        try:
            actual = record_hash({k: v for k, v in obj.items() if k != "hash"})
            canonical = canonical_json(obj)
        except ValueError as exc:
            raise BadLine(TamperReason.EDITED, f"content is not canonical JSON ({exc})") from None
        if actual != claimed:
            raise BadLine(TamperReason.EDITED, f"content hashes to {actual[:16]}…, record says {str(claimed)[:16]}…")
        if canonical != body:
            raise BadLine(TamperReason.EDITED, "bytes differ from the canonical encoding of the same content")
    return _to_record(obj)


def _to_record(obj: dict[str, Any]) -> Record:
    seq, inputs = obj["seq"], obj["inputs"]
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 1:
        raise BadLine(TamperReason.MALFORMED, f"seq {seq!r} is not a positive integer")
    for name in ("time", "source", "subject"):
        if not isinstance(obj[name], str):
            raise BadLine(TamperReason.MALFORMED, f"{name} is not a string")
    try:
        kind = RecordKind(obj["kind"])
    except ValueError:
        raise BadLine(TamperReason.MALFORMED, f"kind {obj['kind']!r} is not a record kind") from None
    if not isinstance(inputs, dict) or not all(is_sha256(v) for v in inputs.values()):
        raise BadLine(TamperReason.MALFORMED, "inputs is not a mapping of names to sha256 digests")
    if not is_sha256(obj["prev"]) or not is_sha256(obj["hash"]):
        raise BadLine(TamperReason.MALFORMED, "prev or hash is not a sha256 digest")
    return Record(
        seq=seq,
        time=obj["time"],
        kind=kind,
        source=obj["source"],
        subject=obj["subject"],
        data=obj["data"],
        inputs=inputs,
        prev=obj["prev"],
        hash=obj["hash"],
    )


def _seq_appears_later(fh: BinaryIO, seq: int) -> bool:
    # Only on the failure path: tell a deleted record from a moved one by looking for its number.
    for line in bounded_lines(fh):
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict) and obj.get("seq") == seq:
            return True
    return False


def _blob_problem(record: Record, blob_dir: Path) -> tuple[TamperReason, str] | None:
    data = record.data
    if not isinstance(data, dict) or not is_sha256(data.get("blob")):
        if record.kind is RecordKind.ARTIFACT:
            return TamperReason.MALFORMED, "artifact record names no blob"
        return None
    digest = data["blob"]
    path = blob_dir / digest
    if not path.is_file():
        return TamperReason.BLOB_MISSING, f"blob {digest} is missing"
    actual = sha256_file(path)
    if actual != digest:
        return TamperReason.BLOB_ALTERED, f"blob {digest} now hashes to {actual}"
    return None


def _read_head(head_path: Path) -> ChainHead | str:
    try:
        return ChainHead.parse(head_path.read_text(encoding="ascii"))
    except FileNotFoundError:
        return "the head file is missing"
    except (ValueError, UnicodeDecodeError) as exc:
        return f"the head file is unreadable ({exc})"


def verify_store(
    log_path: Path,
    head_path: Path,
    blob_dir: Path,
    anchor: ChainHead | None,
    check_blobs: bool,
    public_key: Ed25519PublicKey | None = None,
    *,
    require_signature: bool = True,
) -> VerifyReport:
    """Verify a store's files (see the module docstring). Raises only :class:`OSError`.

    With ``require_signature`` (the default) the store's signed checkpoint must verify with
    ``public_key`` and name the chain's last record: a missing key or checkpoint is a failure, not a
    pass, because an unsigned head is exactly what an attacker who rewrote the tail would leave.
    """
    head = _read_head(head_path)
    signed: ChainHead | str | None = None
    if require_signature:
        signed = "no verification key for the signed checkpoint" if public_key is None else None
        if public_key is not None:
            signed = read_checkpoint(log_path.parent, public_key)
    refs = [h for h in (head, anchor, signed) if isinstance(h, ChainHead)]
    wanted = {h.seq for h in refs}
    committed = max((h.seq for h in refs), default=0)
    seen: dict[int, str] = {0: GENESIS}
    last = ChainHead(0, GENESIS)
    count = 0

    def bad(seq: int, reason: TamperReason, detail: str) -> VerifyReport:
        return VerifyReport(ok=False, records=count, head=last, bad_seq=seq, reason=reason, detail=detail)

    fh: BinaryIO
    try:
        fh = log_path.open("rb")
    except FileNotFoundError:
        fh = io.BytesIO()  # a removed log is an empty chain: the head check below reports the truncation
    with fh:
        offset = 0
        for lineno, line in enumerate(bounded_lines(fh), start=1):
            where = f"line {lineno} (byte {offset})"
            offset += len(line)
            expected = last.seq + 1
            if not line.endswith(b"\n"):
                if len(line) > MAX_RECORD_BYTES:
                    return bad(expected, TamperReason.MALFORMED, f"{where} is longer than {MAX_RECORD_BYTES} bytes")
                if committed > last.seq:
                    # A crash mid-append leaves the head at the last complete record; a head (or a
                    # signed checkpoint) beyond it means committed records were cut off.
                    return bad(
                        expected,
                        TamperReason.TRUNCATED,
                        f"{where} is cut off ({len(line)} bytes, no newline) but seq {committed} was committed",
                    )
                return bad(expected, TamperReason.PARTIAL, f"{where} is incomplete: {len(line)} bytes, no newline")
            try:
                record = decode_line(line)
            except BadLine as exc:
                return bad(expected, exc.reason, f"{where}: {exc.detail}")
            if record.seq > expected:
                reason = TamperReason.REORDERED if _seq_appears_later(fh, expected) else TamperReason.DELETED
                return bad(expected, reason, f"{where} holds seq {record.seq} where seq {expected} belongs")
            if record.seq < expected:
                return bad(expected, TamperReason.REORDERED, f"{where} holds seq {record.seq} after seq {last.seq}")
            if record.prev != last.hash:
                return bad(
                    expected,
                    TamperReason.BROKEN_CHAIN,
                    f"{where}: prev {record.prev[:16]}… is not the hash of seq {last.seq} ({last.hash[:16]}…)",
                )
            if check_blobs and (problem := _blob_problem(record, blob_dir)) is not None:
                return bad(expected, problem[0], f"{where}: {problem[1]}")
            if record.seq in wanted:
                seen[record.seq] = record.hash
            last = ChainHead(record.seq, record.hash)
            count += 1

    for label, ref, mismatch in (
        ("head file", head, TamperReason.HEAD_MISMATCH),
        ("anchor", anchor, TamperReason.ANCHOR_MISMATCH),
        ("signed checkpoint", signed, TamperReason.UNSIGNED),
    ):
        if ref is None:
            continue
        if isinstance(ref, str):
            return bad(last.seq + 1, mismatch, ref)
        if ref.seq > last.seq:
            return bad(last.seq + 1, TamperReason.TRUNCATED, f"the chain ends at seq {last.seq}; the {label} is {ref}")
        if seen.get(ref.seq) != ref.hash:
            return bad(ref.seq, mismatch, f"the {label} is {ref}; the chain has seq {ref.seq} = {seen.get(ref.seq)}")
    if isinstance(signed, ChainHead) and signed.seq < last.seq:
        return bad(
            signed.seq + 1,
            TamperReason.UNSIGNED,
            f"records {signed.seq + 1}–{last.seq} come after the last signed checkpoint {signed}: appended without "
            "the signing key (or a crash between the append and its signature)",
        )
    return VerifyReport(ok=True, records=count, head=last)


__all__ = ["MAX_RECORD_BYTES", "BadLine", "bounded_lines", "decode_line", "verify_store"]
