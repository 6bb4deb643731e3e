"""Bringing labs up and down for real: nothing left behind, labs side by side, cleanup after crashes."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

import pytest

from ringfence.errors import EnvironmentProblem
from ringfence.lab import DEFAULT_ROOT, Lab, LabError, down_all, down_lab, procs
from ringfence.lab import netns as lab_netns
from ringfence.lab.state import LabStateError, StatePaths, pidfile_pids, read_state


def _why_not() -> str | None:
    try:
        lab_netns.require_privileges()
    except EnvironmentProblem as exc:
        return exc.message
    return None


_REASON = _why_not()
pytestmark = [pytest.mark.privileged, pytest.mark.slow,
              pytest.mark.skipif(_REASON is not None, reason=_REASON or "")]


def assert_nothing_left(name: str, pids: Iterable[int]) -> None:
    """No namespace, no link in the host namespace, no process, no state of lab ``name``."""
    assert not [ns for ns in lab_netns.list_namespaces() if ns.startswith(f"{name}-")]
    assert not [link for link in lab_netns.link_names() if link.startswith(name)]
    assert not [p for p in pids if procs.is_alive(p)]
    paths = StatePaths(DEFAULT_ROOT, name)
    assert not paths.state_file.exists() and not paths.directory.exists() and not paths.lock_file.exists()
    assert not list(DEFAULT_ROOT.glob(f".{name}.json.*"))


def test_up_status_down_leaves_nothing() -> None:
    lab = Lab.up(workers=2, jobs=1, traffic=False)
    try:
        st = lab.status()
        assert st.phase == "up" and not st.traffic_running
        assert all(n.present for n in st.nodes) and len(st.nodes) == 8
        services = {s.name: s for n in st.nodes for s in n.services}
        assert sorted(services) == ["mgmt-api", "mgmt-ssh", "replica-sink", "storage-http"]
        assert all(s.listening and not s.tls for s in services.values())
        processes = [p for n in st.nodes for p in n.processes]
        assert sorted(p.label for p in processes if p.kind == "service") == [
            "external-replica", "mgmt-mgmt", "mgmt-sshd", "storage-storage"]
        # the Slurm the training job runs under
        assert sorted(p.label for p in processes if p.kind == "scheduler") == [
            "mgmt-munged", "mgmt-slurmctld", "worker-0-slurmd", "worker-1-slurmd"]
        # the telemetry daemons: ulogd and conntrack in every namespace (the fabric's too), dnsmasq in mgmt
        recorded = read_state(lab.paths).processes
        points = ("fabric", *lab.topology.node_names())
        assert sorted(p.label for p in recorded if p.kind == "telemetry") == sorted(
            [f"{pt}-{d}" for pt in points for d in ("ulogd", "conntrack")] + ["mgmt-dnsmasq"])
        assert all(p.alive for p in processes)
        assert all((Path("/etc/netns") / lab.topology.namespace(n) / "resolv.conf").is_file()
                   for n in lab.topology.node_names())
        assert st.node("worker-1").interface == f"{lab.name}-w1"
        # nothing of the lab in the host's own namespace
        assert not [link for link in lab_netns.link_names() if link.startswith(lab.name)]
    finally:
        report = lab.down()
    assert set(report.namespaces_deleted) == {f"{lab.name}-{n}" for n in (*lab.topology.node_names(), "fabric")}
    assert set(report.processes_stopped) == {p.pid for p in recorded}
    assert_nothing_left(lab.name, [p.pid for p in recorded])
    assert not [ns for ns in (Path("/etc/netns").iterdir() if Path("/etc/netns").is_dir() else ())
                if ns.name.startswith(f"{lab.name}-")]


def _jobs_seen(lab: Lab) -> list[str]:
    """Names of the jobs the lab's job API has accepted, asked from the lab's own user node."""
    get = ("import http.client as h, json; c = h.HTTPConnection('10.77.3.10', 8000, timeout=5); "
           "c.request('GET', '/jobs'); print(json.dumps([j.get('name') for j in json.load(c.getresponse())]))")
    result = lab.executor("user").run([sys.executable, "-c", get], timeout=20)
    assert result.returncode == 0, result.stderr
    return list(json.loads(result.stdout))


def test_two_labs_side_by_side_do_not_clash(lab: Lab) -> None:
    # the second lab is the other supported shape, with its own traffic: 4 workers in 2 jobs
    with Lab.up(workers=4, jobs=2, traffic=True) as other:
        assert other.name != lab.name
        ranks = {k: v for k, v in other.agent_status().items() if k.endswith("-worker")}
        assert sorted((v["job"], v["rank"]) for v in ranks.values()) == [
            ("train-a", 0), ("train-a", 1), ("train-b", 0), ("train-b", 1)]
        assert all(v["counters"]["steps"] >= 1 for v in ranks.values())
        marker = f"only-in-{other.name}"
        post = ("import http.client as h; c = h.HTTPConnection('10.77.3.10', 8000, timeout=5); "
                f"c.request('POST', '/jobs', body=b'{{\"name\": \"{marker}\"}}'); print(c.getresponse().status)")
        result = other.executor("user").run([sys.executable, "-c", post], timeout=20)
        assert result.stdout.strip() == b"201", result.stderr
        # the same address reached the other lab's API only
        assert marker in _jobs_seen(other)
        assert marker not in _jobs_seen(lab)
    st = lab.status()
    assert all(n.present for n in st.nodes) and st.traffic_running


def test_a_lab_under_another_root_is_found_and_removed_there(tmp_path: Path) -> None:
    lab = Lab.up(traffic=False, root=tmp_path)
    assert Lab.names(tmp_path) == (lab.name,) and lab.name not in Lab.names()
    assert Lab.attach(root=tmp_path).name == lab.name
    pids = [p.pid for p in read_state(lab.paths).processes]
    (report,) = down_all(root=tmp_path)
    assert report.name == lab.name and Lab.names(tmp_path) == ()
    assert not [ns for ns in lab_netns.list_namespaces() if ns.startswith(f"{lab.name}-")]
    assert not [p for p in pids if procs.is_alive(p)]


_CRASHER = """
import sys, time
from ringfence.lab import Lab
Lab.up(name=sys.argv[1], traffic=False)
time.sleep(600)
"""


@pytest.mark.parametrize("stage", ["namespaces", "processes"])
def test_down_cleans_up_after_the_creating_process_was_killed(stage: str) -> None:
    name = f"rfcr{secrets.token_hex(2)}"
    paths = StatePaths(DEFAULT_ROOT, name)
    creator = subprocess.Popen([sys.executable, "-c", _CRASHER, name], start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert time.monotonic() < deadline, f"lab {name} never reached stage {stage}"
            assert creator.poll() is None, "the creating process ended by itself"
            try:
                if stage == "namespaces" and len(read_state(paths).namespaces) >= 3:
                    break
            except (LabError, LabStateError):  # not written yet
                pass
            if stage == "processes" and len(pidfile_pids(paths)) >= 2:
                break
            time.sleep(0.005)
    finally:
        os.killpg(creator.pid, signal.SIGKILL)  # the crash: no cleanup code of the creator runs
        creator.wait()
    pids = set(pidfile_pids(paths))
    if stage == "processes":
        assert any(procs.is_alive(p) for p in pids), "the started services should outlive their creator"
    report = down_lab(name)
    assert report.namespaces_deleted
    assert_nothing_left(name, pids)


def test_down_copes_with_parts_already_removed_by_hand() -> None:
    lab = Lab.up(traffic=False)
    try:
        pids = [p.pid for p in read_state(lab.paths).processes]
        storage = next(p for p in read_state(lab.paths).processes if p.label == "storage-storage")
        procs.stop([storage.pid], f"{lab.paths.directory}/", grace=0.5)
        lab_netns.delete_namespace(f"{lab.name}-user")
        lab_netns.delete_namespace(lab.topology.fabric_namespace)
        st = lab.status()
        assert not st.node("user").present
        assert not next(s for s in st.node("storage").services if s.name == "storage-http").listening
    finally:
        report = lab.down()
    assert f"{lab.name}-user" not in report.namespaces_deleted
    assert_nothing_left(lab.name, pids)


def test_down_ends_an_unrecorded_process_of_the_lab_and_leaves_a_foreign_one() -> None:
    """A spawn in flight when its creator was killed writes its pid file after ``down`` read them: its command
    line names the lab's directory, so it is the lab's and is stopped. A process that does not is reported."""
    lab = Lab.up(traffic=False)
    ns = f"{lab.name}-storage"
    sleeper = "import sys, time; time.sleep(300)"
    started: list[subprocess.Popen[bytes]] = []
    try:
        late = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c", sleeper,
                                 f"{lab.paths.directory}/late"], start_new_session=True)
        foreign = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c", sleeper, "not-the-lab"],
                                   start_new_session=True)
        started += [late, foreign]
        deadline = time.monotonic() + 30
        while not {late.pid, foreign.pid} <= set(lab_netns.namespace_pids(ns)):
            assert time.monotonic() < deadline, "the two processes never entered the lab's namespace"
            time.sleep(0.05)
        report = lab.down()
        assert late.pid in report.processes_stopped and late.wait(timeout=10) is not None
        assert foreign.poll() is None, "a process that is not the lab's was signalled"
        assert foreign.pid in report.leftover_pids
    finally:
        for p in started:  # ours, by pid: the foreign one stands in for someone else's
            if p.poll() is None:
                p.kill()
                p.wait()
