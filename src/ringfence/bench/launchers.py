"""How the benchmark's ranks are started: ``direct``, ``torchrun`` or ``srun``, an explicit registry.

* ``direct`` — one ``python -m ringfence.bench.worker --rank R --world W --master A:P`` per rank, each
  through its node's executor (a lab namespace, an SSH host, this machine).
* ``torchrun`` — one ``python -m torch.distributed.run`` (what the ``torchrun`` script runs) per node,
  through that node's executor, with a static rendezvous at the first node (``--nnodes N
  --nproc-per-node K --node-rank i --master-addr A --master-port P``); the ranks take their rank and
  world from torchrun's ``RANK``/``WORLD_SIZE``/``LOCAL_RANK``/``MASTER_ADDR``/``MASTER_PORT``.
* ``srun`` — one ``srun --nodes N --ntasks-per-node K --nodelist … python -m ringfence.bench.worker``
  through the executor of the Slurm submit host; the ranks take theirs from ``SLURM_PROCID``/
  ``SLURM_NTASKS``/``SLURM_LOCALID``, the master is the first node of the step. ``--label`` keeps each
  task's lines whole; the Slurm job id the ranks report is the run's identity evidence.

Whatever the launcher, every rank speaks the worker's JSON lines; a line names its rank, so one
stream may carry several ranks (torchrun's node, srun's whole step). What a launcher started is
ended when the run ends: by pid through the executor, and for ``srun`` by ``scancel`` of its job.
"""

from __future__ import annotations

import contextlib
import re
import secrets
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ringfence.bench.errors import BenchError
from ringfence.errors import RingfenceError
from ringfence.targets.interface import Executor, Host, Process

if TYPE_CHECKING:
    from ringfence.bench.driver import BenchSpec, RankSpec

__all__ = [
    "LAUNCHERS",
    "DirectLauncher",
    "Launch",
    "LaunchContext",
    "Launcher",
    "SrunLauncher",
    "Stream",
    "TorchrunLauncher",
    "launcher_names",
    "make_launcher",
    "worker_args",
]

WORKER = "ringfence.bench.worker"
#: how torchrun is started on a host: the torchrun console script is exactly this module's main, and
#: running it with the host's own interpreter guarantees the ranks import the ringfence next to it
TORCHRUN = ("-m", "torch.distributed.run")


@dataclass
class Stream:
    """One process a launcher started; its stdout carries the JSON events of ``ranks``."""

    label: str  # "rank 0 on worker-0", "torchrun on worker-0", "srun on mgmt"
    host: str
    process: Process
    stdout: Path
    stderr: Path
    ranks: tuple[int, ...]
    hint: str | None = None  # what to install or run when it fails before its ranks say why
    offset: int = 0
    pending: str = ""


@dataclass
class Launch:
    """What one launcher started for one run, and what it learnt (the Slurm job) as the ranks spoke."""

    launcher: str
    nodes: list[str]  # node of each global rank (as planned; a rank's ``ready`` may correct it)
    interfaces: list[str]  # GLOO_SOCKET_IFNAME of each rank ("" when none was set)
    by_node: dict[str, str] = field(default_factory=dict)  # node → its GLOO_SOCKET_IFNAME, for a rank Slurm placed
    streams: list[Stream] = field(default_factory=list)
    identity: dict[str, str] = field(default_factory=dict)  # launcher, slurm_job, submit_host, …
    cleanup: Callable[[Launch], None] | None = None  # e.g. scancel, before the processes are stopped

    def observe(self, rank: int, event: Mapping[str, Any]) -> None:
        """Learn from a rank's ``ready`` event: its node under srun, and the Slurm job it runs in."""
        if event.get("event") != "ready":
            return
        node = event.get("node")
        if isinstance(node, str) and node and self.launcher == "srun":
            self.nodes[rank] = node
            self.interfaces[rank] = self.by_node.get(node, self.interfaces[rank])
        job = event.get("slurm_job")
        if isinstance(job, str) and job:
            seen = self.identity.setdefault("slurm_job", job)
            if seen != job:
                raise BenchError(f"rank {rank} runs in Slurm job {job}, rank 0's ranks in job {seen}: "
                                 "one benchmark is one job step")

    def stop(self) -> None:
        """End everything started: the launcher's own clean-up first, then every process by pid."""
        try:
            if self.cleanup is not None:
                self.cleanup(self)
        finally:
            for stream in self.streams:
                stream.process.stop(timeout=5.0)


@dataclass(frozen=True)
class LaunchContext:
    """What a launcher is asked to start: the ranks (rank 0 first), the spec, the rendezvous."""

    ranks: Sequence[RankSpec]
    spec: BenchSpec
    master_addr: str
    master_port: int
    workdir: Path
    python: tuple[str, ...]  # for a rank whose host names no interpreter of its own

    def python_of(self, rank: RankSpec) -> tuple[str, ...]:
        """How ringfence modules start on ``rank``'s host."""
        return tuple(rank.python) or self.python


class Launcher(Protocol):
    """Starts the ranks of one run and appends each process it starts to ``launch.streams`` at once
    (so that a failure half-way still ends what was started)."""

    name: str

    def start(self, ctx: LaunchContext, launch: Launch) -> None:
        """Start every rank of ``ctx``."""
        ...


def worker_args(spec: BenchSpec) -> list[str]:
    """The worker's arguments every launcher passes (everything but where its rank and master come from)."""
    argv = ["--sizes", ",".join(str(s) for s in spec.sizes), "--backend", spec.backend, "--dtype", spec.dtype,
            "--warmup", str(spec.warmup), "--iters", str(spec.iterations), "--repeats", str(spec.repeats),
            "--device", spec.device, "--timeout", str(int(min(spec.collective_timeout_s, spec.timeout_s)))]
    for plugin in spec.plugins:
        argv += ["--plugin", plugin]
    return argv


def _node_groups(ranks: Sequence[RankSpec]) -> list[tuple[RankSpec, int]]:
    """The nodes in rank order with their ranks per node; torchrun and srun place the same count on each,
    rank i·K+l on node i, so the ranks of one node must be consecutive."""
    groups: list[tuple[RankSpec, int]] = []
    for rs in ranks:
        if groups and groups[-1][0].node == rs.node:
            groups[-1] = (groups[-1][0], groups[-1][1] + 1)
        elif any(g.node == rs.node for g, _ in groups):
            raise BenchError(f"node {rs.node} holds ranks that are not consecutive: a launcher per node places "
                             "ranks i·K … i·K+K-1 on node i")
        else:
            groups.append((rs, 1))
    counts = {k for _, k in groups}
    if len(counts) != 1:
        raise BenchError("every node needs the same number of ranks with torchrun or srun (got "
                         + ", ".join(f"{g.node}: {k}" for g, k in groups) + ")")
    return groups


def _spawn(launch: Launch, ctx: LaunchContext, *, label: str, host: str, executor: Executor, argv: list[str],
           env: Mapping[str, str], ranks: tuple[int, ...], hint: str | None) -> None:
    n = len(launch.streams)
    out, err = ctx.workdir / f"stream{n}.out", ctx.workdir / f"stream{n}.err"
    try:
        proc = executor.spawn(argv, env=env, stdout=out, stderr=err)
    except RingfenceError as exc:
        raise BenchError(f"cannot start {label}: {exc.message}", hint=hint) from exc
    launch.streams.append(Stream(label, host, proc, out, err, ranks, hint))


class DirectLauncher:
    """One worker per rank, each through its node's executor (the rank, world and master on its command line)."""

    name = "direct"

    def start(self, ctx: LaunchContext, launch: Launch) -> None:
        """Start ``python -m ringfence.bench.worker --rank R`` for every rank."""
        world = len(ctx.ranks)
        host = f"[{ctx.master_addr}]" if ":" in ctx.master_addr else ctx.master_addr
        for r, rs in enumerate(ctx.ranks):
            env = {**rs.env, "MASTER_ADDR": ctx.master_addr, "MASTER_PORT": str(ctx.master_port), **ctx.spec.env}
            if rs.interface:
                env["GLOO_SOCKET_IFNAME"] = rs.interface
            argv = [*ctx.python_of(rs), "-m", WORKER, "--rank", str(r), "--world", str(world),
                    "--master", f"{host}:{ctx.master_port}", *worker_args(ctx.spec)]
            _spawn(launch, ctx, label=f"rank {r} on {rs.node}", host=rs.node, executor=rs.executor, argv=argv,
                   env=env, ranks=(r,), hint=f"is ringfence (with torch) installed on {rs.node}?")


class TorchrunLauncher:
    """One torchrun per node, through its executor; a static rendezvous at the first node."""

    name = "torchrun"

    @staticmethod
    def argv(python: Sequence[str], nnodes: int, nproc: int, node_rank: int, master_addr: str, master_port: int,
             spec: BenchSpec) -> list[str]:
        """The torchrun command of node ``node_rank``."""
        return [*python, *TORCHRUN, "--nnodes", str(nnodes), "--nproc-per-node", str(nproc),
                "--node-rank", str(node_rank), "--master-addr", master_addr, "--master-port", str(master_port),
                "--max-restarts", "0", "-m", WORKER, *worker_args(spec)]

    def start(self, ctx: LaunchContext, launch: Launch) -> None:
        """Start one torchrun agent per node (ranks i·K … i·K+K-1 on node i)."""
        groups = _node_groups(ctx.ranks)
        per = groups[0][1]
        for i, (rs, k) in enumerate(groups):
            python = ctx.python_of(rs)
            env = {**rs.env, **ctx.spec.env}
            if rs.interface:
                env["GLOO_SOCKET_IFNAME"] = rs.interface
            hint = (f"torchrun runs as `{shlex.join([*python, *TORCHRUN])}` on {rs.node}: install torch there "
                    "(torchrun ships with it) or use --launcher direct")
            _spawn(launch, ctx, label=f"torchrun on {rs.node}", host=rs.node, executor=rs.executor,
                   argv=self.argv(python, len(groups), per, i, ctx.master_addr, ctx.master_port, ctx.spec),
                   env=env, ranks=tuple(range(i * per, i * per + k)), hint=hint)


#: srun's notice of the job it waits for or was given (stderr), for a job whose ranks never spoke
_SRUN_JOB = re.compile(r"\bjob (\d+)\b")


class SrunLauncher:
    """One ``srun`` for the whole run, through the executor of the Slurm submit host."""

    name = "srun"

    def __init__(self, submit: Host, *, partition: str | None = None, cancel_timeout: float = 30.0) -> None:
        """``submit``: the host whose Slurm client reaches the controller (its ``env`` is used, e.g.
        ``SLURM_CONF``); ``partition``: where the step runs (default: the cluster's default)."""
        self.submit, self.partition, self.cancel_timeout = submit, partition, cancel_timeout
        self.job_name = f"ringfence-bench-{secrets.token_hex(4)}"

    def argv(self, ctx: LaunchContext) -> list[str]:
        """The srun command line (every rank's rendezvous and interface come from the node it lands on)."""
        groups = _node_groups(ctx.ranks)
        per = groups[0][1]
        nodes = [rs.node for rs, _ in groups]
        minutes = int(ctx.spec.timeout_s // 60) + 2  # Slurm ends the step itself should this driver vanish
        addrs = ",".join(f"{rs.node}={rs.address}" for rs, _ in groups)
        ifaces = ",".join(f"{rs.node}={rs.interface}" for rs, _ in groups if rs.interface)
        argv = ["srun", f"--job-name={self.job_name}", f"--nodes={len(nodes)}", f"--ntasks-per-node={per}",
                f"--ntasks={len(nodes) * per}", f"--nodelist={','.join(nodes)}", "--label", "--unbuffered",
                "--kill-on-bad-exit=1", "--export=ALL", "--chdir=/tmp", f"--time={minutes}"]
        if self.partition:
            argv.append(f"--partition={self.partition}")
        argv += [*ctx.python_of(groups[0][0]), "-m", WORKER, "--master-port", str(ctx.master_port),
                 "--node-addr", addrs]
        if ifaces:
            argv += ["--node-iface", ifaces]
        return argv + worker_args(ctx.spec)

    def start(self, ctx: LaunchContext, launch: Launch) -> None:
        """Start the step; on the way out, ``scancel`` the job it got (or, not yet known, its unique name)."""
        argv = self.argv(ctx)
        env = {**ctx.ranks[0].env, **self.submit.env, **ctx.spec.env}
        launch.identity.update({"submit_host": self.submit.name, "job_name": self.job_name})
        launch.cleanup = self._cancel
        hint = (f"srun runs on {self.submit.name}: is Slurm's client (slurm-client) installed there, slurmctld "
                f"reachable, and are {', '.join(rs.node for rs, _ in _node_groups(ctx.ranks))} in a partition "
                f"you may use? (`sinfo` on {self.submit.name}); or use --launcher direct")
        _spawn(launch, ctx, label=f"srun on {self.submit.name}", host=self.submit.name, executor=self.submit.executor,
               argv=argv, env=env, ranks=tuple(range(len(ctx.ranks))), hint=hint)

    def _cancel(self, launch: Launch) -> None:
        running = [s for s in launch.streams if s.process.poll() is None]
        if not running:
            return  # srun finished: its step and allocation ended with it
        job = launch.identity.get("slurm_job") or self._job_from_stderr(launch)
        target = [job] if job else [f"--name={self.job_name}"]
        env = {**self.submit.env}
        # a scancel that fails leaves the processes to be stopped by pid, and srun's --time bounds the job
        with contextlib.suppress(RingfenceError):
            self.submit.executor.run(["scancel", *target], timeout=self.cancel_timeout, env=env)
        if job:
            launch.identity.setdefault("cancelled", job)

    @staticmethod
    def _job_from_stderr(launch: Launch) -> str | None:
        for s in launch.streams:
            try:
                m = _SRUN_JOB.search(s.stderr.read_text(encoding="utf-8", errors="replace")[:20000])
            except OSError:
                continue
            if m:
                return m.group(1)
        return None


#: The launchers by name: an explicit table (nothing registers itself by being imported). ``srun`` needs
#: its submit host, so each entry is a factory taking it.
LAUNCHERS: dict[str, Callable[[Host | None], Launcher]] = {
    "direct": lambda _submit: DirectLauncher(),
    "torchrun": lambda _submit: TorchrunLauncher(),
    "srun": lambda submit: _srun(submit),
}


def _srun(submit: Host | None) -> Launcher:
    if submit is None:
        raise BenchError("the srun launcher needs the Slurm submit host (one whose srun reaches slurmctld)",
                         hint="give --submit-host NODE (the lab's is mgmt)")
    return SrunLauncher(submit)


def launcher_names() -> tuple[str, ...]:
    """The registered launchers' names."""
    return tuple(LAUNCHERS)


def make_launcher(name: str, submit: Host | None = None) -> Launcher:
    """The launcher ``name`` (``srun`` submitting through ``submit``); an unknown name is a :class:`BenchError`."""
    try:
        factory = LAUNCHERS[name]
    except KeyError:
        raise BenchError(f"unknown launcher {name!r}; one of {', '.join(LAUNCHERS)}") from None
    return factory(submit)
