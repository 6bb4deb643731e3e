"""The lab's software TPMs: started lazily per node, reported by status, reachable by tpm2-tools, gone after down."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from ringfence.cli import main
from ringfence.errors import EnvironmentProblem
from ringfence.lab import Lab, down_lab, procs
from ringfence.lab import netns as lab_netns


def _why_not() -> str | None:
    try:
        lab_netns.require_privileges()
    except EnvironmentProblem as exc:
        return exc.message
    return None


_REASON = _why_not()
pytestmark = [pytest.mark.privileged, pytest.mark.skipif(_REASON is not None, reason=_REASON or "")]


def test_swtpm_starts_on_demand_is_reported_and_is_ended_by_down(capsys: pytest.CaptureFixture[str]) -> None:
    lab = Lab.up(workers=2, jobs=1, traffic=False)
    try:
        before = lab.status().node("worker-0")
        assert before.tpm is not None and not before.tpm.running  # lazy: nothing started with the lab
        assert not any(p.label.endswith("-swtpm") for n in lab.status().nodes for p in n.processes)
        paths = lab.ensure_tpm(["worker-0"])["worker-0"]
        assert main(["lab", "status", "--name", lab.name, "--format", "json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        tpm = next(n for n in doc["nodes"] if n["name"] == "worker-0")["tpm"]
        assert tpm == {"tcti": f"swtpm:path={paths.socket}", "running": True}
        env = {**os.environ, "TPM2TOOLS_TCTI": tpm["tcti"]}
        pcr = subprocess.run(["tpm2_pcrread", "sha256:10"], env=env, capture_output=True, text=True, check=True)
        assert "0x0000000000000000000000000000000000000000000000000000000000000000" not in pcr.stdout  # booted
        assert json.loads(paths.event_log.read_text())["format"] == "ringfence-eventlog-1"
        pids = [p.pid for n in lab.status().nodes for p in n.processes if p.label == "worker-0-swtpm"]
        assert len(pids) == 1 and procs.is_alive(pids[0])
    finally:
        report = down_lab(lab.name)  # from the state files alone, as after a crash of the creator
    assert pids[0] in report.processes_stopped
    assert not procs.is_alive(pids[0])
