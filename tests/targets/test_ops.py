"""Executor-generic host operations, run for real on this machine through the local executor."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from ringfence.targets import ops
from ringfence.targets.interface import Host, Site, TargetError
from ringfence.targets.local import LocalExecutor


@pytest.fixture
def ex() -> LocalExecutor:
    return LocalExecutor(name="here")


def test_write_is_atomic_with_its_mode_and_read_back(ex: LocalExecutor, tmp_path: Path) -> None:
    path = tmp_path / "deep" / "key.pem"
    ops.write_file(ex, str(path), b"secret\n")
    assert path.read_bytes() == b"secret\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    ops.write_file(ex, str(path), b"public\n", mode=0o644)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert ops.read_file(ex, str(path)) == b"public\n"
    assert ops.read_file(ex, str(tmp_path / "absent")) is None
    assert not list(path.parent.glob("*.rf-tmp"))


def test_a_daemon_outlives_its_start_and_stops_only_while_it_is_ours(ex: LocalExecutor, tmp_path: Path) -> None:
    marker = f"{tmp_path}/"
    pid = ops.start_daemon(ex, ["sh", "-c", "sleep 60", marker], marker=marker,
                           pidfile=str(tmp_path / "pids" / "s.pid"), log=str(tmp_path / "logs" / "s.log"))
    assert ops.alive(ex, [pid], marker=marker) == {pid}
    assert (tmp_path / "pids" / "s.pid").read_text().strip() == str(pid)
    # a marker that is not in its command line: never signalled, reported as not ours
    assert ops.alive(ex, [pid], marker="/not/ours/") == set()
    assert ops.stop_daemons(ex, [pid], marker="/not/ours/") == set()
    os.kill(pid, 0)  # still running
    assert ops.stop_daemons(ex, [pid], marker=marker) == set()
    deadline = time.monotonic() + 10
    while ops.alive(ex, [pid], marker=marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ops.alive(ex, [pid], marker=marker) == set()


def test_a_daemon_must_name_the_marker(ex: LocalExecutor, tmp_path: Path) -> None:
    with pytest.raises(TargetError, match="must name"):
        ops.start_daemon(ex, ["sleep", "60"], marker=f"{tmp_path}/", pidfile=str(tmp_path / "p"),
                         log=str(tmp_path / "l"))


def test_wait_for_files_reports_what_is_missing(ex: LocalExecutor, tmp_path: Path) -> None:
    (tmp_path / "a").write_text("")
    assert ops.wait_for_files(ex, [str(tmp_path / "a")], seconds=1) == []
    assert ops.wait_for_files(ex, [str(tmp_path / "a"), str(tmp_path / "b")], seconds=0.2) == [str(tmp_path / "b")]


def test_remove_tree_refuses_shallow_paths(ex: LocalExecutor, tmp_path: Path) -> None:
    for bad in ("/", "/run", "relative/path", "/run/../etc"):
        with pytest.raises(TargetError, match="refusing"):
            ops.remove_tree(ex, bad)
    (tmp_path / "d" / "e").mkdir(parents=True)
    ops.remove_tree(ex, str(tmp_path / "d"))
    assert not (tmp_path / "d").exists()


def test_a_site_names_the_node_it_lacks(ex: LocalExecutor) -> None:
    site = Site("s", "local", {"n1": Host("n1", "127.0.0.1", ex)})
    assert site.address("n1") == "127.0.0.1" and site.executor("n1") is ex
    with pytest.raises(TargetError, match="no node 'n2'.*n1"):
        site.host("n2")


def _children(pid: int) -> list[int]:
    out = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(proc.name))
            except (OSError, IndexError, ValueError):
                continue
    return out


def _running(pid: int) -> bool:
    try:
        return (Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]) != "Z"
    except OSError:
        return False


def test_stopping_a_daemon_ends_its_children_too(ex: LocalExecutor, tmp_path: Path) -> None:
    # dash's kill takes no "--": the group signal must be spelt so that /bin/sh understands it, else only the
    # wrapper dies and the real daemon under it lives on (it did, for charon and wireguard-go)
    marker = f"{tmp_path}/"
    pid = ops.start_daemon(ex, ["sh", "-c", "sleep 60; exit 0", marker], marker=marker,
                           pidfile=str(tmp_path / "pids" / "c.pid"), log=str(tmp_path / "logs" / "c.log"))
    deadline = time.monotonic() + 10
    while not _children(pid):
        assert time.monotonic() < deadline, "the daemon started no child"
        time.sleep(0.05)
    (child,) = _children(pid)
    assert ops.stop_daemons(ex, [pid], marker=marker) == set()
    deadline = time.monotonic() + 10
    while _running(child):
        assert time.monotonic() < deadline, "the daemon's child survived stop_daemons"
        time.sleep(0.05)
