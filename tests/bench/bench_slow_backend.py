"""TEST ONLY — a deliberately slowed torch.distributed backend: gloo plus a sleep before every all-reduce.

It stands in for a costly protection layer so tests can prove the gate fails a slow candidate. It
is not encryption and claims nothing; the worker loads it with ``--plugin bench_slow_backend:register``
(this directory on PYTHONPATH). The delay comes from ``RINGFENCE_TEST_SLOW_MS`` (default 20 ms).
"""

from __future__ import annotations

import datetime
import os
import time
from typing import Any

import torch.distributed as dist
from torch.futures import Future

NAME = "slowgloo"


class _Done(dist.Work):
    def __init__(self, fut: Future[Any]) -> None:
        super().__init__()
        self._fut = fut

    def wait(self, timeout: datetime.timedelta | None = None) -> bool:
        self._fut.wait()
        return True

    def get_future(self) -> Future[Any]:
        return self._fut


def _done(value: Any) -> _Done:
    fut: Future[Any] = Future()
    fut.set_result(value)
    return _Done(fut)


class SlowGloo(dist.ProcessGroup):
    """gloo, but every all-reduce first sleeps."""

    def __init__(self, store: Any, rank: int, size: int, timeout: datetime.timedelta) -> None:
        super().__init__(rank, size)  # type: ignore[call-arg]  # the (rank, size) overload exists at runtime
        self._inner = dist.ProcessGroupGloo(store, rank, size, timeout)
        self._delay = float(os.environ.get("RINGFENCE_TEST_SLOW_MS", "20")) / 1e3

    def allreduce(self, tensors: Any, opts: Any = None) -> _Done:  # type: ignore[override]
        time.sleep(self._delay)
        inner: Any = self._inner  # torch's stubs do not list ProcessGroupGloo's collectives
        work = inner.allreduce(tensors) if opts is None else inner.allreduce(tensors, opts)
        work.wait()
        return _done(tensors)

    def barrier(self, opts: Any = None) -> _Done:
        inner: Any = self._inner
        inner.barrier().wait()
        return _done(None)

    def getBackendName(self) -> str:  # noqa: N802 - torch's name
        return NAME


def register() -> None:
    """Register ``slowgloo`` with torch.distributed."""
    dist.Backend.register_backend(NAME, lambda store, rank, size, timeout: SlowGloo(store, rank, size, timeout),
                                  devices=["cpu"])
