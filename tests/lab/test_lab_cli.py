"""``ringfence lab …`` end to end, in-process where possible (``main(argv)`` returns the exit code)."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys

import pytest
import yaml

from ringfence.cli import main
from ringfence.errors import EnvironmentProblem
from ringfence.lab import Lab
from ringfence.lab import netns as lab_netns
from ringfence.policy import parse_policy


def _why_not() -> str | None:
    try:
        lab_netns.require_privileges()
    except EnvironmentProblem as exc:
        return exc.message
    return None


_REASON = _why_not()

# Imports everything first, then drops the effective uid, then runs the CLI: "not root", for real.
_AS_NOBODY = """
import os, sys
import ringfence.cli, ringfence.cli.lab_cmd, ringfence.lab, ringfence.lab.netns
ringfence.cli.build_parser()  # imports every verb module while the files are still readable
if os.geteuid() == 0:
    os.seteuid(65534)
sys.exit(ringfence.cli.main(sys.argv[1:]))
"""


def test_policy_renders_without_a_lab(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lab", "policy", "--workers", "4", "--jobs", "2"]) == 0
    policy = parse_policy(capsys.readouterr().out)
    assert [j.name for j in policy.jobs] == ["train-a", "train-b"]
    assert len([n for n in policy.nodes if "worker" in n.roles]) == 4


def test_bad_shape_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lab", "policy", "--workers", "3", "--jobs", "2"]) == 2
    err = capsys.readouterr().err
    assert "cannot split 3 workers into 2 jobs" in err and "Traceback" not in err


@pytest.mark.parametrize("verb", [["up"], ["status"], ["down", "--all"], ["capture", "-o", "/dev/null"]])
def test_without_root_the_lab_says_what_it_needs(verb: list[str]) -> None:
    proc = subprocess.run([sys.executable, "-c", _AS_NOBODY, "lab", *verb], capture_output=True, text=True,
                          timeout=60, cwd="/")
    assert proc.returncode == 2, proc.stderr
    assert "the lab needs root and iproute2" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
@pytest.mark.privileged
@pytest.mark.skipif(_REASON is not None, reason=_REASON or "")
def test_up_status_exec_policy_down(capfd: pytest.CaptureFixture[str]) -> None:
    name = f"rfcl{secrets.token_hex(2)}"
    assert main(["lab", "up", "--no-traffic", "--name", name]) == 0
    try:
        assert capfd.readouterr().out.strip() == name
        assert main(["lab", "status", "--name", name, "--format", "json"]) == 0
        st = json.loads(capfd.readouterr().out)
        assert st["name"] == name and {n["name"] for n in st["nodes"]} >= {"mgmt", "storage", "worker-1"}
        assert main(["lab", "status", "--name", name]) == 0
        assert "mgmt-ssh:22" in capfd.readouterr().out
        assert main(["lab", "exec", "--name", name, "mgmt", "--", "ip", "-o", "-4", "addr", "show"]) == 0
        assert "10.77.3.10/24" in capfd.readouterr().out
        assert main(["lab", "exec", "--name", name, "mgmt", "--", "sh", "-c", "exit 7"]) == 7
        assert main(["lab", "policy", "--name", name]) == 0
        assert yaml.safe_load(capfd.readouterr().out)["cluster"] == "lab"
    finally:
        assert main(["lab", "down", "--name", name]) == 0
    assert name not in Lab.names()
    assert not [ns for ns in lab_netns.list_namespaces() if ns.startswith(f"{name}-")]
    assert main(["lab", "status", "--name", name]) == 2
