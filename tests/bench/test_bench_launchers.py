"""The launchers (direct, torchrun, srun): the argv and environment each builds, how the driver reads ranks
that share one stream, failures named with what to install, and what a launcher started is ended."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from ringfence.bench.driver import BenchError, BenchSpec, RankSpec, run_allreduce
from ringfence.bench.launchers import (
    LAUNCHERS,
    DirectLauncher,
    SrunLauncher,
    TorchrunLauncher,
    launcher_names,
    make_launcher,
)
from ringfence.bench.placement import local_ranks
from ringfence.bench.run import load_run, save_run
from ringfence.bench.worker import expand_hostlist
from ringfence.targets.interface import Host, RunResult
from ringfence.targets.local import LocalExecutor, LocalProcess

SPEC = BenchSpec(sizes=(1024,), warmup=0, iterations=2, repeats=1, timeout_s=20)
PY = ("/opt/py/bin/python3",)


@dataclass
class Spawned:
    argv: list[str]
    env: dict[str, str]
    process: LocalProcess


@dataclass
class FakeExecutor:
    """Records every spawn and run; each spawned command is replaced by ``script`` (a sh script, or a function
    of the argv giving one), run here for real so poll/stop behave as on any host."""

    name: str
    script: object = "exit 0"
    spawned: list[Spawned] = field(default_factory=list)
    ran: list[tuple[list[str], dict[str, str]]] = field(default_factory=list)

    def run(self, argv: Sequence[str], *, timeout: float = 30.0, stdin: bytes | None = None,
            env: Mapping[str, str] | None = None) -> RunResult:
        self.ran.append((list(argv), dict(env or {})))
        return RunResult(tuple(argv), 0, b"", b"", 0.0)

    def spawn(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, stdout: Path | None = None,
              stderr: Path | None = None) -> LocalProcess:
        script = self.script(list(argv)) if callable(self.script) else str(self.script)
        proc = LocalExecutor(self.name).spawn(["sh", "-c", script], stdout=stdout, stderr=stderr)
        self.spawned.append(Spawned(list(argv), dict(env or {}), proc))
        return proc

    def copy_to(self, local: Path, remote: str) -> None:
        raise AssertionError("not used")

    def copy_from(self, remote: str, local: Path) -> None:
        raise AssertionError("not used")


def _ranks(executors: Sequence[FakeExecutor], per_node: int = 1) -> list[RankSpec]:
    return [RankSpec(ex.name, ex, f"10.0.0.{i + 1}", interface=f"eth{i}", python=PY, env={"PYTHONPATH": "/src"})
            for i, ex in enumerate(executors) for _ in range(per_node)]


def _events(rank: int, *, label: bool = False, job: str | None = None, node: str | None = None) -> list[str]:
    ready: dict[str, object] = {"event": "ready", "rank": rank, "host": "h", "versions": {"torch": "2.x"}}
    if job:
        ready["slurm_job"] = job
    if node:
        ready["node"] = node
    lines = [ready, {"event": "repeat", "rank": rank, "repeat": 0, "started": "2026-12-01T00:00:00+00:00"},
             {"event": "size", "rank": rank, "repeat": 0, "size": 1024, "count": 256, "times_us": [10.0 + rank, 12.0],
              "wrong": 0}, {"event": "done", "rank": rank}]
    prefix = f"{rank}: " if label else ""
    return [prefix + json.dumps(e) for e in lines]


def _print(lines: Sequence[str]) -> str:
    return "".join(f"printf '%s\\n' {shlex.quote(line)}; " for line in lines) + "exit 0"


def _arg(argv: Sequence[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_the_registry_is_an_explicit_table() -> None:
    assert launcher_names() == ("direct", "torchrun", "srun") == tuple(LAUNCHERS)
    assert isinstance(make_launcher("direct"), DirectLauncher)
    assert isinstance(make_launcher("torchrun"), TorchrunLauncher)
    with pytest.raises(BenchError, match="submit host"):
        make_launcher("srun")
    with pytest.raises(BenchError, match="unknown launcher 'mpirun'; one of direct, torchrun, srun"):
        make_launcher("mpirun")


def test_direct_starts_one_worker_per_rank_with_its_hosts_python_and_env() -> None:
    a, b = FakeExecutor("a", _print(_events(0))), FakeExecutor("b", _print(_events(1)))
    run = run_allreduce(_ranks([a, b]), replace(SPEC, env={"OMP_NUM_THREADS": "1"}), master_port=29999)
    for r, ex in enumerate((a, b)):
        (s,) = ex.spawned
        assert s.argv[:3] == [*PY, "-m", "ringfence.bench.worker"]
        assert _arg(s.argv, "--rank") == str(r) and _arg(s.argv, "--world") == "2"
        assert _arg(s.argv, "--master") == "10.0.0.1:29999" and _arg(s.argv, "--sizes") == "1024"
        assert s.env == {"PYTHONPATH": "/src", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29999",
                         "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": f"eth{r}"}
    assert run.config.nodes == ("a", "b") and run.config.interfaces == ("eth0", "eth1")
    assert dict(run.launch) == {"launcher": "direct"} and "launcher: direct" in run.notes
    # iteration times are the slowest rank's, as before
    assert run.repeats[0].results[0].times_us == (11.0, 12.0)


def test_torchrun_starts_one_agent_per_node_with_a_static_rendezvous() -> None:
    # node a runs global ranks 0-1, node b ranks 2-3, their lines interleaved on each agent's stdout
    a = FakeExecutor("a", _print([x for pair in zip(_events(0), _events(1), strict=True) for x in pair]))
    b = FakeExecutor("b", _print(_events(3) + _events(2)))
    run = run_allreduce(_ranks([a, b], per_node=2), SPEC, launcher="torchrun", master_port=29600)
    for i, ex in enumerate((a, b)):
        (s,) = ex.spawned
        assert s.argv[:3] == [*PY, "-m", "torch.distributed.run"]
        assert _arg(s.argv, "--nnodes") == "2" and _arg(s.argv, "--nproc-per-node") == "2"
        assert _arg(s.argv, "--node-rank") == str(i) and _arg(s.argv, "--master-addr") == "10.0.0.1"
        assert _arg(s.argv, "--master-port") == "29600" and _arg(s.argv, "--max-restarts") == "0"
        # the script after -m is the worker, with no rank of its own: torchrun's RANK/WORLD_SIZE give it
        tail = s.argv[s.argv.index("-m", 3):]
        assert tail[:2] == ["-m", "ringfence.bench.worker"] and "--rank" not in tail and "--master" not in tail
        assert s.env == {"PYTHONPATH": "/src", "GLOO_SOCKET_IFNAME": f"eth{i}"}
    assert run.config.world_size == 4 and run.config.nodes == ("a", "a", "b", "b")
    assert dict(run.launch) == {"launcher": "torchrun"}


def test_a_rank_speaking_for_a_rank_of_another_node_is_refused() -> None:
    a, b = FakeExecutor("a", _print(_events(1))), FakeExecutor("b", _print(_events(1)))
    with pytest.raises(BenchError, match=r"torchrun on a reported an event of rank 1; it runs ranks 0 of 2"):
        run_allreduce(_ranks([a, b]), SPEC, launcher="torchrun")


def test_torchrun_needs_the_same_consecutive_ranks_on_every_node() -> None:
    a, b = FakeExecutor("a"), FakeExecutor("b")
    with pytest.raises(BenchError, match="same number of ranks"):
        run_allreduce([*_ranks([a, b], per_node=2)[:3]], SPEC, launcher="torchrun")
    r = _ranks([a, b])
    with pytest.raises(BenchError, match="not consecutive"):
        run_allreduce([r[0], r[1], r[0], r[1]], SPEC, launcher="torchrun")
    assert not a.spawned and not b.spawned


def test_torchrun_missing_on_a_host_names_the_host_and_what_to_install() -> None:
    # a real interpreter that cannot import torch (-S: no site-packages), started by the real launcher
    ranks = [replace(r, python=(sys.executable, "-S")) for r in local_ranks(["n0", "n1"])]
    t0 = time.monotonic()
    with pytest.raises(BenchError, match=r"torchrun on n[01] exited with 1: .*No module named") as err:
        run_allreduce(ranks, SPEC, launcher="torchrun")
    assert err.value.hint is not None and "install torch there (torchrun ships with it)" in err.value.hint
    assert time.monotonic() - t0 < 15


def _slurm_host(script: object) -> tuple[Host, FakeExecutor]:
    ex = FakeExecutor("mgmt", script)
    return Host("mgmt", "10.0.9.1", ex, env={"SLURM_CONF": "/lab/slurm.conf"}), ex


def test_srun_submits_one_step_through_the_submit_host_and_records_its_job() -> None:
    lines = [x for pair in zip(_events(1, label=True, job="4711", node="w1"),
                               _events(0, label=True, job="4711", node="w0"), strict=True) for x in pair]
    host, ex = _slurm_host(_print(lines))
    w0, w1 = FakeExecutor("w0"), FakeExecutor("w1")
    launcher = SrunLauncher(host, partition="lab")
    run = run_allreduce(_ranks([w0, w1]), replace(SPEC, timeout_s=300), launcher=launcher, master_port=29700)
    assert not w0.spawned and not w1.spawned  # the nodes are reached by Slurm, not by their executors
    (s,) = ex.spawned
    argv = s.argv
    assert argv[0] == "srun" and f"--job-name={launcher.job_name}" in argv
    assert {"--nodes=2", "--ntasks-per-node=1", "--ntasks=2", "--nodelist=w0,w1", "--label", "--unbuffered",
            "--kill-on-bad-exit=1", "--export=ALL", "--partition=lab", "--time=7"} <= set(argv)
    worker = argv[argv.index(PY[0]):]
    assert worker[:3] == [*PY, "-m", "ringfence.bench.worker"] and "--rank" not in worker
    assert _arg(worker, "--master-port") == "29700" and _arg(worker, "--node-addr") == "w0=10.0.0.1,w1=10.0.0.2"
    assert _arg(worker, "--node-iface") == "w0=eth0,w1=eth1"
    assert s.env == {"PYTHONPATH": "/src", "SLURM_CONF": "/lab/slurm.conf"}
    launch = dict(run.launch)
    assert launch == {"launcher": "srun", "slurm_job": "4711", "submit_host": "mgmt", "job_name": launcher.job_name}
    assert any(n.startswith("launcher: srun, Slurm job 4711") for n in run.notes)
    assert run.config.nodes == ("w0", "w1")
    assert ex.ran == []  # srun finished: nothing left to cancel


def test_under_srun_each_rank_is_recorded_where_slurm_placed_it() -> None:
    host, _ = _slurm_host(_print(_events(0, label=True, job="5", node="w1") + _events(1, label=True, job="5",
                                                                                        node="w0")))
    run = run_allreduce(_ranks([FakeExecutor("w0"), FakeExecutor("w1")]), SPEC, launcher=SrunLauncher(host))
    assert run.config.nodes == ("w1", "w0") and run.config.interfaces == ("eth1", "eth0")


def test_the_launch_is_kept_in_the_run_file(tmp_path: Path) -> None:
    host, _ = _slurm_host(_print(_events(0, label=True, job="9") + _events(1, label=True, job="9")))
    run = run_allreduce(_ranks([FakeExecutor("w0"), FakeExecutor("w1")]), SPEC, launcher=SrunLauncher(host))
    save_run(run, tmp_path / "run.json")
    assert json.loads((tmp_path / "run.json").read_text())["launch"]["slurm_job"] == "9"
    loaded = load_run(tmp_path / "run.json")
    assert loaded == run and loaded.config_hash == run.config_hash


def test_srun_ranks_without_a_job_id_are_not_a_slurm_run() -> None:
    host, _ = _slurm_host(_print(_events(0, label=True) + _events(1, label=True)))
    with pytest.raises(BenchError, match="reported no Slurm job id"):
        run_allreduce(_ranks([FakeExecutor("w0"), FakeExecutor("w1")]), SPEC, launcher=SrunLauncher(host))


def test_two_jobs_in_one_run_are_refused() -> None:
    host, _ = _slurm_host(_print(_events(0, label=True, job="1") + _events(1, label=True, job="2")))
    with pytest.raises(BenchError, match="one benchmark is one job step"):
        run_allreduce(_ranks([FakeExecutor("w0"), FakeExecutor("w1")]), SPEC, launcher=SrunLauncher(host))


def test_srun_refused_is_a_clear_error_naming_the_submit_host() -> None:
    host, _ = _slurm_host("echo 'srun: error: Unable to allocate resources: Invalid node name specified' >&2; exit 1")
    with pytest.raises(BenchError, match=r"srun on mgmt exited with 1: srun: error: Unable to allocate") as err:
        run_allreduce(_ranks([FakeExecutor("w0"), FakeExecutor("w1")]), SPEC, launcher=SrunLauncher(host))
    assert err.value.hint is not None and "slurm-client" in err.value.hint and "sinfo" in err.value.hint


def test_srun_waiting_past_the_timeout_is_cancelled_by_its_job_id_and_stopped() -> None:
    host, ex = _slurm_host("echo 'srun: job 321 queued and waiting for resources' >&2; exec sleep 60")
    t0 = time.monotonic()
    with pytest.raises(BenchError, match="did not finish within 2 s"):
        run_allreduce(_ranks([FakeExecutor("w0"), FakeExecutor("w1")]), replace(SPEC, timeout_s=2),
                      launcher=SrunLauncher(host))
    assert time.monotonic() - t0 < 15
    assert ex.ran == [(["scancel", "321"], {"SLURM_CONF": "/lab/slurm.conf"})]
    assert ex.spawned[0].process.poll() is not None  # srun itself stopped by pid


def test_srun_without_a_known_job_is_cancelled_by_its_unique_name() -> None:
    host, ex = _slurm_host("exec sleep 60")
    launcher = SrunLauncher(host)
    with pytest.raises(BenchError, match="did not finish"):
        run_allreduce(_ranks([FakeExecutor("w0"), FakeExecutor("w1")]), replace(SPEC, timeout_s=1), launcher=launcher)
    assert ex.ran[0][0] == ["scancel", f"--name={launcher.job_name}"]
    assert ex.spawned[0].process.poll() is not None


def test_a_failing_start_ends_what_was_started() -> None:
    a = FakeExecutor("a", "exec sleep 60")

    class Broken(FakeExecutor):
        def spawn(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, stdout: Path | None = None,
                  stderr: Path | None = None) -> LocalProcess:
            from ringfence.targets.interface import TargetError

            raise TargetError("b: ssh to root@b failed: connection refused")

    with pytest.raises(BenchError, match="cannot start rank 1 on b: b: ssh to root@b failed"):
        run_allreduce(_ranks([a, Broken("b")]), SPEC)
    assert a.spawned[0].process.poll() is not None


@pytest.mark.parametrize(("text", "names"), [
    ("worker-0", ["worker-0"]),
    ("worker-[0-1]", ["worker-0", "worker-1"]),
    ("n[08-10],mgmt", ["n08", "n09", "n10", "mgmt"]),
    ("a[1,3-4]b,c", ["a1b", "a3b", "a4b", "c"]),
])
def test_slurm_host_lists_expand_in_order(text: str, names: list[str]) -> None:
    assert expand_hostlist(text) == names


def _args(*argv: str) -> argparse.Namespace:
    from ringfence.bench.worker import _parse

    return _parse(["--sizes", "1024", *argv])


def test_the_worker_takes_its_place_from_the_command_line_then_torchrun_then_slurm() -> None:
    from ringfence.bench.worker import placement

    direct = placement(_args("--rank", "1", "--world", "2", "--master", "10.0.0.1:29500"), {"RANK": "7"})
    assert (direct.rank, direct.world, direct.init_method, direct.launcher) == (1, 2, "tcp://10.0.0.1:29500",
                                                                                 "direct")
    torch_env = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29400",
                 "TORCHELASTIC_RUN_ID": "none"}
    tr = placement(_args(), torch_env)
    assert (tr.rank, tr.world, tr.local_rank, tr.init_method, tr.launcher) == (3, 4, 1, "env://", "torchrun")
    slurm_env = {"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0", "SLURM_STEP_NODELIST": "w[0-1]",
                 "SLURMD_NODENAME": "w1", "SLURM_JOB_ID": "88"}
    sl = placement(_args("--master-port", "29700", "--node-addr", "w0=10.0.0.1,w1=10.0.0.2"), slurm_env)
    assert (sl.rank, sl.world, sl.init_method, sl.launcher, sl.node, sl.slurm_job) == (
        1, 2, "tcp://10.0.0.1:29700", "srun", "w1", "88")
    # a real cluster's node names resolve: the first node's name is the master when no address is given
    assert placement(_args("--master-port", "1"), slurm_env).init_method == "tcp://w0:1"
    with pytest.raises(ValueError, match="neither torchrun's nor Slurm's"):
        placement(_args(), {})
    with pytest.raises(ValueError, match="--master-port"):
        placement(_args(), slurm_env)
    with pytest.raises(ValueError, match="did not set LOCAL_RANK"):
        placement(_args(), {k: v for k, v in torch_env.items() if k != "LOCAL_RANK"})


def test_a_worker_without_a_place_reports_an_error_event(capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from ringfence.bench.worker import main

    for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "TORCHELASTIC_RUN_ID", "SLURM_PROCID"):
        monkeypatch.delenv(k, raising=False)
    assert main(["--sizes", "1024"]) == 1
    ev = json.loads(capsys.readouterr().out)
    assert ev["event"] == "error" and ev["rank"] is None and "neither torchrun's nor Slurm's" in ev["message"]


def test_real_torchrun_on_loopback() -> None:
    """Two torchrun agents (two 'nodes' on this machine), one rank each, a real gloo all-reduce."""
    pytest.importorskip("torch")
    run = run_allreduce(local_ranks(["n0", "n1"]), replace(SPEC, sizes=(1 << 16,), timeout_s=120),
                        launcher="torchrun")
    assert run.config.nodes == ("n0", "n1") and run.wrong_total() == 0
    assert dict(run.launch) == {"launcher": "torchrun"}
