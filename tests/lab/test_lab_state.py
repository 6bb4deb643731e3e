"""The lab state file: atomic record of what a lab made, readable after a crash; no root needed."""

from __future__ import annotations

from pathlib import Path

import pytest

from ringfence.lab import Lab, LabError
from ringfence.lab.state import (
    LabState,
    LabStateError,
    ProcessRecord,
    StatePaths,
    TlsPaths,
    add_namespace,
    add_process,
    create_state,
    forget,
    list_lab_names,
    pidfile_pids,
    read_state,
    remove_processes,
    set_tls,
)


def _new(tmp_path: Path, name: str = "rfab12") -> StatePaths:
    paths = StatePaths(tmp_path, name)
    create_state(paths, LabState(prefix=name, workers=2, jobs=1, created="2026-01-01T00:00:00+00:00"))
    return paths


def test_changes_round_trip_through_the_file(tmp_path: Path) -> None:
    paths = _new(tmp_path)
    add_namespace(paths, "rfab12-fabric")
    add_process(paths, ProcessRecord(123, "mgmt-sshd", "mgmt", "service", ("/usr/sbin/sshd", "-D")))
    add_process(paths, ProcessRecord(124, "user-user", "user", "traffic", ("python",)))
    set_tls(paths, {"storage": TlsPaths("/c.pem", "/k.pem", "/ca.pem")})
    remove_processes(paths, {124})
    st = read_state(paths)
    assert st.namespaces == ("rfab12-fabric",)
    assert [p.label for p in st.processes] == ["mgmt-sshd"]
    assert st.tls["storage"].ca == "/ca.pem"
    assert LabState.from_json(st.to_json(), "x") == st
    assert list_lab_names(tmp_path) == ("rfab12",)
    assert not list(tmp_path.glob(".*.tmp"))  # atomic writes leave no temp files


def test_a_name_can_be_claimed_once(tmp_path: Path) -> None:
    _new(tmp_path)
    with pytest.raises(LabError, match="already exists"):
        _new(tmp_path)


def test_damaged_state_names_the_file(tmp_path: Path) -> None:
    paths = _new(tmp_path)
    paths.state_file.write_text('{"version": 1,\n "prefix": ')
    with pytest.raises(LabStateError, match=r"rfab12\.json:2"):
        read_state(paths)
    paths.state_file.write_text('{"version": 1}')
    with pytest.raises(LabStateError, match="malformed"):
        read_state(paths)
    paths.state_file.write_text('{"version": 99}')
    with pytest.raises(LabStateError, match="version 99"):
        read_state(paths)


def test_missing_lab_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(LabError, match="no lab named rfzz99"):
        read_state(StatePaths(tmp_path, "rfzz99"))


def test_pid_files_tolerate_half_written_files(tmp_path: Path) -> None:
    paths = _new(tmp_path)
    paths.pid_dir.mkdir(parents=True)
    (paths.pid_dir / "storage-storage.pid").write_text("4242\n")
    (paths.pid_dir / "user-user.pid").write_text("")
    assert pidfile_pids(paths) == {4242: "storage-storage"}


def test_forget_removes_the_record_and_half_writes(tmp_path: Path) -> None:
    paths = _new(tmp_path)
    (tmp_path / "not-a-lab.json").write_text("{}")
    (tmp_path / ".rfab12.json.x1y2.tmp").write_text("{")  # a write_atomic interrupted by kill -9
    (tmp_path / ".rfab123.json.x1y2.tmp").write_text("{")  # another lab's
    forget(paths)
    assert list_lab_names(tmp_path) == ()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".rfab123.json.x1y2.tmp", "not-a-lab.json"]


def test_attach_takes_the_only_lab_or_asks_for_a_name(tmp_path: Path) -> None:
    with pytest.raises(LabError, match="no lab is running"):
        Lab.attach(root=tmp_path)
    _new(tmp_path, "rfab12")
    assert Lab.attach(root=tmp_path).name == "rfab12"
    _new(tmp_path, "rfab13")
    with pytest.raises(LabError, match="several labs are running: rfab12, rfab13"):
        Lab.attach(root=tmp_path)
    assert Lab.attach("rfab13", root=tmp_path).topology.prefix == "rfab13"
