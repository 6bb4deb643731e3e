"""The management-plane-failure drill's pure parts: when the management node counts as down, and how the
containment's denied probes become attempts (stopped only with a drop counter that moved) — no lab."""

from __future__ import annotations

import pytest

from ringfence.controls.interface import ProbeResult, Verdict
from ringfence.drill.interface import Bystander, DrillError, DrillReport
from ringfence.drill.mgmt_failure import attempts_of, choose_suspect, is_down, mgmt_ports
from ringfence.lab.policy_text import render_policy
from ringfence.lab.topology import build_topology
from ringfence.policy import Policy, parse_policy


def _policy() -> Policy:
    return parse_policy(render_policy(build_topology("rfunit", 4, 2)), "two-jobs")


def _deny(dest: str, outcome: str, by_policy: bool | None, rule: str | None = None) -> ProbeResult:
    port = int(dest.rsplit(":", 1)[1])
    return ProbeResult("aux", dest, "tcp", port, "deny", outcome, by_policy, f"{outcome} [contained aux → {dest}]",
                       ("1-ab",), rule)


def test_the_management_node_is_down_only_when_none_of_its_services_listen() -> None:
    ports = mgmt_ports(_policy(), "mgmt")
    assert ports == (22, 8000)
    assert is_down(ports, frozenset({53, 28000}))[0]  # its resolver and a sidecar's gate are not its services
    up, why = is_down(ports, frozenset({22, 53}))
    assert not up and "22" in why
    assert is_down(ports, None) == (True, "it does not answer its executor")


def test_denied_probes_become_attempts_stopped_only_with_a_moved_counter() -> None:
    policy = _policy()
    probes = [
        _deny("storage:8080", "timeout", True, "denied@fabric/inet +2"),
        _deny("worker-0:29500", "connected", False),
        _deny("mgmt:22", "refused", False),
        ProbeResult("aux", "mgmt:8000", "tcp", 8000, "allow", "connected", None),  # a collector: no attempt
    ]
    got = attempts_of(policy, probes, detected_after=0.4)
    assert [a.step for a in got] == ["aux->storage:8080", "aux->worker-0:29500", "aux->mgmt:22"]
    stopped, through, unknown = got
    assert stopped.got_through is False and stopped.detected and stopped.seconds_to_detect == 0.4
    assert "denied@fabric/inet" in stopped.detection and "aux (10.77.1." in stopped.detection
    assert stopped.target == "storage (10.77.2.10:8080)"
    assert through.got_through is True and through.detected is False and "reached worker-0:29500" in through.stopped_by
    assert unknown.got_through is None and unknown.detected is None  # a closed port proves nothing


def test_a_drill_whose_attempt_connects_fails_and_names_it() -> None:
    policy = _policy()
    attempts = attempts_of(policy, [_deny("storage:8080", "connected", False)], detected_after=None)
    by = Bystander("train-a", ("worker-0", "worker-1"), 10, 20, 0.5, 10.0)
    report = DrillReport("management-plane-failure", "lab:x", "t0", "t1", tuple(attempts), by, contained=False)
    assert report.verdict is Verdict.FAIL and report.why() == "got through: aux->storage:8080"
    held = attempts_of(policy, [_deny("storage:8080", "timeout", True, "denied@fabric/inet +1")], detected_after=0.2)
    ok = DrillReport("management-plane-failure", "lab:x", "t0", "t1", tuple(held), by, contained=True)
    assert ok.verdict is Verdict.PASS
    # held, but the management node was never shown down (contained=None): unknown, never pass
    assert DrillReport("m", "ssh:h", "t0", "t1", tuple(held), by, contained=None).verdict is Verdict.UNKNOWN


def test_the_suspect_keeps_approved_paths_that_stay_up_while_mgmt_is_down() -> None:
    policy = _policy()
    assert choose_suspect(policy, "mgmt") == "worker-3"  # a rank of the last job: the first is the bystander
    assert choose_suspect(policy, "mgmt", "aux") == "aux"
    for bad in ("mgmt", "nosuch"):
        with pytest.raises(DrillError, match="cannot contain"):
            choose_suspect(policy, "mgmt", bad)
