"""The lab's training job runs under a real Slurm: squeue --json in mgmt's namespace (through the executor, as
on a real cluster) lists it with its nodes, and flows captured on the lab are attributed to it and its user."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ringfence.analyze.attribute import attribute_flows
from ringfence.cli import main
from ringfence.jobs.live import squeue_spans
from ringfence.jobs.slurm import parse_jobcomp, parse_squeue_json
from ringfence.lab import Lab
from ringfence.lab.netns import namespace_pids
from ringfence.observe.flows.registry import read_any

pytestmark = pytest.mark.privileged


@pytest.fixture(scope="module")
def slurm_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Lab, Path]]:
    """A lab of its own whose training job runs under Slurm (the session's lab starts its ranks directly),
    and an 8 s capture of its traffic."""
    from ringfence.errors import EnvironmentProblem
    from ringfence.lab.netns import require_privileges

    try:
        require_privileges()
    except EnvironmentProblem as exc:
        pytest.skip(f"the lab cannot run here: {exc.message}")
    running = Lab.up(workers=2, jobs=1, traffic=True, wait=True, scheduler=True)
    try:
        out = tmp_path_factory.mktemp("slurm-capture") / "slurm-lab.pcap"
        running.capture(8.0, out)
        yield running, out
    finally:
        running.down()


@pytest.fixture
def lab(slurm_lab: tuple[Lab, Path]) -> Lab:
    return slurm_lab[0]


@pytest.fixture
def lab_capture(slurm_lab: tuple[Lab, Path]) -> Path:
    return slurm_lab[1]


def test_squeue_in_mgmt_lists_the_training_job_with_its_nodes(lab: Lab) -> None:
    (job,) = lab.status().jobs
    spans = [s for s in squeue_spans(lab.site().host("mgmt")) if s.name == job.name and s.end is None]
    assert len(spans) == 1, spans
    assert spans[0].nodes == tuple(sorted(job.members)) and spans[0].user == "root"
    # the same, run by hand in mgmt's namespace
    assert [s.job for s in parse_squeue_json(lab.squeue_json(), "squeue") if s.name == job.name] == [spans[0].job]


def test_captured_flows_are_attributed_to_the_slurm_job_and_its_user(lab: Lab, lab_capture: Path) -> None:
    (job,) = lab.status().jobs
    # the job that ran during the capture: still running, or (restarted by an earlier test) finished and
    # kept by squeue for MinJobAge, and by jobcomp/filetxt for ever
    spans = list(squeue_spans(lab.site().host("mgmt")))
    if lab.slurm.jobcomp.exists():
        spans += parse_jobcomp(lab.slurm.jobcomp.read_bytes(), str(lab.slurm.jobcomp))
    flows = read_any(lab_capture).flows
    nodes = {n.addresses[0]: n.name for n in lab.status().nodes}
    out = attribute_flows(flows, spans, nodes).to_pylist()
    members = {lab.topology.address(m) for m in job.members}
    collective = [r for r in out if r["src"] in members and r["dst"] in members and r["protocol"] == "gloo"]
    storage = [r for r in out if r["src"] in members and r["dport"] == 8080]
    assert collective and storage
    by_id = {s.job: s for s in spans}
    for r in collective + storage:
        span = by_id[r["src_job"]]
        assert span.name == job.name and set(span.nodes) == set(job.members) and r["src_user"] == "root"
        assert span.start <= r["first_seen"] and (span.end is None or r["first_seen"] < span.end)
    assert all(r["dst_job"] == r["src_job"] and r["dst_user"] == "root" for r in collective)
    assert all(r["dst_job"] is None for r in storage)  # the storage node runs no job
    # nodes outside every job (user, jump, aux) get none
    others = {lab.topology.address(n) for n in ("user", "jump", "aux")}
    assert all(r["src_job"] is None for r in out if r["src"] in others)


def test_a_benchmark_launched_by_srun_runs_on_the_slurmd_nodes_and_names_its_job(lab: Lab, tmp_path: Path) -> None:
    """``bench allreduce --launcher srun``: one srun through mgmt's executor (the submit host), the ranks started by
    the workers' slurmd; the run has busbw figures and the job id, which the scheduler's own record confirms."""
    pytest.importorskip("torch")
    out = tmp_path / "srun-run.json"
    t0 = time.monotonic()
    assert main(["bench", "allreduce", "--target", "lab", "--lab", lab.name, "--nodes", "worker-0,worker-1",
                 "--launcher", "srun", "--submit-host", "mgmt", "--sizes", "1M", "--warmup", "1", "--iters", "3",
                 "--repeats", "1", "--timeout", "180", "-o", str(out)]) == 0
    took = time.monotonic() - t0
    doc = json.loads(out.read_text())
    assert doc["config"]["nodes"] == ["worker-0", "worker-1"]  # where SLURMD_NODENAME says each rank ran
    assert doc["config"]["interfaces"] == [lab.topology.interface(n) for n in ("worker-0", "worker-1")]
    results = [r for rep in doc["repeats"] for r in rep["results"]]
    assert len(results) == 1 and all(r["busbw"] > 0 and r["wrong"] == 0 for r in results)
    launch = doc["launch"]
    assert launch["launcher"] == "srun" and launch["submit_host"] == "mgmt" and launch["slurm_job"].isdigit()
    assert any(n.startswith(f"launcher: srun, Slurm job {launch['slurm_job']}") for n in doc["notes"])
    # the scheduler's own record of the job: jobcomp/filetxt writes it once the job has completed
    deadline = time.monotonic() + 15
    line = ""
    while not line and time.monotonic() < deadline:
        text = lab.slurm.jobcomp.read_text() if lab.slurm.jobcomp.exists() else ""
        line = next((x for x in text.splitlines() if f"JobId={launch['slurm_job']} " in x), "")
        time.sleep(0.2)
    assert f"Name={launch['job_name']}" in line and "NodeList=worker-[0-1]" in line, line
    assert "JobState=COMPLETED" in line, line
    # nothing of it is left: srun ended (on mgmt), and the ranks with it (on the workers)
    assert _naming(launch["job_name"]) == []
    ranks = [pid for n in ("worker-0", "worker-1") for pid in namespace_pids(lab.topology.namespace(n))
             if "ringfence.bench.worker" in _cmdline(pid)]
    assert ranks == []
    print(f"\nbench launched by srun (job {launch['slurm_job']}): {took:.1f} s", file=sys.__stderr__, flush=True)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""  # ended meanwhile


def _naming(directory: str) -> list[str]:
    out = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if directory in cmd:
            out.append(f"{proc.name} {cmd.strip()}")
    return out


def test_under_its_policy_slurm_runs_jobs_lateral_rpcs_are_dropped_and_lab_down_leaves_nothing(
        tmp_path: Path) -> None:
    """One enforced Slurm lab (its policy approves the scheduler's own paths, class management): a job
    submitted after ``apply`` is scheduled, its ranks start and train; aux's RPCs to a slurmd and to slurmctld
    are dropped by the policy (timeout, and the drop counter of exactly that probe moved). Then a policy
    without Slurm's paths cuts srun off its controller, and ``lab down`` must still leave nothing behind."""
    from ringfence.errors import EnvironmentProblem
    from ringfence.lab.netns import require_privileges

    try:
        require_privileges()
    except EnvironmentProblem as exc:
        pytest.skip(f"the lab cannot run here: {exc.message}")
    lab = Lab.up(workers=2, jobs=1, traffic=True, wait=True, scheduler=True)
    directory = f"{lab.paths.directory}/"
    try:
        assert any("srun" in p for p in _naming(directory))  # the job really runs under srun
        from ringfence.enforce.apply import FABRIC, apply_policy
        from ringfence.enforce.probe import denied_packets, tcp_probe
        from ringfence.evidence import EvidenceStore
        from ringfence.lab import slurm as sched
        from ringfence.lab.points import lab_inventory, lab_points
        from ringfence.lab.policy_text import render_policy
        from ringfence.policy import parse_policy

        points, store = lab_points(lab), EvidenceStore.open(lab.paths.directory / "evidence")
        policy = lab.policy()
        assert {s.name for s in policy.services if s.application == "slurm"} >= {"slurmctld", "worker-0-slurmd"}
        apply_policy(policy, points, store, target=f"lab:{lab.name}", inventory=lab_inventory(lab))
        t0 = time.monotonic()
        # permitted: the training job submitted again under the policy (sbatch → slurmctld → slurmd, srun →
        # every member's slurmd, slurmstepd → srun) starts its ranks, and the new ranks train
        (job,) = lab.topology.jobs
        lab.stop_traffic()
        for m in job.members:
            (lab.paths.status_dir / f"{m}-worker.json").unlink(missing_ok=True)
        lab.start_traffic(wait=False)
        ranks = {m: lab.agent_status().get(f"{m}-worker", {}) for m in job.members}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not all(
                int(r.get("counters", {}).get("steps", 0)) >= 2 for r in ranks.values()):
            time.sleep(0.3)
            ranks = {m: lab.agent_status().get(f"{m}-worker", {}) for m in job.members}
        assert all(int(r.get("counters", {}).get("steps", 0)) >= 2 for r in ranks.values()), ranks
        running = [s for s in squeue_spans(lab.site().host("mgmt")) if s.name == job.name and s.end is None]
        assert len(running) == 1 and running[0].nodes == tuple(sorted(job.members)), running
        took = time.monotonic() - t0
        # permitted too: a benchmark launched by srun on the submit host (mgmt); its ranks' slurmstepd answer
        # that srun on mgmt's SrunPortRange (train-a-slurm-submit-io), which the policy approves
        out = tmp_path / "srun-enforced.json"
        assert main(["bench", "allreduce", "--target", "lab", "--lab", lab.name, "--nodes", "worker-0,worker-1",
                     "--launcher", "srun", "--submit-host", "mgmt", "--sizes", "1M", "--warmup", "1", "--iters",
                     "3", "--repeats", "1", "--timeout", "180", "-o", str(out)]) == 0
        bench = json.loads(out.read_text())
        assert bench["launch"]["launcher"] == "srun" and bench["launch"]["submit_host"] == "mgmt"
        assert all(r["busbw"] > 0 and r["wrong"] == 0 for rep in bench["repeats"] for r in rep["results"])
        # denied: a Slurm RPC from a node the policy does not approve (aux, the workload zone's telemetry pod)
        w0, mgmt = lab.topology.address("worker-0"), lab.topology.address("mgmt")
        assert tcp_probe(points["mgmt"], w0, sched.SLURMD_PORT).outcome == "connected"
        for dst, port, dnode in ((w0, sched.SLURMD_PORT, "worker-0"), (mgmt, sched.CTLD_PORT, "mgmt")):
            p = tcp_probe(points["aux"], dst, port, timeout=1.5)
            assert p.outcome == "timeout", (dst, port, p)
            packets, where = denied_packets([points["aux"], points[FABRIC], points[dnode]],
                                            lab.topology.address("aux"), dst, p.sport, port)
            assert packets >= 1 and where[0].startswith("aux/"), (dst, port, where)
        print(f"\njob resubmitted under the policy, ranks training: {took:.1f} s", file=sys.__stderr__, flush=True)
        # without Slurm's paths the policy cuts srun off its controller: the case in which it was left behind
        apply_policy(parse_policy(render_policy(lab.topology), "lab without Slurm paths"), points, store,
                     target=f"lab:{lab.name}", inventory=lab_inventory(lab))
    finally:
        lab.down()
    assert _naming(directory) == []
