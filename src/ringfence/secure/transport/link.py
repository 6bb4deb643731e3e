"""One authenticated-encrypted connection to one peer rank: records in, records out, fail closed.

The boundary of the transport's socket family: OS errors and timeouts become :class:`TransportError`
naming the peer here.
"""

from __future__ import annotations

import socket
import struct
import threading

from ringfence.secure.transport.wire import (
    HEADER_SIZE,
    TAG_SIZE,
    LinkBroken,
    RecordError,
    RecordType,
    RxState,
    StreamClosed,
    TransportError,
    TxState,
    pack_header,
    unpack_header,
)


def recv_exact(sock: socket.socket, out: memoryview, *, peer: int, what: str) -> None:
    """Fill ``out`` from ``sock``; an early end of stream is a truncated record."""
    got, n = 0, len(out)
    while got < n:
        try:
            k = sock.recv_into(out[got:], n - got)
        except (TimeoutError, BlockingIOError):  # BlockingIOError: SO_RCVTIMEO expired
            raise TransportError(f"timed out waiting for {what} from rank {peer}", peer=peer) from None
        except OSError as exc:
            raise _broken(peer, exc) from exc
        if k == 0:
            raise _ended(peer, got, n, what)
        got += k


def _ended(peer: int, got: int, n: int, what: str) -> RecordError:
    """The stream ended after ``got`` of the ``n`` bytes of ``what``: closed between records, or a record cut."""
    if got == 0 and what == "a record header":
        return StreamClosed(
            f"connection to rank {peer} was closed (rank {peer} aborted, or the connection was cut)", peer=peer
        )
    return RecordError(f"truncated record from rank {peer}: the stream ended after {got} of {n} bytes of {what}",
                       peer=peer)  # fmt: skip


def recv_header(sock: socket.socket, buf: memoryview, *, peer: int) -> int:
    """Read at least a record header into ``buf`` and at most ``len(buf)`` bytes; returns how many arrived.

    Reading past the header in the same call saves the second system call per record when the whole
    record is already in the kernel. ``buf`` must be no longer than the record the caller expects, so
    that a well-formed stream is never read past that record; anything else is refused once the
    header is parsed, and the group aborts.
    """
    got = 0
    while got < HEADER_SIZE:
        try:
            k = sock.recv_into(buf[got:])
        except (TimeoutError, BlockingIOError):  # BlockingIOError: SO_RCVTIMEO expired
            raise TransportError(f"timed out waiting for a record header from rank {peer}", peer=peer) from None
        except OSError as exc:
            raise _broken(peer, exc) from exc
        if k == 0:
            raise _ended(peer, got, HEADER_SIZE, "a record header")
        got += k
    return got


def send_all(sock: socket.socket, data: memoryview | bytes, *, peer: int) -> None:
    """Send everything or raise :class:`TransportError` naming the peer."""
    try:
        sock.sendall(data)
    except (TimeoutError, BlockingIOError):  # BlockingIOError: SO_SNDTIMEO expired
        raise TransportError(f"timed out sending to rank {peer}", peer=peer) from None
    except OSError as exc:
        raise _broken(peer, exc) from exc


def _broken(peer: int, exc: OSError) -> TransportError:
    if isinstance(exc, BrokenPipeError | ConnectionResetError):
        return LinkBroken(
            f"connection to rank {peer} failed ({exc.strerror}): it was closed under us — rank {peer} does that "
            "when it aborts the collective, and so does anyone cutting the connection",
            peer=peer,
        )
    return TransportError(f"connection to rank {peer} failed: {exc.strerror or exc}", peer=peer)


def send_plain(sock: socket.socket, rtype: RecordType, body: bytes, *, peer: int) -> None:
    """A handshake record (plaintext body)."""
    send_all(sock, pack_header(rtype, 0, 0, len(body)) + body, peer=peer)


def recv_plain(sock: socket.socket, *, peer: int, limit: int = 1 << 16) -> tuple[RecordType, bytes]:
    """A handshake record: (type, body)."""
    hdr = bytearray(HEADER_SIZE)
    recv_exact(sock, memoryview(hdr), peer=peer, what="a record header")
    kind, _epoch, _seq, length = unpack_header(hdr, peer=peer)
    if length > limit:
        raise RecordError(f"handshake record of {length} bytes from rank {peer} (limit {limit})", peer=peer)
    body = bytearray(length)
    recv_exact(sock, memoryview(body), peer=peer, what="a handshake record")
    return kind, bytes(body)


class Link:
    """The protected connection to ``peer``: one TCP stream, one key ratchet per direction.

    Sending is serialised by ``tx_lock`` (the pipeline's sender thread and an abort notice may both
    send); receiving happens on one thread at a time by construction of the collectives.
    """

    def __init__(
        self,
        sock: socket.socket,
        *,
        rank: int,
        peer: int,
        peer_identity: str,
        peer_fingerprint: str,
        tx: TxState,
        rx: RxState,
        max_chunk: int,
    ) -> None:
        self.sock = sock
        self.rank = rank
        self.peer = peer
        self.peer_identity = peer_identity
        self.peer_fingerprint = peer_fingerprint
        self.tx = tx
        self.rx = rx
        self.tx_lock = threading.Lock()
        self._txbuf = bytearray(HEADER_SIZE + max_chunk + TAG_SIZE)
        self._tx = memoryview(self._txbuf)
        # one received record, header included: header and body usually arrive in one recv_into
        self._rxbuf = bytearray(HEADER_SIZE + max_chunk + TAG_SIZE)
        self._rx = memoryview(self._rxbuf)
        self.max_chunk = max_chunk

    def send(self, data: memoryview | bytes, rtype: RecordType = RecordType.DATA) -> None:
        """Seal ``data`` (at most ``max_chunk`` bytes) into one record and send it."""
        with self.tx_lock:
            n = self.tx.seal_into(rtype, data, self._tx)
            send_all(self.sock, self._tx[:n], peer=self.peer)

    def recv_into(self, out: memoryview) -> None:
        """Receive the next DATA record, which must carry exactly ``len(out)`` bytes, into ``out``."""
        want = HEADER_SIZE + len(out) + TAG_SIZE
        buf = self._rx
        got = recv_header(self.sock, buf[:want], peer=self.peer)
        epoch, seq = self._data_header(len(out), got)
        if got < want:
            recv_exact(self.sock, buf[got:want], peer=self.peer, what="a record body")
        self.rx.open_into(bytes(buf[:HEADER_SIZE]), epoch, seq, buf[HEADER_SIZE:want], out, peer=self.peer)

    def _data_header(self, size: int, got: int) -> tuple[int, int]:
        """Check the header in ``_rx`` (``got`` bytes of the record read) as a DATA record of ``size`` bytes
        that may be received now: its epoch and sequence. A peer's ABORT record raises its reason."""
        kind, epoch, seq, length = unpack_header(self._rx[:HEADER_SIZE], peer=self.peer)
        if kind is RecordType.ABORT:
            raise self._abort_reason(epoch, seq, length, got)
        if kind is not RecordType.DATA:
            raise RecordError(
                f"unexpected {kind.name} record from rank {self.peer} during a collective", peer=self.peer
            )
        if length != size + TAG_SIZE:
            raise RecordError(
                f"record from rank {self.peer} carries {length - TAG_SIZE} bytes where {size} were expected "
                "(truncated record, or the ranks disagree on the collective)",
                peer=self.peer,
            )
        self.rx.check(epoch, seq, peer=self.peer)
        return epoch, seq

    # --- without blocking: the polled engine moves records as the sockets take and give them ---------------

    def begin_send(self, data: memoryview | bytes) -> memoryview:
        """Seal ``data`` into this link's send buffer and return the record; the link's sending is held
        (``tx_lock``) until :meth:`end_send`, so no other record (an abort notice) lands inside it."""
        self.tx_lock.acquire()
        try:
            n = self.tx.seal_into(RecordType.DATA, data, self._tx)
        except BaseException:
            self.tx_lock.release()
            raise
        return self._tx[:n]

    def send_some(self, record: memoryview) -> int:
        """Write as much of ``record`` as the socket takes now (never blocks): the bytes written."""
        try:
            return self.sock.send(record, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return 0
        except OSError as exc:
            raise _broken(self.peer, exc) from exc

    def end_send(self) -> None:
        """The record from :meth:`begin_send` is written whole."""
        self.tx_lock.release()

    def recv_some(self, out: memoryview, got: int) -> int:
        """Read what has arrived of the next DATA record for ``out`` (never blocks), ``got`` bytes of it held.

        Returns how many bytes of the record are held now; once that is the whole record it was checked,
        verified and decrypted into ``out``. Never reads past the record, and checks its header as soon as
        the header is in, exactly as :meth:`recv_into` does.
        """
        want = HEADER_SIZE + len(out) + TAG_SIZE
        buf = self._rx
        try:
            k = self.sock.recv_into(buf[got:want], want - got, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return got
        except OSError as exc:
            raise _broken(self.peer, exc) from exc
        if k == 0:
            if got < HEADER_SIZE:
                raise _ended(self.peer, got, HEADER_SIZE, "a record header")
            raise _ended(self.peer, got - HEADER_SIZE, want - HEADER_SIZE, "a record body")
        before, got = got, got + k
        if before < HEADER_SIZE <= got:
            self._data_header(len(out), got)
        if got == want:
            _kind, epoch, seq, _length = unpack_header(buf[:HEADER_SIZE], peer=self.peer)
            self.rx.open_into(bytes(buf[:HEADER_SIZE]), epoch, seq, buf[HEADER_SIZE:want], out, peer=self.peer)
        return got

    def recv_record(self, rtype: RecordType) -> bytes:
        """Receive the next protected record of type ``rtype`` (small control messages)."""
        buf = self._rx
        got = recv_header(self.sock, buf[:HEADER_SIZE], peer=self.peer)
        kind, epoch, seq, length = unpack_header(buf[:HEADER_SIZE], peer=self.peer)
        if kind is RecordType.ABORT:
            raise self._abort_reason(epoch, seq, length, got)
        if kind is not rtype or length < TAG_SIZE or HEADER_SIZE + length > len(buf):
            raise RecordError(f"unexpected {kind.name} record of {length} bytes from rank {self.peer}", peer=self.peer)
        self.rx.check(epoch, seq, peer=self.peer)
        end = HEADER_SIZE + length
        recv_exact(self.sock, buf[HEADER_SIZE:end], peer=self.peer, what="a record body")
        out = bytearray(length - TAG_SIZE)
        self.rx.open_into(bytes(buf[:HEADER_SIZE]), epoch, seq, buf[HEADER_SIZE:end], memoryview(out), peer=self.peer)
        return bytes(out)

    def abort_notice(self, grace: float) -> TransportError | None:
        """After a send found the connection closed: the peer's ABORT notice, if it sent one first.

        Called at a record boundary. Reads what is left on the connection for at most ``grace`` seconds
        per read: DATA records the peer sent before aborting are verified and discarded, an ABORT record
        gives its reason, and a record that fails (cut short, a bad tag, out of sequence) gives that
        error. Nothing within ``grace``, or the stream closed between records, gives None. The group is aborted
        and this link closed right after, so consuming records here changes nothing a collective sees.
        """
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 0, int(grace * 1e6)))
            buf = self._rx
            for _ in range(64):
                got = recv_header(self.sock, buf[:HEADER_SIZE], peer=self.peer)
                kind, epoch, seq, length = unpack_header(buf[:HEADER_SIZE], peer=self.peer)
                if kind is RecordType.ABORT:
                    return self._abort_reason(epoch, seq, length, got)
                if kind is not RecordType.DATA or length < TAG_SIZE or HEADER_SIZE + length > len(buf):
                    return None
                self.rx.check(epoch, seq, peer=self.peer)
                end = HEADER_SIZE + length
                recv_exact(self.sock, buf[HEADER_SIZE:end], peer=self.peer, what="a record body")
                discard = memoryview(bytearray(length - TAG_SIZE))
                self.rx.open_into(bytes(buf[:HEADER_SIZE]), epoch, seq, buf[HEADER_SIZE:end], discard, peer=self.peer)
        except StreamClosed:
            return None  # closed between records: the caller's own error stands
        except RecordError as err:
            # what the peer's stream itself shows — a record cut short, one failing its tag or sequence — is
            # the cause where a broken pipe only says the connection went (the receiving side would meet it)
            return err
        except (OSError, TransportError):
            return None  # the connection says nothing more within the grace period
        return None

    def _abort_reason(self, epoch: int, seq: int, length: int, got: int) -> TransportError:
        """The header in ``_rx`` is an ABORT record's; ``got`` bytes of the record were read already."""
        if length < TAG_SIZE or length > 4096 + TAG_SIZE:
            raise RecordError(f"malformed ABORT record from rank {self.peer}", peer=self.peer)
        self.rx.check(epoch, seq, peer=self.peer)
        end = HEADER_SIZE + length
        buf = self._rx
        if got < end:
            recv_exact(self.sock, buf[got:end], peer=self.peer, what="an abort notice")
        out = bytearray(length - TAG_SIZE)
        self.rx.open_into(bytes(buf[:HEADER_SIZE]), epoch, seq, buf[HEADER_SIZE:end], memoryview(out), peer=self.peer)
        reason = out.decode(errors="replace")
        return TransportError(f"rank {self.peer} aborted the collective: {reason}", peer=self.peer)

    def notify_abort(self, reason: str) -> None:
        """Best effort: tell the peer why we abort (skipped if a send is in flight on this link)."""
        if not self.tx_lock.acquire(timeout=0.2):
            return
        try:
            self.sock.settimeout(1.0)
            data = reason.encode()[:4096]
            n = self.tx.seal_into(RecordType.ABORT, data, self._tx)
            self.sock.sendall(self._tx[:n])
        except (OSError, TransportError):
            pass  # the peer is gone or the link is already broken: closing it below tells it as well
        finally:
            self.tx_lock.release()

    def close(self) -> None:
        """Shut the connection down (wakes any thread blocked on it)."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # already disconnected
        self.sock.close()


__all__ = ["Link", "recv_exact", "recv_header", "recv_plain", "send_all", "send_plain"]
