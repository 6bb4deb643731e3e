"""The polled engine (``RINGFENCE_TRANSPORT_ENGINE=polled``): every rank's schedule on its calling thread alone,
with non-blocking socket calls — as correct, as fail-closed and as free of deadlock as the threaded one.

The fail-closed module's tests run again here with every rank polled (its module is imported and its tests
re-collected with the engine set), and the cases only this engine has are added: both ranks of a pair
writing more than the sockets buffer before either reads, a peer that stops reading (a timeout, not a hang),
and ranks of the two engines in one group.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import test_transport_failclosed as failclosed

from ringfence.secure.transport import Group, TransportError
from ringfence.secure.transport.engine import ring_allreduce
from ringfence.secure.transport.reduce import make_reducer

Ranks = Callable[..., list[object]]
_SUM = make_reducer("float32", "SUM")

# Every fail-closed test, once more, with the engine polled (the fixture below sets it on every config).
for _name in dir(failclosed):
    if _name.startswith("test_"):
        globals()[_name] = getattr(failclosed, _name)


@pytest.fixture(autouse=True)
def polled(pki_home: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every config the PKI hands out runs the polled engine."""
    plain = type(pki_home).config

    def config(self: Any, rank: int, **changes: Any) -> Any:
        return dataclasses.replace(plain(self, rank, **changes), engine="polled")

    monkeypatch.setattr(type(pki_home), "config", config)
    yield


def _used_sender(g: Group) -> bool:
    return g._last_job is not None


@pytest.mark.parametrize("world", [2, 3])
def test_records_larger_than_the_socket_buffers_both_ways_complete(pki_home: Any, ranks: Ranks, world: int) -> None:
    """8 MiB a rank in 1 MiB records: a ring step's first sends exceed what the kernel buffers, so a rank that
    blocked in a send before reading would deadlock with its peer doing the same."""
    n = 2 << 20  # float32 elements

    def fn(rank: int, g: Group) -> object:
        a = np.full(n, rank + 1, dtype=np.float32)
        for _ in range(2):
            a[:] = rank + 1
            g.run(*ring_allreduce(a.data.cast("B"), 4, rank, world, g.chunk), _SUM)
        return a, _used_sender(g)

    results = ranks([pki_home.config(r, chunk_bytes=1 << 20) for r in range(world)], fn, timeout=60)
    for res in results:
        assert isinstance(res, tuple), res
        a, sender = res
        np.testing.assert_array_equal(a, np.full(n, sum(range(1, world + 1)), dtype=np.float32))
        assert not sender  # the schedule ran on the calling thread


def test_a_peer_that_stops_reading_is_a_timeout_not_a_hang(pki_home: Any, ranks: Ranks) -> None:
    n = 1 << 20

    def fn(rank: int, g: Group) -> object:
        a = np.full(n, 1.0, dtype=np.float32)
        if rank == 1:
            time.sleep(4)  # never takes part: rank 0's sends fill the buffers, then it waits
            return "idle"
        g.run(*ring_allreduce(a.data.cast("B"), 4, rank, 2, g.chunk), _SUM)
        return a

    t0 = time.monotonic()
    results = ranks([pki_home.config(r, timeout=1.5) for r in range(2)], fn)
    assert isinstance(results[0], TransportError) and "timed out" in results[0].message, results[0]
    assert "rank 1" in results[0].message
    assert time.monotonic() - t0 < 20


@pytest.mark.parametrize("engines", [("polled", "threads"), ("threads", "polled", "polled")])
def test_ranks_of_either_engine_make_one_group(pki_home: Any, ranks: Ranks, engines: tuple[str, ...]) -> None:
    """The wire is the same whichever engine a rank runs."""
    world, n = len(engines), 300_007

    def fn(rank: int, g: Group) -> object:
        a = np.arange(n, dtype=np.float32) * (rank + 1)
        g.run(*ring_allreduce(a.data.cast("B"), 4, rank, world, g.chunk), _SUM)
        return a

    configs = [dataclasses.replace(pki_home.config(r), engine=e) for r, e in enumerate(engines)]
    for res in ranks(configs, fn):
        assert isinstance(res, np.ndarray), res
        np.testing.assert_array_equal(res, np.arange(n, dtype=np.float32) * sum(range(1, world + 1)))


def test_an_unknown_engine_is_refused(pki_home: Any) -> None:
    from ringfence.errors import InputError
    from ringfence.secure.transport.config import config_from_env

    with pytest.raises(InputError, match="ENGINE"):
        dataclasses.replace(pki_home.config(0), engine="fast")
    env = {"RINGFENCE_TRANSPORT_DIR": str(pki_home.rank_dirs[0]), "RINGFENCE_TRANSPORT_CA": str(pki_home.ca)}
    assert config_from_env({**env, "RINGFENCE_TRANSPORT_ENGINE": "polled"}).engine == "polled"
    with pytest.raises(InputError, match="RINGFENCE_TRANSPORT_ENGINE"):
        config_from_env({**env, "RINGFENCE_TRANSPORT_ENGINE": "fast"})
