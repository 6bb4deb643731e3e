"""Stand-in listeners for range services that listen only while they work (srun's SrunPortRange): which
services get one, and a real one on this machine — placed, seen listening, accepting, and gone after stop."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from ringfence.enforce.probe_matrix import plan_probes
from ringfence.enforce.standin import MARKER, place, transient_services
from ringfence.lab.policy_text import render_policy
from ringfence.lab.slurm import SRUN_PORTS
from ringfence.lab.topology import build_topology
from ringfence.policy import Policy, parse_policy
from ringfence.targets.local import LocalExecutor
from ringfence.targets.ops import listening_ports

SRUN_LO, SRUN_HI = (int(p) for p in SRUN_PORTS.split("-"))


@pytest.fixture(scope="module")
def slurm_policy() -> Policy:
    return parse_policy(render_policy(build_topology("rfunit"), slurm=True), "slurm")


def test_only_a_service_declared_on_demand_and_known_to_listen_on_none_of_it_is_stood_in_for(
        slurm_policy: Policy) -> None:
    reach = ["mgmt", "worker-0", "worker-1"]
    # srun of the batch step listens on worker-0; none runs on the submit host (mgmt)
    listening = {"mgmt": frozenset({22, 6817}), "worker-0": frozenset({818, SRUN_LO + 7}), "worker-1": frozenset()}
    assert [s.name for s in transient_services(slurm_policy, listening, reach)] == ["mgmt-srun"]
    # a service not declared on demand that is down is a finding of its own, never stood in for (slurmd on
    # worker-1; and srun on mgmt once the policy no longer says it listens on demand)
    assert all(s.on_demand for s in transient_services(slurm_policy, listening, reach))
    plain = slurm_policy.model_copy(update={"services": tuple(
        s.model_copy(update={"on_demand": False}) if s.name == "mgmt-srun" else s for s in slurm_policy.services)})
    assert transient_services(plain, listening, reach) == []
    # what is not known (unreadable host) or not reachable gets nothing
    assert transient_services(slurm_policy, {**listening, "mgmt": None}, reach) == []
    assert transient_services(slurm_policy, listening, ["worker-0"]) == []
    both = {**listening, "worker-0": frozenset({818})}
    assert {s.name for s in transient_services(slurm_policy, both, reach)} == {"mgmt-srun", "worker-0-srun"}


def test_without_a_stand_in_the_matrix_would_probe_a_closed_port(slurm_policy: Policy) -> None:
    listening = {"mgmt": frozenset({22, 6817, 8000}), "worker-0": frozenset({818, 29500, SRUN_LO + 7})}
    plan = plan_probes(slurm_policy, listening)
    to_mgmt_srun = [p for p in plan.probes if p.destination == "mgmt" and SRUN_LO <= p.port <= SRUN_HI]
    assert to_mgmt_srun and all(p.port == SRUN_LO for p in to_mgmt_srun)  # nothing listens there: proves nothing
    # with the stand-in's port seen listening, every probe of the range goes to it, both sides
    stood = {**listening, "mgmt": listening["mgmt"] | {SRUN_HI}}
    again = [p for p in plan_probes(slurm_policy, stood).probes
             if p.destination == "mgmt" and SRUN_LO <= p.port <= SRUN_HI]
    assert {p.port for p in again} == {SRUN_HI} and {p.expected for p in again} == {"allow", "deny"}


def _free_range(width: int = 8) -> tuple[int, int]:
    busy = listening_ports(LocalExecutor()) or frozenset()
    for lo in range(47000, 48000, width):
        if not any(lo <= p < lo + width for p in busy):
            return lo, lo + width - 1
    pytest.skip("no free port range here")


def test_a_real_stand_in_listens_accepts_and_is_gone_after_stop(tmp_path: Path) -> None:
    lo, hi = _free_range()
    policy = parse_policy(render_policy(build_topology("rfunit"), slurm=True).replace(SRUN_PORTS, f"{lo}-{hi}"),
                          "slurm")
    ex = LocalExecutor("mgmt")
    listening: dict[str, frozenset[int] | None] = {"mgmt": listening_ports(ex)}
    said: list[str] = []
    stand = place(policy, {"mgmt": ex}, listening, wait=30, progress=said.append)
    try:
        assert [(s.node, s.service, s.port) for s in stand.placed] == [("mgmt", "mgmt-srun", hi)], stand.failed
        assert stand.failed == [] and hi in (listening["mgmt"] or ())  # seen listening, read from the host
        assert said and "stand-in listener on mgmt:" in said[0]
        with socket.create_connection(("127.0.0.1", hi), timeout=5):
            pass  # accepted
        assert MARKER in stand.placed[0].stop_file
    finally:
        stand.stop()
    assert hi not in (listening_ports(ex) or frozenset())
    assert not Path(stand.placed[0].stop_file).exists()


def test_a_stand_in_that_cannot_start_is_reported_and_not_counted_as_listening() -> None:
    lo, hi = _free_range()
    policy = parse_policy(render_policy(build_topology("rfunit"), slurm=True).replace(SRUN_PORTS, f"{lo}-{hi}"),
                          "slurm")
    real = LocalExecutor("mgmt")
    before = listening_ports(real)
    listening: dict[str, frozenset[int] | None] = {"mgmt": before}
    # a host whose python3 cannot run the stand-in (here: not on its PATH)
    broken = LocalExecutor("mgmt", prefix=("env", "PATH=/nonexistent"))
    stand = place(policy, {"mgmt": broken}, listening, wait=10)
    stand.stop()
    assert stand.placed == [] and len(stand.failed) == 1 and "did not listen" in stand.failed[0], stand.failed
    assert hi not in (listening["mgmt"] or frozenset())


def test_a_stand_in_ends_by_itself_once_the_run_that_started_it_is_killed(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    from ringfence.enforce.standin import _STANDIN_PY

    _lo, hi = _free_range()
    # the killed run: a parent reading the stand-in's stdout, as an executor's run() does, then SIGKILLed
    reader = "import subprocess, sys; subprocess.run(sys.argv[1:], stdout=subprocess.PIPE)"
    parent = subprocess.Popen([sys.executable, "-c", reader, sys.executable, "-c", _STANDIN_PY, str(hi),
                               str(tmp_path / "never"), "600"])
    try:
        end = time.monotonic() + 30
        while hi not in (listening_ports(LocalExecutor()) or frozenset()) and time.monotonic() < end:
            time.sleep(0.1)
        assert hi in (listening_ports(LocalExecutor()) or frozenset())
    finally:
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
    end = time.monotonic() + 30  # its heartbeat breaks within a second or so; bounded by what is observed
    while hi in (listening_ports(LocalExecutor()) or frozenset()) and time.monotonic() < end:
        time.sleep(0.1)
    assert hi not in (listening_ports(LocalExecutor()) or frozenset())
