"""What a link reads after a send found its connection closed (``Link.abort_notice``), from real records.

The peer's records are sealed by a real :class:`Link` and handed over a socket pair, cut or altered on
the way: the reason given must be what the stream shows — the peer's ABORT, a record cut short, a bad
tag — and nothing when the stream simply closed between records (the caller's broken pipe stands).
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator

import pytest

from ringfence.secure.transport.link import Link
from ringfence.secure.transport.wire import RecordError, RecordType, RxState, TxState

_CHAIN = bytes(range(32))


def _link(sock: socket.socket, rank: int, peer: int) -> Link:
    return Link(sock, rank=rank, peer=peer, peer_identity=f"rank-{peer}", peer_fingerprint="sha256:x",
                tx=TxState(_CHAIN, 1 << 40, 1e9), rx=RxState(_CHAIN), max_chunk=1 << 16)


def _sent_by_peer(*records: tuple[RecordType, bytes]) -> bytes:
    """The bytes rank 1's link puts on the wire for ``records``."""
    mine, theirs = socket.socketpair()
    with mine, theirs:
        peer = _link(mine, 1, 0)
        for rtype, body in records:
            peer.send(body, rtype)
        mine.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := theirs.recv(1 << 16):
            out += chunk
    return out


@pytest.fixture()
def receiver() -> Iterator[Callable[[bytes], Link]]:
    """``receiver(wire)``: rank 0's link, ``wire`` waiting on its socket and the peer's side closed after it."""
    pairs: list[tuple[socket.socket, socket.socket]] = []

    def make(wire: bytes) -> Link:
        mine, theirs = socket.socketpair()
        pairs.append((mine, theirs))
        theirs.sendall(wire)
        theirs.close()
        return _link(mine, 0, 1)

    yield make
    for mine, theirs in pairs:
        mine.close()
        theirs.close()


def test_a_record_cut_short_is_the_reason(receiver: Callable[[bytes], Link]) -> None:
    wire = _sent_by_peer((RecordType.DATA, b"a" * 4000), (RecordType.DATA, b"b" * 4000))
    reason = receiver(wire[: len(wire) - 2000]).abort_notice(0.5)
    assert isinstance(reason, RecordError) and reason.peer == 1
    assert reason.message.startswith("truncated record from rank 1"), reason.message


def test_a_record_with_a_bad_tag_is_the_reason(receiver: Callable[[bytes], Link]) -> None:
    wire = bytearray(_sent_by_peer((RecordType.DATA, b"a" * 4000)))
    wire[-1] ^= 0x01
    reason = receiver(bytes(wire)).abort_notice(0.5)
    assert isinstance(reason, RecordError) and "rank 1" in reason.message


def test_the_peers_abort_is_the_reason_after_its_good_records(receiver: Callable[[bytes], Link]) -> None:
    wire = _sent_by_peer((RecordType.DATA, b"a" * 4000), (RecordType.ABORT, b"reducer bug"))
    reason = receiver(wire).abort_notice(0.5)
    assert reason is not None and reason.message == "rank 1 aborted the collective: reducer bug"


def test_a_stream_closed_between_records_gives_no_reason(receiver: Callable[[bytes], Link]) -> None:
    """Good records, then the close: nothing to add to the caller's broken pipe."""
    assert receiver(_sent_by_peer((RecordType.DATA, b"a" * 4000))).abort_notice(0.5) is None
    assert receiver(b"").abort_notice(0.5) is None
