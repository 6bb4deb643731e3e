"""``-o`` safety: only regular files are replaced; devices and FIFOs are written in place; no symlink escapes."""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from ringfence.atomic import write_atomic
from ringfence.cli import main
from ringfence.errors import RingfenceError


@pytest.fixture
def dev_null_guard() -> Iterator[os.stat_result]:
    """Put /dev/null back if a regression ever renames over it: the machine is shared."""
    before = os.stat("/dev/null")
    assert stat.S_ISCHR(before.st_mode)
    yield before
    if not stat.S_ISCHR(os.lstat("/dev/null").st_mode):
        os.unlink("/dev/null")
        os.mknod("/dev/null", 0o666 | stat.S_IFCHR, before.st_rdev)
        os.chmod("/dev/null", 0o666)


def test_regular_file_is_replaced_and_new_path_created(tmp_path: Path) -> None:
    out = tmp_path / "sub" / "report.json"
    write_atomic(out, b"one")
    write_atomic(out, b"two")
    assert out.read_bytes() == b"two"
    assert [p.name for p in out.parent.iterdir()] == ["report.json"]  # no temp file left


def test_dev_null_stays_a_character_device(dev_null_guard: os.stat_result) -> None:
    before = dev_null_guard
    write_atomic("/dev/null", b"x" * 10000)
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and after.st_ino == before.st_ino and after.st_rdev == before.st_rdev


def test_verb_output_through_cli_keeps_dev_null(dev_null_guard: os.stat_result) -> None:
    before = dev_null_guard
    assert main(["policy", "schema", "-o", "/dev/null"]) == 0
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and after.st_ino == before.st_ino


def test_fifo_is_written_in_place_not_replaced(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []

    def reader() -> None:
        with fifo.open("rb") as fh:
            got.append(fh.read())

    t = threading.Thread(target=reader)
    t.start()
    write_atomic(fifo, b"through the pipe")
    t.join(timeout=60)
    assert not t.is_alive()
    assert got == [b"through the pipe"]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_symlink_out_of_the_directory_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "passwd"
    victim.write_bytes(b"precious")
    work = tmp_path / "work"
    work.mkdir()
    link = work / "report.json"
    link.symlink_to(victim)
    with pytest.raises(RingfenceError, match="symlink"):
        write_atomic(link, b"overwrite")
    assert victim.read_bytes() == b"precious"
    assert link.is_symlink()


def test_symlink_inside_the_directory_replaces_its_target_and_keeps_the_link(tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    real.write_bytes(b"old")
    link = tmp_path / "latest.json"
    link.symlink_to("real.json")
    write_atomic(link, b"new")
    assert link.is_symlink() and real.read_bytes() == b"new"


def test_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RingfenceError, match="directory"):
        write_atomic(tmp_path, b"x")



def test_mode_is_applied_to_new_files(tmp_path: Path) -> None:
    key = tmp_path / "k" / "private.key"
    write_atomic(key, b"secret", mode=0o600)
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
