"""The lab's scheduler: a real Slurm (munged + slurmctld on mgmt, one ``slurmd -N NODE`` per worker).

Every file, socket and PID file lives under the lab's own directory (``<lab>/slurm``), so several labs
run side by side on one machine: their namespaces separate the ports (6817/6818 inside each), the
paths here separate everything on the shared file system. munged's socket is a path, and a path is
reachable from every network namespace, so the one munged on mgmt authenticates the whole lab.

Training jobs are submitted with ``sbatch``; the batch script ``srun``s one rank per member node. Each
rank writes its own pid file in the lab's pid directory before it becomes the worker agent, so the lab
records and ends the ranks by pid like every other process it started.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ringfence.lab import netns
from ringfence.lab.topology import LabError, Topology

#: The binaries the lab's scheduler needs, and the Debian package of each (scripts/sysdeps.sh installs them).
BINARIES = {"munged": "munge", "slurmctld": "slurmctld", "slurmd": "slurmd", "sbatch": "slurm-client",
            "squeue": "slurm-client", "sinfo": "slurm-client"}
CTLD_PORT = 6817
#: Below 1024, outside every job's collective range (1024-65535): probe planning takes the lowest listening
#: port in that range on a member as the job's rendezvous, and must keep finding gloo's, not slurmd's.
SLURMD_PORT = 818
#: srun's listening ports (SrunPortRange): above the kernel's ephemeral range (32768-60999), where gloo's pair
#: listeners live, so a port here is always srun's and the policy's srun service can never claim a gloo socket.
#: 32 ports: an srun listens on a few (messages, stdio), and a node runs one or two at a time.
SRUN_PORTS = "61000-61031"
#: CPUs each lab node declares (config_overrides: slurmd reports these, not the machine's), so several
#: jobs' ranks fit on one node without oversubscription settings.
NODE_CPUS = 8


def require_slurm() -> None:
    """A clear error when Slurm or munge is not installed (no silent fallback to unscheduled ranks)."""
    missing = sorted({pkg for exe, pkg in BINARIES.items() if shutil.which(exe) is None})
    if missing:
        raise LabError(f"the lab runs its training jobs through Slurm, but {', '.join(missing)} "
                       "is not installed", hint="sudo scripts/sysdeps.sh (installs slurm-wlm and munge)")


@dataclass(frozen=True)
class SlurmPaths:
    """Where one lab's scheduler keeps its files (all under ``<lab>/slurm``)."""

    root: Path

    @property
    def conf(self) -> Path:
        """slurm.conf (clients find it through ``SLURM_CONF``)."""
        return self.root / "slurm.conf"

    @property
    def munge_key(self) -> Path:
        """The lab's own munge key."""
        return self.root / "munge" / "munge.key"

    @property
    def munge_socket(self) -> Path:
        """munged's socket."""
        return self.root / "munge" / "munge.socket"

    @property
    def jobcomp(self) -> Path:
        """jobcomp/filetxt: one line per finished job."""
        return self.root / "jobcomp.txt"

    def rank_script(self, job: str) -> Path:
        """The script ``srun`` runs on every member node of ``job``."""
        return self.root / f"rank-{job}.sh"

    def batch_script(self, job: str) -> Path:
        """The script ``sbatch`` submits for ``job``."""
        return self.root / f"batch-{job}.sh"


def client_env(paths: SlurmPaths) -> dict[str, str]:
    """Environment for Slurm client commands (squeue, sbatch, scancel) aimed at this lab's controller."""
    return {"SLURM_CONF": str(paths.conf)}


def prepare(topo: Topology, paths: SlurmPaths, log_dir: Path) -> None:
    """Write the munge key and slurm.conf, and make the directories the daemons expect."""
    workers = [n for n in topo.node_names() if n.startswith("worker-")]
    for d in (paths.root, paths.munge_key.parent, paths.root / "ctld", *(paths.root / "spool" / w for w in workers)):
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
    # munged insists on a private key file; 1 KiB of randomness is what mungekey writes
    fd = os.open(paths.munge_key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(secrets.token_bytes(1024))
    # slurmd initialises a cgroup plugin even with proctrack/linuxproc and task/none; `ip netns exec`
    # remounts /sys without the cgroup mounts, which autodetection then fails on. cgroup/v1 with nothing
    # to mount loads without touching the host's cgroup tree. (cgroup.conf is read beside slurm.conf.)
    (paths.root / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\nCgroupAutomount=no\n")
    lines = [
        f"# Slurm for ringfence lab {topo.prefix}: every path below is this lab's own.",
        f"ClusterName={topo.prefix}",
        # the controller's name must be this machine's host name (namespaces share it); its address is mgmt's
        f"SlurmctldHost={socket.gethostname().split('.')[0]}({topo.address('mgmt')})",
        f"SlurmctldPort={CTLD_PORT}",
        f"SlurmdPort={SLURMD_PORT}",
        f"SrunPortRange={SRUN_PORTS}",  # fixed, so the policy can approve exactly these (least path)
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={paths.munge_socket}",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"StateSaveLocation={paths.root / 'ctld'}",
        f"SlurmdSpoolDir={paths.root / 'spool'}/%n",
        f"SlurmctldPidFile={paths.root / 'slurmctld.pid'}",
        f"SlurmdPidFile={paths.root / 'slurmd-%n.pid'}",
        f"SlurmctldLogFile={log_dir / 'slurmctld.log'}",
        f"SlurmdLogFile={log_dir / 'slurmd-%n.log'}",
        "ProctrackType=proctrack/linuxproc",  # no cgroup delegation inside the lab's namespaces
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        "SlurmdParameters=config_overrides",
        "JobCompType=jobcomp/filetxt",
        f"JobCompLoc={paths.jobcomp}",
        "AccountingStorageType=accounting_storage/none",
        "JobAcctGatherType=jobacct_gather/none",
        "MpiDefault=none",
        "MailProg=/bin/true",
        "SchedulerParameters=batch_sched_delay=0",
        "ReturnToService=2",
        "MinJobAge=300",
        # An enforcement test may cut mgmt <-> worker paths for a while: a missed ping must not mark a
        # node down and kill the training job running on it.
        "SlurmdTimeout=0",
        "KillWait=2",
        *(f"NodeName={w} NodeAddr={topo.address(w)} CPUs={NODE_CPUS} State=UNKNOWN" for w in workers),
        f"PartitionName=lab Nodes={','.join(workers)} Default=YES MaxTime=INFINITE State=UP",
    ]
    paths.conf.write_text("\n".join(lines) + "\n")


def munged_argv(paths: SlurmPaths, log_dir: Path) -> list[str]:
    """munged in the foreground on the lab's own socket, key, PID, seed and log files."""
    return ["munged", "--foreground", "--force", f"--socket={paths.munge_socket}", f"--key-file={paths.munge_key}",
            f"--pid-file={paths.root / 'munge' / 'munged.pid'}", f"--seed-file={paths.root / 'munge' / 'seed'}",
            f"--log-file={log_dir / 'munged.log'}"]


def slurmctld_argv(paths: SlurmPaths) -> list[str]:
    """slurmctld in the foreground, state cleared (a lab starts with no jobs)."""
    return ["slurmctld", "-D", "-i", "-f", str(paths.conf)]


def slurmd_argv(paths: SlurmPaths, node: str) -> list[str]:
    """One slurmd in the foreground, as node ``node`` (multiple-slurmd: ``-N``)."""
    return ["slurmd", "-D", "-N", node, "-f", str(paths.conf)]


def write_job(paths: SlurmPaths, job: str, ranks: dict[str, tuple[list[str], dict[str, str], Path]]) -> Path:
    """Write ``job``'s rank script (node → its argv, environment and pid file) and batch script; returns the
    batch script. Each rank writes its pid file, then *execs* its agent, so the pid is the agent's."""
    cases = []
    for node, (argv, env, pidfile) in ranks.items():
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()))
        cases.append(f"  {shlex.quote(node)}) echo $$ > {shlex.quote(str(pidfile))}; "
                     f"exec env {exports} {shlex.join(argv)} ;;")
    rank = paths.rank_script(job)
    rank.write_text("#!/bin/sh\n# one rank of lab job " + job + ", on the node slurmd runs as\n"
                    'case "$SLURMD_NODENAME" in\n' + "\n".join(cases) +
                    '\n  *) echo "no rank for node $SLURMD_NODENAME" >&2; exit 2 ;;\nesac\n')
    rank.chmod(0o700)
    batch = paths.batch_script(job)
    batch.write_text(f"#!/bin/sh\nexec srun --kill-on-bad-exit=1 --ntasks-per-node=1 {shlex.quote(str(rank))}\n")
    batch.chmod(0o700)
    return batch


def sbatch_argv(paths: SlurmPaths, job: str, nodes: tuple[str, ...], log_dir: Path) -> list[str]:
    """Submit ``job`` on exactly ``nodes``, one task each; prints the job id (``--parsable``)."""
    return ["sbatch", "--parsable", f"--job-name={job}", f"--nodes={len(nodes)}", f"--ntasks={len(nodes)}",
            f"--nodelist={','.join(nodes)}", f"--output={log_dir / f'job-{job}-%j.log'}",
            f"--chdir={paths.root}", str(paths.batch_script(job))]


def rank_pids(job: str, pidfiles: dict[str, Path], ctld_log: Path, *, timeout: float = 60.0) -> dict[str, int]:
    """node → pid of ``job``'s rank there, read from the pid file each rank writes before it execs its agent
    (polled: Slurm schedules and launches in its own time)."""
    deadline = time.monotonic() + timeout
    found: dict[str, int] = {}
    while len(found) < len(pidfiles):
        for node, pidfile in pidfiles.items():
            text = pidfile.read_text().strip() if node not in found and pidfile.exists() else ""
            if text.isdigit():
                found[node] = int(text)
        if len(found) < len(pidfiles):
            if time.monotonic() > deadline:
                tail = "\n".join(ctld_log.read_text(errors="replace").splitlines()[-8:]) if ctld_log.exists() else ""
                raise LabError(f"Slurm did not start job {job}'s ranks on {sorted(set(pidfiles) - set(found))} "
                               f"within {timeout:.0f}s:\n{tail}")
            time.sleep(0.05)
    return found


def run_client(namespace: str, argv: list[str], paths: SlurmPaths, *, timeout: float = 30.0) -> str:
    """Run a Slurm client command in ``namespace`` against this lab's controller; its stdout."""
    env = {**os.environ, **client_env(paths)}
    try:
        done = subprocess.run(["ip", "netns", "exec", namespace, *argv], capture_output=True, text=True,
                              env=env, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LabError(f"{argv[0]} in {namespace} failed: {exc}") from exc
    if done.returncode != 0:
        raise LabError(f"{shlex.join(argv)} in {namespace} exited {done.returncode}: {done.stderr.strip()[-500:]}")
    return done.stdout




def wait_nodes_ready(namespace: str, paths: SlurmPaths, nodes: Iterable[str], *, timeout: float = 30.0) -> None:
    """Poll ``sinfo`` until every node in ``nodes`` has registered (idle, mixed or allocated): a job
    submitted then is scheduled at once instead of at the controller's next scheduling pass."""
    wanted = set(nodes)
    deadline = time.monotonic() + timeout
    states: dict[str, str] = {}
    while True:
        out = run_client(namespace, ["sinfo", "--noheader", "--Node", "--format=%N %t"], paths)
        states = dict(line.split(None, 1) for line in out.splitlines() if " " in line.strip())
        if all(states.get(n, "").rstrip("*~#!%$@^-").strip() in ("idle", "mix", "alloc") for n in wanted):
            return
        if time.monotonic() > deadline:
            raise LabError(f"Slurm nodes did not register within {timeout:.0f}s: {states}")
        time.sleep(0.1)


def _job_processes(namespaces: Iterable[str], marker: str) -> tuple[set[int], set[int]]:
    """(step daemons, job-step launchers) inside the lab's namespaces: every ``slurmstepd`` there (started
    by the lab's slurmd, so ours), and every ``srun`` whose command line names the lab's directory (the
    batch script's launcher of the rank script)."""
    steps: set[int] = set()
    launchers: set[int] = set()
    for ns in namespaces:
        for pid in netns.namespace_pids(ns):
            try:
                comm = Path(f"/proc/{pid}/comm").read_text().strip()
                if comm == "slurmstepd":
                    steps.add(pid)
                elif comm == "srun" and marker in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
                    launchers.add(pid)
            except OSError:
                continue  # ended meanwhile
    return steps, launchers


def end_job_steps(namespaces: Iterable[str], marker: str, *, timeout: float = 10.0) -> set[int]:
    """End what Slurm started for the lab's jobs once their ranks ended; returns the pids killed.

    The batch script's ``srun`` is killed at once, by pid: with its ranks gone it waits on a controller
    that is about to stop, ignores SIGTERM, and, orphaned when its step daemon goes, would outlive the
    lab. Then the step daemons get ``timeout`` s to finish (observed in /proc) before SIGKILL: a step
    daemon names no lab path on its command line, so the marker check of :func:`procs.stop` cannot vouch
    for it — living in this lab's namespace does.
    """
    spaces = tuple(namespaces)
    steps, launchers = _job_processes(spaces, marker)
    for pid in launchers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while steps and time.monotonic() < deadline:
        time.sleep(0.1)
        steps = _job_processes(spaces, marker)[0]
    for pid in steps:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return launchers | steps


__all__ = [
    "BINARIES", "CTLD_PORT", "NODE_CPUS", "SLURMD_PORT", "SRUN_PORTS", "SlurmPaths", "client_env", "end_job_steps",
    "munged_argv", "prepare", "rank_pids", "require_slurm", "run_client", "sbatch_argv", "slurmctld_argv",
    "slurmd_argv", "wait_nodes_ready", "write_job",
]
