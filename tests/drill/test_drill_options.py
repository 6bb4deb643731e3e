"""``drill run``'s own options: which node a scenario acts from (``--node``), and where SSH hosts keep the
telemetry the drill reads its detections from (``--telemetry-dir``, one directory per host with ``{host}``)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from ringfence.cli import build_parser, main
from ringfence.cli.drill_cmd import scenario_options
from ringfence.drill._attack import telemetry_dir_of, telemetry_dirs
from ringfence.drill._respond import _collectors
from ringfence.drill.bystander import BASELINE_S, watch_bystander
from ringfence.drill.exfiltration import suspect_node
from ringfence.drill.interface import DrillContext
from ringfence.drill.mgmt_failure import choose_suspect
from ringfence.lab.policy_text import render_policy
from ringfence.lab.topology import build_topology
from ringfence.observe.flows.events.deploy import DEFAULT_DIR
from ringfence.policy import parse_policy
from ringfence.targets.interface import RunResult


def _args(*extra: str, scenario: str = "exfiltration") -> Any:
    return build_parser().parse_args(["drill", "run", scenario, *extra])


def _ctx(options: dict[str, Any]) -> DrillContext:
    return DrillContext(object(), object(), object(), Path("/tmp"), "ssh:hosts.yaml",  # type: ignore[arg-type]
                        options=options)


def test_node_goes_to_the_option_each_scenario_reads() -> None:
    assert scenario_options(_args("--node", "aux")) == {"node": "aux"}
    assert scenario_options(_args("--node", "worker-1", scenario="management-plane-failure")) == {
        "suspect": "worker-1"}
    assert scenario_options(_args()) == {}
    # and the scenarios act on it: a one-job cluster's exfiltration from a node outside the job leaves the job
    # to be measured as the bystander
    policy = parse_policy(render_policy(build_topology("rfunit", 2, 1)), "one-job")
    assert suspect_node(policy, scenario_options(_args("--node", "aux"))["node"]) == "aux"
    assert suspect_node(policy, None) == "worker-1"
    assert choose_suspect(policy, "mgmt", "worker-0") == "worker-0"


@pytest.mark.parametrize(("argv", "where"), [
    (["drill", "run", "malicious-job", "--node", "aux"], "--node"),
    (["drill", "run", "credential-compromise", "--node", "aux"], "--node"),
    (["drill", "run", "exfiltration", "--telemetry-dir", "/var/log/t"], "--telemetry-dir"),  # --target lab
    (["drill", "run", "exfiltration", "--target", "ssh", "--telemetry-dir", "logs/{host}"], "--telemetry-dir"),
])
def test_an_option_the_scenario_or_target_does_not_take_is_bad_input(
        argv: list[str], where: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert where in err and "Traceback" not in err


def test_the_telemetry_directory_is_one_for_all_hosts_or_one_per_host() -> None:
    assert telemetry_dir_of("/var/log/ringfence/telemetry", "fabric") == "/var/log/ringfence/telemetry"
    assert telemetry_dir_of("/srv/lab/telemetry/{host}", "aux") == "/srv/lab/telemetry/aux"
    assert telemetry_dirs(_ctx({}), ["aux"]) == {"aux": DEFAULT_DIR}
    opts = scenario_options(_args("--target", "ssh", "--telemetry-dir", "/srv/t/{host}"))
    assert telemetry_dirs(_ctx(opts), ["fabric", "mgmt"]) == {"fabric": "/srv/t/fabric", "mgmt": "/srv/t/mgmt"}


def test_on_the_lab_its_own_layout_is_used_whatever_the_options() -> None:
    class FakeLab:
        telemetry_dir = Path("/run/lab/telemetry")

    dirs = telemetry_dirs(_ctx({"lab": FakeLab(), "telemetry_dir": "/elsewhere"}), ["fabric"])
    assert dirs == {"fabric": "/run/lab/telemetry/fabric"}


class _Site:
    def __init__(self, kind: str) -> None:
        self.kind = kind


class _Cluster:
    def __init__(self, kind: str) -> None:
        self._site = _Site(kind)

    def site(self) -> _Site:
        return self._site


class _Exec:
    """A host whose SSH sessions come from ``peer`` (what ``$SSH_CONNECTION`` says there)."""

    def __init__(self, peer: str) -> None:
        self.peer = peer

    def run(self, argv: list[str], timeout: float = 30) -> RunResult:
        return RunResult(tuple(argv), 0, f"{self.peer} 51234 10.77.1.50 22".encode(), b"", 0.01)


def test_over_ssh_the_control_host_is_kept_reachable_never_probed_as_a_collector() -> None:
    policy = parse_policy(render_policy(build_topology("rfunit", 2, 1)), "one-job")
    ctx = DrillContext(_Cluster("ssh"), policy, object(), Path("/tmp"), "ssh:h.yaml")  # type: ignore[arg-type]
    # a collector is probed (an approved path must reach it); the control host has no approved path from the
    # contained node, so probing it would fail every containment over SSH for a path the policy never had
    assert _collectors(ctx, {"aux": _Exec("10.77.5.10")}, ("aux",)) == (("10.77.3.10",), ("10.77.5.10",))
    assert _collectors(ctx, {"aux": _Exec("10.77.3.10")}, ("aux",)) == (("10.77.3.10",), ())  # already one
    lab = DrillContext(_Cluster("lab"), policy, object(), Path("/tmp"), "lab:rf1")  # type: ignore[arg-type]
    assert _collectors(lab, {"aux": _Exec("10.77.5.10")}, ("aux",)) == (("10.77.3.10",), ())


class _SlowFirstRead:
    """A job whose progress takes longer than the baseline to read the first time (an SSH site's first session)."""

    def __init__(self) -> None:
        self.t0 = 0.0

    def agent_status(self) -> dict[str, dict[str, Any]]:
        if not self.t0:
            time.sleep(BASELINE_S + 0.5)
            self.t0 = time.time()
        steps = int((time.time() - self.t0) * 20)  # 20 steps a second
        return {f"{r}-worker": {"counters": {"steps": steps}} for r in ("worker-0", "worker-1")}


def test_the_baseline_starts_once_the_first_sample_is_read() -> None:
    policy = parse_policy(render_policy(build_topology("rfunit", 2, 1)), "one-job")
    with watch_bystander(_SlowFirstRead(), policy, ["aux"]) as watch:  # type: ignore[arg-type]
        time.sleep(0.5)
    got = watch.result()
    assert got.steps_before > 0 and got.within_budget is True, got.detail
