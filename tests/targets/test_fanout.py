"""Fan-out: bounded, per-host timeouts, and every host accounted for by name."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from ringfence.targets.fanout import require_reachable, run_on_all
from ringfence.targets.interface import Executor, Host, RunResult, Site, TargetError


class SlowHost:
    """Takes ``delay`` seconds per command; counts how many of its kind run at once."""

    running = 0
    peak = 0
    lock = threading.Lock()

    def __init__(self, name: str, *, delay: float = 0.05, fail: str | None = None, code: int = 0,
                 hang: bool = False) -> None:
        self.name, self.delay, self.fail, self.code, self.hang = name, delay, fail, code, hang

    def run(self, argv: Sequence[str], *, timeout: float = 30.0, stdin: bytes | None = None,
            env: Mapping[str, str] | None = None) -> RunResult:
        if self.fail:
            raise TargetError(f"{self.name}: {self.fail}")
        with SlowHost.lock:
            SlowHost.running += 1
            SlowHost.peak = max(SlowHost.peak, SlowHost.running)
        try:
            time.sleep(min(self.delay, timeout))
        finally:
            with SlowHost.lock:
                SlowHost.running -= 1
        return RunResult(tuple(argv), self.code, b"", b"boom" if self.code else b"", min(self.delay, timeout),
                         timed_out=self.hang)

    def spawn(self, *a: Any, **k: Any) -> Any:
        raise AssertionError("not used")

    def copy_to(self, local: Path, remote: str) -> None:
        raise AssertionError("not used")

    def copy_from(self, remote: str, local: Path) -> None:
        raise AssertionError("not used")


def test_at_most_fanout_hosts_at_once_and_all_answer() -> None:
    SlowHost.peak = 0
    hosts: dict[str, Executor] = {f"n{i}": SlowHost(f"n{i}") for i in range(12)}
    out = run_on_all(hosts, ["true"], fanout=3, timeout=5)
    assert sorted(out) == sorted(hosts) and all(o.ok for o in out.values())
    assert 1 <= SlowHost.peak <= 3


def test_failing_hosts_are_named_with_why_and_do_not_stop_the_others() -> None:
    hosts: dict[str, Executor] = {
        "ok": SlowHost("ok"),
        "down": SlowHost("down", fail="ssh to root@down failed: Connection refused"),
        "bad": SlowHost("bad", code=3),
        "stuck": SlowHost("stuck", delay=0.2, hang=True),
    }
    out = run_on_all(hosts, ["true"], fanout=2, timeout=0.1)
    assert out["ok"].ok and not out["down"].ok and not out["bad"].ok and not out["stuck"].ok
    assert "Connection refused" in (out["down"].error or "")
    assert out["bad"].error == "bad: exit 3: boom"
    assert out["stuck"].error == "stuck: no answer within 0.1s"
    site = Site("s", "ssh", {n: Host(n, "192.0.2.1", e) for n, e in hosts.items()})
    with pytest.raises(TargetError, match=r"3 of 4 hosts unreachable: .*bad: exit 3.*down.*stuck") as err:
        require_reachable(site, fanout=2, timeout=0.1)
    assert "ok:" not in err.value.message


def test_fanout_must_be_positive() -> None:
    with pytest.raises(TargetError, match="at least 1"):
        run_on_all({"a": SlowHost("a")}, ["true"], fanout=0)
