"""The ringfence transport over real loopback sockets: handshake, collectives, rekey, and failing closed.

Each failure test checks that *every* rank raises :class:`TransportError` with a message naming the
peer and the cause, and that no collective completes.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cryptography.hazmat.primitives import serialization

from ringfence.secure import pki
from ringfence.secure.transport import Group, KeyEvent, TransportConfig, TransportError
from ringfence.secure.transport.engine import chain_broadcast, ring_allgather, ring_allreduce, ring_reduce_scatter
from ringfence.secure.transport.handshake import Credentials, initiate
from ringfence.secure.transport.reduce import make_reducer

Ranks = Callable[..., list[object]]
JOB = "spiffe://lab/job/train-a"
_SUM = make_reducer("float32", "SUM")


def _allreduce(n: int, iters: int = 3) -> Callable[[int, Group], object]:
    def fn(rank: int, g: Group) -> object:
        a = np.full(n, rank + 1, dtype=np.float32)
        for _ in range(iters):
            a[:] = rank + 1
            g.run(*ring_allreduce(a.data.cast("B"), 4, rank, g.world, g.chunk), _SUM)
        return a

    return fn


def _expect_all_fail(results: list[object], *needles: str) -> list[TransportError]:
    errs = []
    for rank, r in enumerate(results):
        assert isinstance(r, TransportError), f"rank {rank} did not fail closed: {r!r}"
        errs.append(r)
    text = " | ".join(e.message for e in errs)
    for needle in needles:
        assert needle in text, f"{needle!r} not in {text!r}"
    return errs


@pytest.mark.parametrize("world", [2, 3])
def test_collectives_are_correct(pki_home: Any, ranks: Ranks, world: int) -> None:
    n = 100_003  # not divisible by world, several chunks of 64 KiB

    def fn(rank: int, g: Group) -> object:
        a = np.arange(n, dtype=np.float32) * (rank + 1)
        g.run(*ring_allreduce(a.data.cast("B"), 4, rank, world, g.chunk), _SUM)
        b = np.arange(n, dtype=np.int64) if rank == 1 else np.zeros(n, dtype=np.int64)
        g.run(*chain_broadcast(b.data.cast("B"), 1, rank, world, g.chunk))
        blocks = [np.zeros(1000, dtype=np.float64) for _ in range(world)]
        blocks[rank][:] = rank
        g.run(*ring_allgather([x.data.cast("B") for x in blocks], rank, world, g.chunk))
        rs = np.concatenate([np.full(7, 10 * r + rank, dtype=np.float32) for r in range(world)])
        g.run(*ring_reduce_scatter(rs.data.cast("B"), 4, rank, world, g.chunk), _SUM)
        return a, b, blocks, rs.reshape(world, 7)[rank]

    results = ranks([pki_home.config(r) for r in range(world)], fn)
    total = sum(range(1, world + 1))
    for rank, res in enumerate(results):
        assert isinstance(res, tuple), res
        a, b, blocks, mine = res
        np.testing.assert_array_equal(a, np.arange(n, dtype=np.float32) * total)
        np.testing.assert_array_equal(b, np.arange(n))
        assert [int(x[0]) for x in blocks] == list(range(world))
        np.testing.assert_array_equal(mine, np.full(7, 10 * rank * world + sum(range(world))))
    assert len(results) == world


def test_rekey_by_bytes_mid_collective(pki_home: Any, ranks: Ranks, events: list[KeyEvent], tmp_path: Path) -> None:
    log = tmp_path / "events.jsonl"
    cfgs = [pki_home.config(r, rekey_bytes=100_000, on_event=events.append, event_log=log) for r in range(2)]
    out = ranks(cfgs, _allreduce(200_000, iters=2))
    for a in out:
        assert isinstance(a, np.ndarray), a
        np.testing.assert_array_equal(a, np.full(200_000, 3, dtype=np.float32))
    rekeys = [e for e in events if e.event == "rekey"]
    # 2 × 800 kB per direction at a new epoch every ~100 kB: several epochs, seen on both sides
    assert {(e.rank, e.direction) for e in rekeys} == {(0, "tx"), (0, "rx"), (1, "tx"), (1, "rx")}
    assert max(e.epoch for e in rekeys) >= 5
    assert [e.epoch for e in rekeys if (e.rank, e.direction) == (0, "rx")] == sorted(
        e.epoch for e in rekeys if (e.rank, e.direction) == (1, "tx")
    )
    assert log.read_text().count('"event": "rekey"') == len(rekeys)
    assert "key" not in "".join(e.detail for e in events)  # events never carry key material


def test_rekey_by_time(pki_home: Any, ranks: Ranks, events: list[KeyEvent]) -> None:
    def fn(rank: int, g: Group) -> object:
        a = np.ones(64, dtype=np.float32)
        for _ in range(3):
            time.sleep(0.06)
            g.run(*ring_allreduce(a.data.cast("B"), 4, rank, 2, g.chunk), _SUM)
        return a

    out = ranks([pki_home.config(r, rekey_seconds=0.05, on_event=events.append) for r in range(2)], fn)
    assert all(isinstance(a, np.ndarray) for a in out), out
    assert len([e for e in events if e.event == "rekey" and e.direction == "rx"]) >= 4


# ---------------------------------------------------------------- handshake refusals
def _rogue_rank1(store: Any, cert_dir: Path, ca: Path, key: Path | None = None) -> TransportError:
    """Dial rank 0 as 'rank 1' with whatever certificate, skipping every local check a real rank makes."""
    cert = pki.load_certificate(cert_dir / "cert.pem")
    creds = Credentials(
        cert,
        cert.public_bytes(serialization.Encoding.DER),
        pki.load_private_key(key or cert_dir / "key.pem"),
        pki.load_certificate(ca),
        frozenset(),
        JOB,
        str(pki.cert_identity(cert)),
    )
    host, _, port = store.get("ringfence/addr/0").decode().rpartition(":")
    sock = socket.create_connection((host, int(port)), timeout=5)
    cfg = TransportConfig(cert=cert_dir / "cert.pem", key=cert_dir / "key.pem", ca=ca)
    with pytest.raises(TransportError) as info:
        initiate(sock, creds, cfg, rank=1, peer=0, world=2, group=store.get("ringfence/session"))
    sock.close()
    return info.value


@pytest.mark.parametrize(
    ("which", "needle"),
    [
        ("other_job", "spiffe://lab/job/other/rank/1 is not the expected spiffe://lab/job/train-a/rank/1"),
        ("foreign", "was not issued by the cluster CA"),
        ("expired", "expired at"),
        ("revoked", "is revoked"),
        ("stolen", "handshake signature does not verify"),
    ],
)
def test_rank_with_bad_certificate_is_refused(pki_home: Any, store: Any, which: str, needle: str) -> None:
    result: list[object] = []

    def rank0() -> None:
        try:
            result.append(Group.connect(store, 0, 2, pki_home.config(0, revoked=pki_home.revocations), timeout=5))
        except TransportError as exc:
            result.append(exc)

    t = threading.Thread(target=rank0, daemon=True)
    t.start()
    if which == "stolen":  # rank 1's real certificate, without its key
        rogue = _rogue_rank1(store, pki_home.rank_dirs[1], pki_home.ca, key=pki_home.rank_dirs[2] / "key.pem")
    else:
        rogue = _rogue_rank1(store, getattr(pki_home, which), pki_home.ca)
    t.join(10)
    assert isinstance(result[0], TransportError), result  # rank 0 does not start with an impostor
    assert needle in result[0].message
    assert "rank 0 refused this rank" in rogue.message and needle in rogue.message


def test_rank_of_another_job_is_refused(pki_home: Any, ranks: Ranks) -> None:
    # a consistent rogue: its own configuration says it belongs to job "other"
    cfg1 = pki_home.config(1, cert_dir=pki_home.other_job)
    out = ranks([pki_home.config(0), cfg1], _allreduce(16))
    errs = _expect_all_fail(out, "is not the expected spiffe://lab/job/train-a/rank/1")
    assert "refused" in errs[1].message


def test_rank_with_the_certificate_of_another_rank_stops_locally(pki_home: Any, ranks: Ranks) -> None:
    out = ranks([pki_home.config(0, timeout=1.0), pki_home.config(1, cert_dir=pki_home.rank_dirs[2])], _allreduce(16))
    errs = _expect_all_fail(out)
    assert "own certificate unusable" in errs[1].message and "rank/2" in errs[1].message
    assert "did not connect" in errs[0].message


def test_wrong_key_for_certificate_is_refused(pki_home: Any, ranks: Ranks) -> None:
    # rank 1 presents its real certificate but cannot sign with its key: a stolen certificate
    cfg1 = pki_home.config(1, key=pki_home.rank_dirs[2] / "key.pem")
    out = ranks([pki_home.config(0, timeout=1.0), cfg1], _allreduce(16))
    assert isinstance(out[1], TransportError) and "is not the key of" in out[1].message
    assert isinstance(out[0], TransportError)


# ---------------------------------------------------------------- record tampering
def _flip(index: int, header: bytes, body: bytes) -> list[bytes] | None:
    if index == 2:
        body = body[:10] + bytes([body[10] ^ 1]) + body[11:]
    return [header + body]


def _replay_factory() -> Callable[[int, bytes, bytes], list[bytes] | None]:
    def replay(index: int, header: bytes, body: bytes) -> list[bytes] | None:
        return [header + body, header + body] if index == 2 else [header + body]

    return replay


def _reorder_factory() -> Callable[[int, bytes, bytes], list[bytes] | None]:
    held: list[bytes] = []

    def reorder(index: int, header: bytes, body: bytes) -> list[bytes] | None:
        if index == 2:
            held.append(header + body)
            return []
        if index == 3:
            return [header + body, *held]
        return [header + body]

    return reorder


def _epoch(index: int, header: bytes, body: bytes) -> list[bytes] | None:
    if index == 2:
        header = header[:8] + struct.pack(">I", 7) + header[12:]
    return [header + body]


def _plaintext(index: int, header: bytes, body: bytes) -> list[bytes] | None:
    # a downgrade attempt: the tensor bytes sent as they are, no record framing
    return [np.ones(len(body) // 4, dtype=np.float32).tobytes()] if index == 2 else [header + body]


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda: _flip, "authentication tag failed on record from rank 1"),
        (_replay_factory, "replayed record from rank 1"),
        (_reorder_factory, "reordered or dropped record from rank 1"),
        (lambda: _epoch, "unknown epoch 7"),
        (lambda: _plaintext, "is not RFT1 records"),
    ],
    ids=["bad-tag", "replay", "reorder", "unknown-epoch", "plaintext"],
)
def test_tampered_record_aborts_every_rank(
    pki_home: Any, ranks: Ranks, tamper: Callable[..., None], store: Any, mutate: Callable[[], Any], needle: str
) -> None:
    tamper(store, mutate())
    out = ranks([pki_home.config(r) for r in range(2)], _allreduce(50_000), store=store)
    errs = _expect_all_fail(out, needle)
    assert errs[0].peer == 1
    assert "rank 0 aborted the collective" in errs[1].message or "rank 0" in errs[1].message


def test_truncated_record_aborts_every_rank(
    pki_home: Any, ranks: Ranks, tamper: Callable[..., None], store: Any
) -> None:
    def truncate(index: int, header: bytes, body: bytes) -> list[bytes] | None:
        return [header + body[: len(body) // 2], b""] if index == 2 else [header + body]

    tamper(store, truncate)
    out = ranks([pki_home.config(r) for r in range(2)], _allreduce(50_000), store=store)
    errs = _expect_all_fail(out, "truncated record from rank 1")
    assert errs[0].peer == 1


def test_abort_reaches_a_rank_not_on_the_broken_link(
    pki_home: Any, ranks: Ranks, tamper: Callable[..., None], store: Any
) -> None:
    tamper(store, _flip)  # corrupts rank 2 → rank 0, the ring's closing link
    out = ranks([pki_home.config(r) for r in range(3)], _allreduce(50_000), store=store)
    errs = _expect_all_fail(out, "authentication tag failed on record from rank 2")
    assert errs[0].peer == 2
    # rank 1 never talked over the broken link, yet stops too, told by rank 0
    assert "rank 0" in errs[1].message


def test_aborted_group_refuses_further_collectives(
    pki_home: Any, ranks: Ranks, tamper: Callable[..., None], store: Any
) -> None:
    tamper(store, _flip)

    def fn(rank: int, g: Group) -> object:
        try:
            _allreduce(50_000, iters=1)(rank, g)
        except TransportError:
            pass
        a = np.ones(4, dtype=np.float32)
        g.run(*ring_allreduce(a.data.cast("B"), 4, rank, 2, g.chunk), _SUM)  # must raise, never send plaintext
        return a

    out = ranks([pki_home.config(r) for r in range(2)], fn, store=store)
    _expect_all_fail(out, "the ringfence group is aborted")


def test_a_bug_in_a_reducer_aborts_instead_of_hanging(pki_home: Any, ranks: Ranks) -> None:
    def broken(dst: memoryview, src: memoryview) -> None:
        raise ValueError("reducer bug")

    def fn(rank: int, g: Group) -> object:
        a = np.ones(50_000, dtype=np.float32)
        g.run(*ring_allreduce(a.data.cast("B"), 4, rank, 2, g.chunk), broken if rank == 0 else _SUM)
        return a

    errs = _expect_all_fail(
        ranks([pki_home.config(r) for r in range(2)], fn), "internal error: ValueError('reducer bug')"
    )
    # rank 1 learns it from rank 0's ABORT record or, when rank 0 closes first on a loaded machine, from
    # the link breaking (closed, or a broken pipe on its own send): either way it stops, naming rank 0.
    stopped = ("rank 0 aborted the collective", "closed under us", "connection to rank 0 failed",
               "connection to rank 0 was closed")
    assert any(m in errs[1].message for m in stopped), errs[1].message
