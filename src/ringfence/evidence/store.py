"""The append-only, hash-chained evidence store in a directory.

Layout of a store directory::

    evidence.jsonl   one record per line, canonical JSON, each chained to the one before by hash
    head             "SEQ:SHA256" of the last record, rewritten atomically after every append
    checkpoint       that head signed with Ed25519 by a key kept outside the store (see checkpoint.py)
    blobs/<sha256>   artifacts, content-addressed, read-only
    .lock            the fcntl lock appenders hold (exclusive) and verifiers hold (shared)

An append writes its whole line with one ``write`` on an ``O_APPEND`` descriptor, then fsyncs, so a
crash leaves at most an incomplete last line; the next append refuses to build on it until
:meth:`EvidenceStore.repair` removes it explicitly (keeping the removed bytes as a blob and recording
a note). Earlier records are never rewritten. Every commit also re-signs the checkpoint, so an
appended forgery, a rewritten tail or a deleted last record fails ``verify`` without an anchor.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, Final

from ringfence.evidence._repair import (
    legacy_store,
    refuse_if_committed,
    refuse_if_record,
    require_signed_tail,
    unsigned_tail,
)
from ringfence.evidence.checkpoint import Signer, default_key_path, load_public_key, load_signer, write_checkpoint
from ringfence.evidence.interface import (
    GENESIS,
    ChainHead,
    EvidenceError,
    EvidenceId,
    Record,
    RecordKind,
    StoreDamaged,
    UnknownEvidence,
    VerifyReport,
    canonical_json,
    is_sha256,
    make_id,
    parse_id,
    record_hash,
    sha256_file,
)
from ringfence.evidence.verify import MAX_RECORD_BYTES, BadLine, bounded_lines, decode_line, verify_store

LOG: Final = "evidence.jsonl"
HEAD: Final = "head"
BLOBS: Final = "blobs"
LOCK: Final = ".lock"
_CHUNK: Final = 1 << 20
_TAIL_STEP: Final = 1 << 16

Clock = Callable[[], datetime]


@dataclass(frozen=True)
class NewRecord:
    """A record to append (see :meth:`EvidenceStore.append` for the fields)."""

    kind: RecordKind
    source: str
    subject: str
    data: Any = None
    inputs: Mapping[str, str] = field(default_factory=dict)


def _validated(entry: NewRecord) -> NewRecord:
    kind = RecordKind(entry.kind)
    if not isinstance(entry.source, str) or not entry.source:
        raise ValueError("source must be a non-empty string")
    if not isinstance(entry.subject, str):
        raise ValueError("subject must be a string")
    for name, digest in entry.inputs.items():
        if not isinstance(name, str) or not is_sha256(digest):
            raise ValueError(f"inputs[{name!r}] must map a name to a lowercase sha256 hex digest")
    canonical_json(entry.data)  # fail on a non-JSON value before taking the lock
    return NewRecord(kind, entry.source, entry.subject, entry.data, dict(entry.inputs))


def _utc_now() -> datetime:
    return datetime.now(UTC)


def format_time(when: datetime) -> str:
    """UTC ISO 8601 with microseconds and ``Z``: the ``time`` of a record."""
    if when.tzinfo is None:
        raise ValueError("record times must be timezone-aware")
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _write_head(path: Path, head: ChainHead) -> None:
    # Like write_atomic, but world-readable: a verifier without write access must read the head.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(f"{head}\n".encode("ascii"))
            fh.flush()
            os.fchmod(fh.fileno(), 0o644)
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def default_store_path() -> Path:
    """``$RINGFENCE_EVIDENCE`` if set, else ``.ringfence/evidence`` under the current directory."""
    return Path(os.environ.get("RINGFENCE_EVIDENCE") or ".ringfence/evidence")


def _oserror(action: str, path: Path, exc: OSError) -> EvidenceError:
    return EvidenceError(f"cannot {action} {path}: {exc.strerror or exc}")


class EvidenceStore:
    """One evidence store directory. Safe to use from several processes at once (fcntl locks)."""

    def __init__(self, path: Path, clock: Clock, key_path: Path | None = None) -> None:
        """Use :meth:`open`; this does not touch the disk."""
        self.path = path
        self.key_path = key_path or default_key_path()
        self._signer: Signer | None = None
        self.log_path = path / LOG
        self.head_path = path / HEAD
        self.blob_dir = path / BLOBS
        self._lock_path = path / LOCK
        self._clock = clock

    # -- opening -----------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        create: bool = True,
        clock: Clock | None = None,
        key: str | os.PathLike[str] | None = None,
    ) -> EvidenceStore:
        """Open the store in directory ``path``, creating it (durably) unless ``create`` is False.

        ``key`` is the checkpoint signing key file (default :func:`~ringfence.evidence.checkpoint.
        default_key_path`); it is read (or created) on the first commit, never for reading.

        Raises :class:`EvidenceError` when the directory is not a store and may not be created, or
        cannot be created or read.
        """
        store = cls(Path(path), clock or _utc_now, Path(key) if key is not None else None)
        if store.log_path.is_file() or store.head_path.is_file():
            # A head without a log is a store whose log was removed: open it so verify can say so,
            # and never re-create it (that would hide the removal).
            return store
        if not create:
            if not store.path.exists():
                raise EvidenceError(f"{store.path}: no such evidence store")
            raise EvidenceError(f"{store.path}: not an evidence store (no {LOG})")
        store._create()
        return store

    def signer(self) -> Signer:
        """The checkpoint signer (the key is loaded, or created, on first use)."""
        if self._signer is None:
            self._signer = load_signer(self.key_path)
        return self._signer

    def _create(self) -> None:
        signer = self.signer()
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            with self._locked(fcntl.LOCK_EX):
                if self.log_path.exists():  # another process created it while we waited
                    return
                self.blob_dir.mkdir(exist_ok=True)
                # The head goes first: whoever sees the log may append at once, and its head must win.
                _write_head(self.head_path, ChainHead(0, GENESIS))
                write_checkpoint(self.path, signer, ChainHead(0, GENESIS))
                fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
                _fsync_dir(self.blob_dir)
                _fsync_dir(self.path)
            _fsync_dir(self.path.resolve().parent)
        except OSError as exc:
            raise _oserror("create evidence store", self.path, exc) from exc

    @contextlib.contextmanager
    def _locked(self, mode: int) -> Iterator[None]:
        try:
            try:
                fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            except PermissionError:
                if mode == fcntl.LOCK_EX:
                    raise
                # A reader without write permission can still take a shared lock on an existing file.
                fd = os.open(self._lock_path, os.O_RDONLY)
        except OSError as exc:
            raise _oserror("lock", self._lock_path, exc) from exc
        try:
            fcntl.flock(fd, mode)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    # -- appending ---------------------------------------------------------------------------

    def append(
        self,
        kind: RecordKind | str,
        source: str,
        subject: str,
        data: Any = None,
        inputs: Mapping[str, str] | None = None,
    ) -> EvidenceId:
        """Append one record and return its id once it is on disk (written and fsynced).

        ``data`` must be a JSON value; ``inputs`` maps a name to the sha256 (hex) of an input the
        record was derived from (see :func:`sha256_file`). Raises :class:`ValueError` for a bad
        argument, :class:`StoreDamaged` if the last record is incomplete or altered.
        """
        return self.append_many([NewRecord(RecordKind(kind), source, subject, data, inputs or {})])[0]

    def append_many(self, entries: Sequence[NewRecord]) -> list[EvidenceId]:
        """Append several records with one write and one fsync (e.g. all findings of a run).

        Either every record is validated and written, or (on a bad argument) none is. A crash during
        the write leaves a prefix of them plus at most one incomplete line, as for :meth:`append`.
        """
        pending = [_validated(e) for e in entries]
        if not pending:
            return []
        with self._locked(fcntl.LOCK_EX):
            return self._append_locked(pending)

    def _append_locked(self, pending: Sequence[NewRecord], *, adopt: bool = False) -> list[EvidenceId]:
        signer = self.signer()  # before writing: a record that cannot be signed is not committed
        try:
            fd = os.open(self.log_path, os.O_RDWR | os.O_APPEND)
        except OSError as exc:
            raise _oserror("open", self.log_path, exc) from exc
        ids: list[EvidenceId] = []
        try:
            size = os.fstat(fd).st_size
            last = self._tail(fd, size)
            legacy: list[NewRecord] = []
            if not adopt and (legacy_from := legacy_store(self.path, last)) is not None:
                # A store from before signed checkpoints: adopt its records with a note, in the same
                # write, so the upgrade is on the record rather than silent.
                legacy = [NewRecord(RecordKind.NOTE, "ringfence.evidence", LOG, {
                    "action": "adopted records of a store without a signed checkpoint",
                    "adopted_unsigned": {"from_seq": legacy_from, "to_seq": last.seq, "checkpoint": "none"},
                }, {})]
            elif not adopt:
                # Signing on top of records nobody signed would vouch for them: a forged append
                # must not become genuine because the next honest append re-signed the head.
                require_signed_tail(self.log_path, self.path, signer.public_key, last)
            lines: list[bytes] = []
            for entry in [*legacy, *pending]:
                body = {
                    "seq": last.seq + 1,
                    "time": format_time(self._clock()),
                    "kind": entry.kind.value,
                    "source": entry.source,
                    "subject": entry.subject,
                    "data": entry.data,
                    "inputs": dict(entry.inputs),
                    "prev": last.hash,
                }
                last = ChainHead(last.seq + 1, record_hash(body))
                lines.append(canonical_json({**body, "hash": last.hash}) + b"\n")
                ids.append(make_id(last.seq, last.hash))
            ids = ids[len(legacy) :]  # the caller's records only
            try:
                _write_all(fd, b"".join(lines))
                os.fsync(fd)
            except OSError as exc:
                # Take back a half-written line so the store stays appendable (best effort: if this
                # fails too, the partial line stays and the next append refuses until repair()).
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, size)
                    os.fsync(fd)
                raise _oserror("append to", self.log_path, exc) from exc
        finally:
            os.close(fd)
        try:
            _write_head(self.head_path, last)
            write_checkpoint(self.path, signer, last)
        except OSError as exc:
            # The records are durable; a head left behind is accepted by verify (it is on the chain),
            # a checkpoint left behind is reported as unsigned records until the next commit signs them.
            raise _oserror("update the head of", self.path, exc) from exc
        return ids

    def _tail(self, fd: int, size: int) -> ChainHead:
        """The last record's (seq, hash), checked for completeness and self-consistency."""
        if size == 0:
            return ChainHead(0, GENESIS)
        if os.pread(fd, 1, size - 1) != b"\n":
            raise StoreDamaged(
                f"{self.log_path}: the last line is incomplete (a crash during an append?)",
                hint="run `ringfence evidence repair` to remove it (it is kept as a blob), then verify",
            )
        start = size - 1
        while start > 0:
            if size - start > MAX_RECORD_BYTES:
                raise StoreDamaged(
                    f"{self.log_path}: the last line is longer than {MAX_RECORD_BYTES} bytes: not a record",
                    hint="run `ringfence evidence verify`; a tampered store must not be extended",
                )
            step = min(_TAIL_STEP, start)
            chunk = os.pread(fd, step, start - step)
            nl = chunk.rfind(b"\n")
            if nl >= 0:
                start = start - step + nl + 1
                break
            start -= step
        line = os.pread(fd, size - start, start)
        try:
            record = decode_line(line)
        except BadLine as bad:
            raise StoreDamaged(
                f"{self.log_path}@{start}: the last record is {bad.reason}: {bad.detail}",
                hint="run `ringfence evidence verify`; a tampered store must not be extended",
            ) from None
        return ChainHead(record.seq, record.hash)

    def add_artifact(
        self,
        content: str | os.PathLike[str] | bytes,
        name: str,
        *,
        source: str = "ringfence.evidence",
        data: Mapping[str, Any] | None = None,
    ) -> EvidenceId:
        """Copy a file (or bytes) into ``blobs/<sha256>`` and record it as an ``artifact``.

        The record's data holds ``name``, ``blob`` (the sha256), ``size``, ``origin`` (the path, for
        a file) and any extra ``data``; its inputs map ``name`` to the sha256.
        """
        digest, size = self._store_blob(content)
        extra = dict(data or {})
        record: dict[str, Any] = {**extra, "name": name, "blob": digest, "size": size}
        if not isinstance(content, bytes):
            record["origin"] = os.fspath(content)
        return self.append(RecordKind.ARTIFACT, source, name, record, {name: digest})

    def _store_blob(self, content: str | os.PathLike[str] | bytes) -> tuple[str, int]:
        try:
            self.blob_dir.mkdir(exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.blob_dir, prefix=".incoming.")
        except OSError as exc:
            raise _oserror("write a blob into", self.blob_dir, exc) from exc
        h = hashlib.sha256()
        size = 0
        try:
            with os.fdopen(fd, "wb") as out:
                if isinstance(content, bytes):
                    out.write(content)
                    h.update(content)
                    size = len(content)
                else:
                    src = Path(content)
                    try:
                        fh: IO[bytes] = src.open("rb")
                    except OSError as exc:
                        raise _oserror("read artifact", src, exc) from exc
                    with fh:
                        while chunk := fh.read(_CHUNK):
                            out.write(chunk)
                            h.update(chunk)
                            size += len(chunk)
                out.flush()
                os.fsync(out.fileno())
            digest = h.hexdigest()
            final = self.blob_dir / digest
            if final.exists():
                if sha256_file(final) != digest:
                    raise StoreDamaged(
                        f"{final}: an existing blob no longer matches its name",
                        hint="run `ringfence evidence verify`",
                    )
            else:
                os.chmod(tmp, 0o444)
                os.replace(tmp, final)
                _fsync_dir(self.blob_dir)
        except OSError as exc:
            raise _oserror("write a blob into", self.blob_dir, exc) from exc
        finally:
            Path(tmp).unlink(missing_ok=True)
        return digest, size

    def blob_path(self, digest: str) -> Path:
        """Where the artifact with this sha256 is kept."""
        if not is_sha256(digest):
            raise ValueError(f"{digest!r} is not a sha256 hex digest")
        return self.blob_dir / digest

    # -- reading -----------------------------------------------------------------------------

    def records(self) -> Iterator[Record]:
        """Every complete record in order. Does not check the chain (that is :meth:`verify`).

        An incomplete last line is not a record and is skipped; a malformed complete line raises
        :class:`StoreDamaged` naming the file and line.
        """
        try:
            fh = self.log_path.open("rb")
        except OSError as exc:
            raise _oserror("read", self.log_path, exc) from exc
        with fh:
            for lineno, line in enumerate(bounded_lines(fh), start=1):
                if not line.endswith(b"\n"):
                    if len(line) > MAX_RECORD_BYTES:
                        raise StoreDamaged(
                            f"{self.log_path}:{lineno}: longer than {MAX_RECORD_BYTES} bytes: not a record",
                            hint="run `ringfence evidence verify`",
                        )
                    return
                try:
                    yield decode_line(line, check_hash=False)
                except BadLine as bad:
                    raise StoreDamaged(
                        f"{self.log_path}:{lineno}: {bad.reason}: {bad.detail}",
                        hint="run `ringfence evidence verify`",
                    ) from None

    def raw_lines(self) -> Iterator[bytes]:
        """The stored lines, byte for byte (complete lines only): what ``export`` writes."""
        try:
            fh = self.log_path.open("rb")
        except OSError as exc:
            raise _oserror("read", self.log_path, exc) from exc
        with fh:
            for line in bounded_lines(fh):
                if line.endswith(b"\n"):
                    yield line

    def get(self, evidence_id: str) -> Record:
        """The record with this id; raises :class:`UnknownEvidence` if there is none."""
        seq, prefix = parse_id(evidence_id)
        for record in self.records():
            if record.seq == seq and record.hash.startswith(prefix):
                return record
        raise UnknownEvidence(f"{self.path}: no record {evidence_id}")

    def head(self) -> ChainHead:
        """(seq, hash) of the last complete record; (0, GENESIS) for an empty store."""
        try:
            fd = os.open(self.log_path, os.O_RDONLY)
        except OSError as exc:
            raise _oserror("read", self.log_path, exc) from exc
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                # Ignore the incomplete line: the head is the last record that was committed.
                size = self._line_start(fd, size)
            return self._tail(fd, size)
        finally:
            os.close(fd)

    # -- checking and repairing --------------------------------------------------------------

    def verify(
        self,
        *,
        anchor: ChainHead | None = None,
        check_blobs: bool = True,
        public_key: str | os.PathLike[str] | None = None,
    ) -> VerifyReport:
        """Check the whole chain, the head file, the signed checkpoint, the blobs and ``anchor``.

        The checkpoint is checked against ``public_key`` (a key file), else against the public half
        of this store's signing key; with neither at hand the report is a failure, never a pass.
        Never raises for tampering — that is the report; raises :class:`EvidenceError` only if the
        store cannot be read at all.
        """
        if public_key is not None:
            key = load_public_key(Path(public_key))
        elif self.key_path.is_file():
            key = load_public_key(self.key_path)
        else:
            key = None
        try:
            with self._locked(fcntl.LOCK_SH):
                return verify_store(self.log_path, self.head_path, self.blob_dir, anchor, check_blobs, key)
        except OSError as exc:
            raise _oserror("verify", self.path, exc) from exc

    def _line_start(self, fd: int, size: int) -> int:
        """Offset just after the last newline before ``size`` (0 if none), looking back at most one record."""
        pos = size
        while pos > 0:
            if size - pos > MAX_RECORD_BYTES:
                raise StoreDamaged(
                    f"{self.log_path}: the last {size - pos} bytes hold no newline: not an interrupted record",
                    hint="run `ringfence evidence verify`; repair removes only what a crash can leave",
                )
            step = min(_TAIL_STEP, pos)
            nl = os.pread(fd, step, pos - step).rfind(b"\n")
            if nl >= 0:
                return pos - step + nl + 1
            pos -= step
        return 0

    def repair(self) -> EvidenceId | None:
        """Remove an incomplete last line (kept as a blob), adopt unsigned records, record a ``note``.

        Returns the note's id, or None if there was nothing to repair. Only an incomplete trailing
        line that a crash can leave is ever removed: it is refused (:class:`StoreDamaged`) when the
        head file or the signed checkpoint say a later record was committed, when the fragment is a
        whole record that lost its newline, or when it is longer than any record — those are
        tampering or damage for :meth:`verify` to report, and removing them would hide it. Complete
        records after the last signed checkpoint (a crash between an append and its signature, or a
        store from before signed checkpoints) are *adopted*: signed again, and named in the note, so
        an auditor sees what was accepted; a checkpoint that names another hash for its record is
        refused, never adopted.
        """
        try:
            with self._locked(fcntl.LOCK_EX):
                fd = os.open(self.log_path, os.O_RDWR | os.O_APPEND)
                try:
                    size = os.fstat(fd).st_size
                    complete = size == 0 or os.pread(fd, 1, size - 1) == b"\n"
                    cut = size if complete else self._line_start(fd, size)
                    last = self._tail(fd, cut)
                    signer = self.signer()
                    refuse_if_committed(self.log_path, self.head_path, self.path, signer.public_key, last)
                    adopted = unsigned_tail(self.log_path, self.path, signer.public_key, last)
                    if complete and adopted is None:
                        return None
                    note: dict[str, Any] = {}
                    inputs: dict[str, str] = {}
                    if not complete:
                        fragment = os.pread(fd, size - cut, cut)
                        refuse_if_record(self.log_path, fragment, last)
                        digest, _ = self._store_blob(fragment)
                        os.ftruncate(fd, cut)
                        os.fsync(fd)
                        note |= {"action": "removed an incomplete trailing line", "offset": cut,
                                 "removed_bytes": len(fragment), "blob": digest}
                        inputs["fragment"] = digest
                    if adopted is not None:
                        note |= {"adopted_unsigned": {"from_seq": adopted[0], "to_seq": last.seq,
                                                      "checkpoint": adopted[1]}}
                        note.setdefault("action", "adopted records not covered by a signed checkpoint")
                finally:
                    os.close(fd)
                entry = NewRecord(RecordKind.NOTE, "ringfence.evidence.repair", LOG, note, inputs)
                return self._append_locked([entry], adopt=True)[0]
        except OSError as exc:
            raise _oserror("repair", self.log_path, exc) from exc


__all__ = ["BLOBS", "HEAD", "LOCK", "LOG", "Clock", "EvidenceStore", "NewRecord", "default_store_path", "format_time"]
