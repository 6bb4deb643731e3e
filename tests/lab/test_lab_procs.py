"""Stopping processes: only ours (by command-line marker), never a stranger's pid; no root needed."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ringfence.lab import procs


@pytest.fixture
def sleeper(tmp_path: Path) -> Iterator[tuple[int, str]]:
    marker = f"{tmp_path}/"
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", f"{marker}x"],
                         start_new_session=True)
    procs._CHILDREN[p.pid] = p  # as procs.spawn does, so the test reaps it
    try:
        yield p.pid, marker
    finally:
        if p.poll() is None:
            p.kill()
        p.wait()
        procs._CHILDREN.pop(p.pid, None)


def test_a_process_with_another_marker_is_left_alone(sleeper: tuple[int, str], tmp_path: Path) -> None:
    pid, marker = sleeper
    assert procs.is_ours(pid, marker)
    assert not procs.is_ours(pid, f"{tmp_path}-other/")
    stopped, left = procs.stop([pid], f"{tmp_path}-other/", grace=0.2)
    assert (stopped, left) == (set(), set())
    assert procs.is_alive(pid)


def test_our_process_is_stopped_and_reaped(sleeper: tuple[int, str]) -> None:
    pid, marker = sleeper
    stopped, left = procs.stop([pid], marker, grace=2.0)
    assert (stopped, left) == ({pid}, set())
    assert not procs.is_alive(pid)
    assert not Path(f"/proc/{pid}").exists()  # reaped, not a zombie


def test_a_pid_that_is_gone_is_not_ours(tmp_path: Path) -> None:
    p = subprocess.Popen([sys.executable, "-c", "pass", str(tmp_path)])
    p.wait()
    assert not procs.is_ours(p.pid, str(tmp_path))
    assert procs.stop([p.pid], str(tmp_path)) == (set(), set())
