"""The ``RFT1`` record format and the per-direction AEAD state with its key ratchet.

Every record on a ringfence-transport connection is::

    offset  size  field
    0       4     magic  b"RFT1"
    4       1     type   (HELLO 1, AUTH 2, ALERT 3, DATA 16, ABORT 17, FINISHED 18)
    5       1     flags  (0)
    6       2     reserved (0)
    8       4     epoch  (big-endian; key generation of this direction)
    12      8     seq    (big-endian; per direction, +1 per protected record, never reset)
    20      4     length (big-endian; bytes that follow: ciphertext + 16-byte tag, or handshake body)
    24      …     body

The 24-byte header is the AEAD associated data; the 12-byte nonce is ``epoch ‖ seq``. Because
``seq`` never repeats in a direction and every epoch has its own key, a (key, nonce) pair is never
used twice. Handshake records (HELLO, AUTH, ALERT) carry a plaintext body and use epoch 0, seq 0.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand

from ringfence.errors import RingfenceError

MAGIC = b"RFT1"
HEADER = struct.Struct(">4sBBHIQI")
HEADER_SIZE = HEADER.size  # 24
TAG_SIZE = 16
#: The largest body a receiver accepts; a header announcing more is an attack or a bug.
MAX_BODY = (64 << 20) + TAG_SIZE
_NONCE = struct.Struct(">IQ")
_MAX_SEQ = (1 << 64) - 1
_MAX_EPOCH = (1 << 32) - 1


class RecordType(IntEnum):
    """The ``type`` byte of a record."""

    HELLO = 1
    AUTH = 2
    ALERT = 3
    DATA = 16
    ABORT = 17
    FINISHED = 18


class TransportError(RingfenceError):
    """The secure transport failed closed: the collective is aborted, never continued in plaintext.

    ``peer`` is the rank the failure concerns (None when it is not about one peer).
    """

    def __init__(self, message: str, *, peer: int | None = None, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.peer = peer


class LinkBroken(TransportError):
    """The connection to a peer was reset or closed under a send: the peer aborted, or someone cut it."""


class RecordError(TransportError):
    """A record failed verification: bad magic, bad tag, replay, reorder, truncation, unknown epoch."""


class StreamClosed(RecordError):
    """The stream ended between two records: the peer closed it (as it does when it aborts), or it was cut."""


@dataclass(frozen=True)
class KeyEvent:
    """A key lifecycle event for the evidence store (never key material)."""

    time: float
    event: str  # "handshake" | "rekey" | "abort" | "close"
    rank: int
    peer: int
    direction: str  # "tx" | "rx" | "both"
    epoch: int
    detail: str = ""

    def as_dict(self) -> dict[str, object]:
        """JSON-ready form."""
        return {
            "time": self.time,
            "event": self.event,
            "rank": self.rank,
            "peer": self.peer,
            "direction": self.direction,
            "epoch": self.epoch,
            "detail": self.detail,
        }


def pack_header(rtype: RecordType, epoch: int, seq: int, length: int) -> bytes:
    """The 24-byte header (the AEAD associated data)."""
    return HEADER.pack(MAGIC, rtype, 0, 0, epoch, seq, length)


def unpack_header(data: bytes | bytearray | memoryview, *, peer: int) -> tuple[RecordType, int, int, int]:
    """(type, epoch, seq, length) of a header; :class:`RecordError` when it is not an RFT1 header."""
    magic, rtype, flags, reserved, epoch, seq, length = HEADER.unpack(data)
    if magic != MAGIC or flags or reserved:
        raise RecordError(f"stream from rank {peer} is not RFT1 records (got {bytes(data[:8])!r})", peer=peer)
    try:
        kind = RecordType(rtype)
    except ValueError:
        raise RecordError(f"unknown record type {rtype} from rank {peer}", peer=peer) from None
    if length > MAX_BODY:
        raise RecordError(f"record from rank {peer} announces {length} bytes (limit {MAX_BODY})", peer=peer)
    return kind, epoch, seq, length


def _expand(secret: bytes, label: bytes) -> bytes:
    return HKDFExpand(hashes.SHA256(), 32, b"ringfence-transport v1 " + label).derive(secret)


def derive_chains(shared: bytes, transcript: bytes) -> tuple[bytes, bytes]:
    """(initiator→responder, responder→initiator) epoch-0 chain keys from the X25519 secret.

    HKDF-Extract with the handshake transcript hash as salt binds the keys to both certificates and
    both ephemeral keys; HKDF-Expand with a per-direction label separates the directions.
    """
    from cryptography.hazmat.primitives import hmac

    h = hmac.HMAC(transcript, hashes.SHA256())
    h.update(shared)
    prk = h.finalize()
    return _expand(prk, b"chain i->r"), _expand(prk, b"chain r->i")


class _Direction:
    """Key ratchet of one direction: epoch key = HKDF(chain, "key"); next chain = HKDF(chain, "ratchet").

    The chain is one-way, so a key of a later epoch reveals nothing of an earlier one; references to
    old keys are dropped when a new epoch is installed (Python cannot promise to wipe memory, but no
    ringfence object keeps an old key).
    """

    def __init__(self, chain: bytes) -> None:
        self.epoch = 0
        self.seq = 0
        self._chain = chain
        self.aead = AESGCM(_expand(chain, b"key"))
        self.bytes_in_epoch = 0
        self.epoch_started = time.monotonic()

    def next_keys(self) -> tuple[bytes, AESGCM]:
        """The chain and cipher of ``epoch + 1`` (not installed)."""
        chain = _expand(self._chain, b"ratchet")
        return chain, AESGCM(_expand(chain, b"key"))

    def install(self, chain: bytes, aead: AESGCM) -> None:
        """Make the next epoch current and forget the old keys."""
        if self.epoch >= _MAX_EPOCH:
            raise TransportError("epoch counter exhausted; a new handshake is needed")
        self._chain, self.aead = chain, aead
        self.epoch += 1
        self.bytes_in_epoch = 0
        self.epoch_started = time.monotonic()


class TxState(_Direction):
    """Sending side: seals records into a caller's buffer, rekeying by bytes or time."""

    def __init__(
        self, chain: bytes, rekey_bytes: int, rekey_seconds: float, on_rekey: Callable[[int], None] | None = None
    ) -> None:
        super().__init__(chain)
        self.rekey_bytes = rekey_bytes
        self.rekey_seconds = rekey_seconds
        self._on_rekey = on_rekey

    def seal_into(self, rtype: RecordType, data: bytes | bytearray | memoryview, out: memoryview) -> int:
        """Write header + ciphertext + tag of ``data`` into ``out``; returns the record size."""
        if self.bytes_in_epoch >= self.rekey_bytes or time.monotonic() - self.epoch_started >= self.rekey_seconds:
            self.install(*self.next_keys())
            if self._on_rekey is not None:
                self._on_rekey(self.epoch)
        if self.seq >= _MAX_SEQ:
            raise TransportError("sequence number exhausted; a new handshake is needed")
        n = len(data)
        header = pack_header(rtype, self.epoch, self.seq, n + TAG_SIZE)
        out[:HEADER_SIZE] = header
        self.aead.encrypt_into(
            _NONCE.pack(self.epoch, self.seq), data, header, out[HEADER_SIZE : HEADER_SIZE + n + TAG_SIZE]
        )
        self.seq += 1
        self.bytes_in_epoch += n
        return HEADER_SIZE + n + TAG_SIZE


class RxState(_Direction):
    """Receiving side: accepts exactly the next sequence number, in the current or the next epoch."""

    def __init__(self, chain: bytes, on_rekey: Callable[[int], None] | None = None) -> None:
        super().__init__(chain)
        self._on_rekey = on_rekey

    def check(self, epoch: int, seq: int, *, peer: int) -> None:
        """Refuse a replayed, reordered or unknown-epoch record before any decryption."""
        if seq < self.seq:
            raise RecordError(
                f"replayed record from rank {peer}: sequence {seq} was already received (expected {self.seq})",
                peer=peer,
            )
        if seq > self.seq:
            raise RecordError(
                f"reordered or dropped record from rank {peer}: sequence {seq} arrived, expected {self.seq}",
                peer=peer,
            )
        if epoch not in (self.epoch, self.epoch + 1):
            raise RecordError(f"record from rank {peer} has unknown epoch {epoch} (current {self.epoch})", peer=peer)

    def open_into(self, header: bytes, epoch: int, seq: int, body: memoryview, out: memoryview, *, peer: int) -> None:
        """Verify and decrypt ``body`` (ciphertext + tag) into ``out``; a next-epoch key is installed
        only after its first record verified."""
        self.check(epoch, seq, peer=peer)
        if len(body) != len(out) + TAG_SIZE or len(header) != HEADER_SIZE:
            raise RecordError(
                f"record from rank {peer} has {len(body)} bytes of body where {len(out) + TAG_SIZE} were expected",
                peer=peer,
            )
        nonce = _NONCE.pack(epoch, seq)
        if epoch == self.epoch:
            aead, pending = self.aead, None
        else:
            pending = self.next_keys()
            aead = pending[1]
        try:
            aead.decrypt_into(nonce, body, header, out)
        except InvalidTag:
            raise RecordError(
                f"authentication tag failed on record from rank {peer} (epoch {epoch}, sequence {seq}): "
                "the data was modified in transit or the keys do not match",
                peer=peer,
            ) from None
        if pending is not None:
            self.install(*pending)
            if self._on_rekey is not None:
                self._on_rekey(self.epoch)
        self.seq += 1
        self.bytes_in_epoch += len(out)


__all__ = [
    "HEADER",
    "HEADER_SIZE",
    "MAGIC",
    "MAX_BODY",
    "TAG_SIZE",
    "KeyEvent",
    "LinkBroken",
    "RecordError",
    "RecordType",
    "RxState",
    "StreamClosed",
    "TransportError",
    "TxState",
    "derive_chains",
    "pack_header",
    "unpack_header",
]
