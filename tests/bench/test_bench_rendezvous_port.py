"""Rank 0's rendezvous port is one that nothing on its host listens on, read through its executor: a lab's own
training job listens on 29500, the first port a random pick from the range could hit."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from ringfence.bench.driver import RENDEZVOUS_PORTS, _free_port
from ringfence.bench.errors import BenchError
from ringfence.targets.interface import Process, RunResult, TargetError


class _Host:
    """An executor whose host listens on ``busy`` (what /proc/net/tcp would say), or cannot be reached."""

    name = "worker-0"

    def __init__(self, busy: Sequence[int] | None) -> None:
        self.busy = busy

    def run(self, argv: Sequence[str], *, timeout: float = 30.0, stdin: bytes | None = None,
            env: Mapping[str, str] | None = None) -> RunResult:
        if self.busy is None:
            raise TargetError("worker-0: unreachable")
        return RunResult(tuple(argv), 0, json.dumps(list(self.busy)).encode(), b"", 0.01)

    def spawn(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, stdout: Path | None = None,
              stderr: Path | None = None) -> Process:
        raise AssertionError("not used")

    def copy_to(self, local: Path, remote: str) -> None:
        raise AssertionError("not used")

    def copy_from(self, remote: str, local: Path) -> None:
        raise AssertionError("not used")


def test_the_port_is_one_nothing_listens_on() -> None:
    lo, hi = RENDEZVOUS_PORTS
    only = 31234
    busy = [p for p in range(lo, hi + 1) if p != only]
    for _ in range(20):
        assert _free_port("10.77.1.10", _Host(busy)) == only


def test_a_host_with_every_port_taken_is_an_error_not_a_collision() -> None:
    lo, hi = RENDEZVOUS_PORTS
    with pytest.raises(BenchError, match="every rendezvous port"):
        _free_port("10.77.1.10", _Host(range(lo, hi + 1)))


def test_an_unreadable_host_still_gets_a_port_of_the_range() -> None:
    lo, hi = RENDEZVOUS_PORTS
    assert lo <= _free_port("10.77.1.10", _Host(None)) <= hi
    assert lo <= _free_port("10.77.1.10") <= hi  # no executor at all
