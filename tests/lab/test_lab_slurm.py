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


def test_lab_down_leaves_no_slurm_process_behind() -> None:
    # the batch script's srun outlived every Slurm lab once: orphaned when its step daemon went, waiting on
    # a stopped controller, ignoring SIGTERM — nothing of a lab may run once `lab down` returns
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
        # enforced, the lab's policy (which does not yet declare Slurm's own paths) cuts srun off its
        # controller: the case in which it was left behind
        from ringfence.enforce.apply import apply_policy
        from ringfence.evidence import EvidenceStore
        from ringfence.lab.points import lab_inventory, lab_points

        apply_policy(lab.policy(), lab_points(lab), EvidenceStore.open(lab.paths.directory / "evidence"),
                     target=f"lab:{lab.name}", inventory=lab_inventory(lab))
    finally:
        lab.down()
    assert _naming(directory) == []
