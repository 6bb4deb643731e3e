"""The small-message path: schedules of records up to 32 KiB run on the calling thread, no sender thread.

It must be as correct and as fail-closed as the pipelined path (same wire format, same checks), must not
deadlock at its size limit, and must not overtake point-to-point records still queued on the sender thread.
"""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from ringfence.secure.transport import Group, TransportError
from ringfence.secure.transport.engine import (
    Recv,
    chain_broadcast,
    ring_allgather,
    ring_allreduce,
    ring_reduce_scatter,
)
from ringfence.secure.transport.reduce import make_reducer

Ranks = Callable[..., list[object]]
_SUM = make_reducer("float32", "SUM")
_INLINE_LIMIT = 32 << 10  # engine._INLINE_MAX, restated: the test pins the documented limit


def _sender_used(g: Group) -> bool:
    return g._last_job is not None  # the newest job handed to the sender thread, None if it never got one


@pytest.mark.parametrize(
    ("world", "n"),
    # 1 element; 4 KiB; 64 KiB with 2 ranks and 96 KiB with 3 (records of exactly the limit, where
    # a ring step sends a whole record before the peer reads: it must fit the kernel's buffers)
    [(2, 1), (2, 1024), (2, _INLINE_LIMIT // 2), (3, 1000), (3, 3 * _INLINE_LIMIT // 4)],
)
def test_small_collectives_run_inline_and_are_correct(pki_home: Any, ranks: Ranks, world: int, n: int) -> None:
    def fn(rank: int, g: Group) -> object:
        out = []
        for _ in range(5):  # back to back: each rank's sends of one collective race the peers' reads
            a = np.arange(n, dtype=np.float32) * (rank + 1)
            g.run(*ring_allreduce(a.data.cast("B"), 4, rank, world, g.chunk), _SUM)
            out.append(a)
        m = min(n, _INLINE_LIMIT // 4)  # a broadcast is one record per chunk, not one per segment
        b = np.arange(m, dtype=np.int32) if rank == 0 else np.zeros(m, dtype=np.int32)
        g.run(*chain_broadcast(b.data.cast("B"), 0, rank, world, g.chunk))
        blocks = [np.zeros(64, dtype=np.float64) for _ in range(world)]
        blocks[rank][:] = rank
        g.run(*ring_allgather([x.data.cast("B") for x in blocks], rank, world, g.chunk))
        rs = np.concatenate([np.full(5, 10 * r + rank, dtype=np.float32) for r in range(world)])
        g.run(*ring_reduce_scatter(rs.data.cast("B"), 4, rank, world, g.chunk), _SUM)
        return out, b, blocks, rs.reshape(world, 5)[rank], _sender_used(g)

    results = ranks([pki_home.config(r) for r in range(world)], fn)
    total = sum(range(1, world + 1))
    for rank, res in enumerate(results):
        assert isinstance(res, tuple), res
        out, b, blocks, mine, used = res
        for a in out:
            np.testing.assert_array_equal(a, np.arange(n, dtype=np.float32) * total)
        np.testing.assert_array_equal(b, np.arange(min(n, _INLINE_LIMIT // 4)))
        assert [int(x[0]) for x in blocks] == list(range(world))
        np.testing.assert_array_equal(mine, np.full(5, 10 * rank * world + sum(range(world))))
        assert not used, f"rank {rank}: a small schedule went through the sender thread"


def test_larger_records_still_use_the_sender_thread(pki_home: Any, ranks: Ranks) -> None:
    def fn(rank: int, g: Group) -> object:
        a = np.ones(_INLINE_LIMIT // 2 + 4, dtype=np.float32)  # records of 32 KiB + 8 bytes
        g.run(*ring_allreduce(a.data.cast("B"), 4, rank, 2, g.chunk), _SUM)
        return a, _sender_used(g)

    for res in ranks([pki_home.config(r) for r in range(2)], fn):
        assert isinstance(res, tuple), res
        np.testing.assert_array_equal(res[0], 2)
        assert res[1]


def test_queued_point_to_point_records_are_not_overtaken(pki_home: Any, ranks: Ranks) -> None:
    """A small collective issued while the sender thread still has p2p records must go after them."""
    n = 400_000  # 1.6 MB: more than the socket buffers hold, so rank 0's sender is still busy below

    def fn(rank: int, g: Group) -> object:
        small = np.full(8, rank + 1, dtype=np.float32)
        if rank == 0:
            sent = threading.Event()
            errors: list[TransportError | None] = []

            def done(err: TransportError | None) -> None:
                errors.append(err)
                sent.set()

            g.send_async(1, g.chunks_of(np.arange(n, dtype=np.float32).data.cast("B")), done)
            g.run(*ring_allreduce(small.data.cast("B"), 4, rank, 2, g.chunk), _SUM)
            assert sent.wait(10) and errors == [None], errors
            return small, None
        time.sleep(0.2)  # let rank 0's sender fill the socket buffers and block
        got = np.zeros(n, dtype=np.float32)
        g.run([], [Recv(0, c) for c in g.chunks_of(got.data.cast("B"))])
        g.run(*ring_allreduce(small.data.cast("B"), 4, rank, 2, g.chunk), _SUM)
        return small, got

    out = ranks([pki_home.config(r) for r in range(2)], fn)
    for res in out:
        assert isinstance(res, tuple), res
        np.testing.assert_array_equal(res[0], 3)
    assert isinstance(out[1], tuple)
    np.testing.assert_array_equal(out[1][1], np.arange(n, dtype=np.float32))


def _small_allreduce(rank: int, g: Group) -> object:
    a = np.full(2_000, rank + 1, dtype=np.float32)  # 8 KB: records of 4 KB, inline
    for _ in range(3):
        a[:] = rank + 1
        g.run(*ring_allreduce(a.data.cast("B"), 4, rank, g.world, g.chunk), _SUM)
    return a


def _expect_all_fail(results: list[object], needle: str) -> list[TransportError]:
    errs = []
    for rank, r in enumerate(results):
        assert isinstance(r, TransportError), f"rank {rank} did not fail closed: {r!r}"
        errs.append(r)
    text = " | ".join(e.message for e in errs)
    assert needle in text, f"{needle!r} not in {text!r}"
    return errs


def _flip(index: int, header: bytes, body: bytes) -> list[bytes] | None:
    if index == 2:
        body = body[:10] + bytes([body[10] ^ 1]) + body[11:]
    return [header + body]


def _replay(index: int, header: bytes, body: bytes) -> list[bytes] | None:
    return [header + body, header + body] if index == 2 else [header + body]


def _epoch(index: int, header: bytes, body: bytes) -> list[bytes] | None:
    if index == 2:
        header = header[:8] + struct.pack(">I", 7) + header[12:]
    return [header + body]


def _truncate(index: int, header: bytes, body: bytes) -> list[bytes] | None:
    return [header + body[: len(body) // 2], b""] if index == 2 else [header + body]


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (_flip, "authentication tag failed on record from rank 1"),
        (_replay, "replayed record from rank 1"),
        (_epoch, "unknown epoch 7"),
        (_truncate, "truncated record from rank 1"),
    ],
    ids=["bad-tag", "replay", "unknown-epoch", "truncated"],
)
def test_tampering_on_the_inline_path_aborts_every_rank(
    pki_home: Any, ranks: Ranks, tamper: Callable[..., None], store: Any, mutate: Any, needle: str
) -> None:
    tamper(store, mutate)
    errs = _expect_all_fail(ranks([pki_home.config(r) for r in range(2)], _small_allreduce, store=store), needle)
    assert errs[0].peer == 1


def test_a_reducer_bug_on_the_inline_path_aborts_every_rank(pki_home: Any, ranks: Ranks) -> None:
    def broken(dst: memoryview, src: memoryview) -> None:
        raise ValueError("reducer bug")

    def fn(rank: int, g: Group) -> object:
        a = np.ones(64, dtype=np.float32)
        g.run(*ring_allreduce(a.data.cast("B"), 4, rank, 2, g.chunk), broken if rank == 0 else _SUM)
        return a

    errs = _expect_all_fail(
        ranks([pki_home.config(r) for r in range(2)], fn), "internal error: ValueError('reducer bug')"
    )
    stopped = ("rank 0 aborted the collective", "closed under us", "connection to rank 0")
    assert any(m in errs[1].message for m in stopped), errs[1].message
