"""The lab's Slurm configuration: every path its own (several labs share one file system), one NodeName per
worker at its lab address, and a clear error when Slurm is not installed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ringfence.lab import slurm
from ringfence.lab.topology import LabError, build_topology


def _conf(tmp_path: Path, name: str) -> tuple[slurm.SlurmPaths, dict[str, list[str]]]:
    topo = build_topology(name, 3, 1)
    paths = slurm.SlurmPaths(tmp_path / name / "slurm")
    slurm.prepare(topo, paths, tmp_path / name / "logs")
    conf: dict[str, list[str]] = {}
    for line in paths.conf.read_text().splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            conf.setdefault(key, []).append(value)
    return paths, conf


def test_every_path_is_under_the_labs_directory_and_two_labs_share_none(tmp_path: Path) -> None:
    a, conf_a = _conf(tmp_path, "rfaaaa")
    _, conf_b = _conf(tmp_path, "rfbbbb")
    def paths(conf: dict[str, list[str]]) -> set[str]:  # file names, not plugin names such as select/cons_tres
        return {v.removeprefix("socket=") for k, vs in conf.items() if k != "MailProg" for v in vs
                if v.removeprefix("socket=").startswith("/")}

    paths_a, paths_b = paths(conf_a), paths(conf_b)
    assert len(paths_a) == 8 and all(p.startswith(str(tmp_path / "rfaaaa")) for p in paths_a)
    munged = [a.split("=", 1)[1] for a in slurm.munged_argv(a, tmp_path / "rfaaaa" / "logs") if "=" in a]
    assert len(munged) == 5 and all(p.startswith(str(tmp_path / "rfaaaa")) for p in munged)
    assert not paths_a & paths_b
    assert conf_a["AuthInfo"] == [f"socket={a.munge_socket}"]
    assert all("%n" in conf_a[k][0] for k in ("SlurmdSpoolDir", "SlurmdPidFile", "SlurmdLogFile"))
    assert a.munge_key.stat().st_mode & 0o077 == 0  # munged refuses a key others can read
    assert (a.root / "spool" / "worker-2").is_dir()


def test_one_node_per_worker_at_its_lab_address(tmp_path: Path) -> None:
    _, conf = _conf(tmp_path, "rfcccc")
    topo = build_topology("rfcccc", 3, 1)
    nodes = [dict(kv.split("=") for kv in f"NodeName={v}".split()) for v in conf["NodeName"]]
    assert [(n["NodeName"], n["NodeAddr"]) for n in nodes] == [(w, topo.address(w)) for w in
                                                                ("worker-0", "worker-1", "worker-2")]
    assert re.fullmatch(rf"[^(]+\({re.escape(topo.address('mgmt'))}\)", conf["SlurmctldHost"][0])
    assert conf["JobCompType"] == ["jobcomp/filetxt"]


def test_missing_slurm_is_said_plainly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on it: no munged, no slurmctld
    with pytest.raises(LabError) as err:
        slurm.require_slurm()
    assert "Slurm" in err.value.message and "munge" in err.value.message
    assert err.value.hint is not None and "sysdeps" in err.value.hint
