"""``lab down`` leaves nothing behind: the encryption layers' sidecars and tunnels end with the lab (issue 15 §5)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ringfence.errors import EnvironmentProblem
from ringfence.lab import Lab
from ringfence.lab.netns import require_privileges
from ringfence.secure.layers import tls_run, wireguard_run
from ringfence.secure.layers.runtime import StateStore
from ringfence.targets import ops

pytestmark = [pytest.mark.privileged, pytest.mark.slow]


def _naming(text: str) -> list[str]:
    """Command lines of live processes that contain ``text``."""
    out = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmd:
            out.append(f"{proc.name}: {cmd}")
    return out


def test_lab_down_ends_every_layer_process_and_removes_their_files() -> None:
    try:
        require_privileges()
    except EnvironmentProblem as exc:
        pytest.skip(f"the lab cannot run here: {exc.message}")
    lab = Lab.up(workers=2, jobs=1, traffic=False)
    name, layer_dir = lab.name, StateStore(lab.name).directory
    try:
        tls_run.enable_tls(lab.site(), lab.policy(), ["storage", "management", "replication"])
        wireguard_run.enable_wireguard(lab.site(), ["worker-0", "worker-1"])
        labels = {p.label for p in StateStore(name).read().processes}
        assert {"tls-storage", "wg-worker-0", "wg-worker-1"} <= labels
        assert _naming(f"{layer_dir}/"), "the layers' daemons name their directory"
        # a daemon started but never recorded (its starter killed in between) leaves only its pid file
        marker = f"{layer_dir}/"
        orphan = ops.start_daemon(lab.executor("aux"), ["sh", "-c", "sleep 300", marker], marker=marker,
                                  pidfile=f"{layer_dir}/hosts/aux/pids/orphan.pid",
                                  log=f"{layer_dir}/hosts/aux/logs/orphan.log")
        assert orphan not in {p.pid for p in StateStore(name).read().processes}
        assert ops.alive(lab.executor("aux"), [orphan], marker=marker) == {orphan}
    finally:
        report = lab.down()  # no `encrypt disable` first: lab down alone must end them
    assert report.name == name
    assert _naming(f"{layer_dir}/") == []
    assert [c for c in _naming(name) if "pytest" not in c] == []
    assert not layer_dir.exists()
