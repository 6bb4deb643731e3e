"""The evidence family's data model: records, ids, the chain head, verification reports, errors.

A record is one fact ringfence wrote down — an observation, an action, a finding, an artifact, a
key event or a note — chained to the one before it by hash, so that editing, deleting, reordering or
truncating earlier records after the fact is detected by :meth:`EvidenceStore.verify`.

The canonical encoding (:func:`canonical_json`) is the one byte form a record is hashed and stored
in: JSON with keys sorted by code point, no whitespace, ASCII only (non-ASCII as ``\\uXXXX``), no
NaN/Infinity. Only JSON values are accepted (dict with ``str`` keys, list/tuple, str, int, float,
bool, None) so that decoding and re-encoding reproduces the exact bytes.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Final, NamedTuple, NewType

from ringfence.errors import RingfenceError

#: ``ev-000042-1a2b3c4d``: the record's sequence number and the first 8 hex digits of its hash.
EvidenceId = NewType("EvidenceId", str)

#: The ``prev`` of the first record: there is nothing before it.
GENESIS: Final = "0" * 64

_ID_RE: Final = re.compile(r"^ev-(\d{6,})-([0-9a-f]{8})$")
_SHA256_RE: Final = re.compile(r"^[0-9a-f]{64}$")
_CHUNK: Final = 1 << 20


class RecordKind(StrEnum):
    """What a record is about."""

    OBSERVATION = "observation"  # a fact gathered: a capture read, a probe run, a benchmark measured
    ACTION = "action"  # something ringfence changed: a ruleset applied, a key rotated
    FINDING = "finding"  # a control's judgement
    ARTIFACT = "artifact"  # a file kept in the store, content-addressed
    KEY_EVENT = "key-event"  # key material lifecycle: issued, rotated, revoked (never the key itself)
    NOTE = "note"  # anything else worth keeping, e.g. a repair of a crashed append


class TamperReason(StrEnum):
    """Why verification stopped at a record."""

    EDITED = "edited"  # the record's content no longer matches its own hash (or its canonical form)
    DELETED = "deleted"  # a sequence number is missing from the chain
    REORDERED = "reordered"  # records are out of sequence order
    BROKEN_CHAIN = "broken-chain"  # ``prev`` does not match the hash of the record before it
    PARTIAL = "partial"  # the last line is incomplete (a crash mid-append, or a truncation)
    MALFORMED = "malformed"  # a line is not a record at all
    TRUNCATED = "truncated"  # the chain ends before the head (or anchor) it must reach
    HEAD_MISMATCH = "head-mismatch"  # the head file names a record the chain does not hold
    ANCHOR_MISMATCH = "anchor-mismatch"  # the chain does not extend the exported anchor
    BLOB_MISSING = "blob-missing"  # an artifact's content is gone from the store
    BLOB_ALTERED = "blob-altered"  # an artifact's content no longer has its recorded sha256
    UNSIGNED = "unsigned"  # the signed checkpoint is missing, forged, or does not name the last record


class ChainHead(NamedTuple):
    """The last record of a chain: print it in a report, pass it to a later verify as an anchor."""

    seq: int
    hash: str

    def __str__(self) -> str:
        return f"{self.seq}:{self.hash}"

    @classmethod
    def parse(cls, text: str) -> ChainHead:
        """Parse ``SEQ:SHA256`` as printed by ``str(head)``; raises :class:`ValueError`."""
        seq_text, sep, digest = text.strip().partition(":")
        if not sep or not seq_text.isdigit() or not _SHA256_RE.match(digest):
            raise ValueError(f"{text!r} is not a chain head like 42:<64 hex digits>")
        return cls(int(seq_text), digest)


@dataclass(frozen=True)
class Record:
    """One stored record. ``data`` is a decoded JSON value; treat it as read-only."""

    seq: int
    time: str  # UTC, ISO 8601 with microseconds and a ``Z``
    kind: RecordKind
    source: str  # what produced it: "observe.pcap", "enforce.nftables", "controls.egress"
    subject: str  # what it is about: "node w1", "flow 10.77.1.2:41234 → 10.77.2.5:8443"
    data: Any
    inputs: Mapping[str, str]  # name → sha256 of the inputs it was derived from
    prev: str
    hash: str

    @property
    def id(self) -> EvidenceId:
        """The stable evidence id, ``ev-<seq>-<hash prefix>``."""
        return make_id(self.seq, self.hash)

    def body(self) -> dict[str, Any]:
        """The hashed fields, as the JSON object the hash is computed over."""
        return {
            "seq": self.seq,
            "time": self.time,
            "kind": self.kind.value,
            "source": self.source,
            "subject": self.subject,
            "data": self.data,
            "inputs": dict(self.inputs),
            "prev": self.prev,
        }

    def to_json(self) -> dict[str, Any]:
        """Every field, including ``hash`` — the object stored as one line."""
        return {**self.body(), "hash": self.hash}


@dataclass(frozen=True)
class VerifyReport:
    """The outcome of verifying a store: ok, or the first bad record and why."""

    ok: bool
    records: int  # records checked and found good
    head: ChainHead  # the last good record (seq 0 and GENESIS for an empty store)
    bad_seq: int | None = None  # the sequence number where verification failed
    reason: TamperReason | None = None
    detail: str = ""

    def summary(self) -> str:
        """One line for a person."""
        if self.ok:
            return f"ok: {self.records} records, chain head {self.head}"
        return f"TAMPERED at seq {self.bad_seq}: {self.reason}: {self.detail}"


class EvidenceError(RingfenceError):
    """The evidence store cannot be used as asked (unreadable, damaged, unknown id)."""


class StoreDamaged(EvidenceError):
    """The store holds something an append must not build on (a partial or altered last record)."""


class UnknownEvidence(EvidenceError):
    """No record with that evidence id exists in the store."""


def make_id(seq: int, digest: str) -> EvidenceId:
    """The evidence id of the record with sequence ``seq`` and hash ``digest``."""
    return EvidenceId(f"ev-{seq:06d}-{digest[:8]}")


def parse_id(text: str) -> tuple[int, str]:
    """Split an evidence id into (seq, hash prefix); raises :class:`UnknownEvidence` if malformed."""
    m = _ID_RE.match(text.strip())
    if m is None:
        raise UnknownEvidence(f"{text!r} is not an evidence id", hint="ids look like ev-000042-1a2b3c4d")
    return int(m.group(1)), m.group(2)


def _check_json(value: Any, path: str) -> None:
    # Reject what json.dumps would silently change (int keys → str, NaN → invalid JSON, sets → error
    # later), so that a value always survives decode(encode(value)) with the same bytes.
    if value is None or isinstance(value, str | bool | int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{path}: {value!r} is not a finite number (JSON has no NaN/Infinity)")
        return
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _check_json(item, f"{path}[{i}]")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"{path}: key {key!r} is not a string")
            _check_json(item, f"{path}.{key}")
        return
    raise ValueError(f"{path}: {type(value).__name__} is not a JSON value")


def canonical_json(value: Any) -> bytes:
    """The canonical bytes of a JSON value (see the module docstring); raises :class:`ValueError`."""
    _check_json(value, "$")
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode("ascii")


def record_hash(body: Mapping[str, Any]) -> str:
    """sha256 (hex) of the canonical encoding of a record's hashed fields."""
    return hashlib.sha256(canonical_json(dict(body))).hexdigest()


def is_sha256(text: object) -> bool:
    """True for a lowercase 64-digit hex string."""
    return isinstance(text, str) and _SHA256_RE.match(text) is not None


def sha256_bytes(data: bytes) -> str:
    """sha256 (hex) of ``data``: the value to put in a record's ``inputs``."""
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | os.PathLike[str]) -> str:
    """sha256 (hex) of a file, read in 1 MiB chunks; raises :class:`EvidenceError` if unreadable."""
    h = hashlib.sha256()
    try:
        with Path(path).open("rb") as fh:
            while chunk := fh.read(_CHUNK):
                h.update(chunk)
    except OSError as exc:
        raise EvidenceError(f"cannot read {path}: {exc.strerror or exc}") from exc
    return h.hexdigest()


__all__ = [
    "GENESIS",
    "ChainHead",
    "EvidenceError",
    "EvidenceId",
    "Record",
    "RecordKind",
    "StoreDamaged",
    "TamperReason",
    "UnknownEvidence",
    "VerifyReport",
    "canonical_json",
    "is_sha256",
    "make_id",
    "parse_id",
    "record_hash",
    "sha256_bytes",
    "sha256_file",
]
