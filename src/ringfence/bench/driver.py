"""Run the all-reduce benchmark across nodes: one worker process per rank, through executors.

A launcher (:mod:`ringfence.bench.launchers`: ``direct``, ``torchrun``, ``srun``) starts
``python -m ringfence.bench.worker`` for every rank through the executors (a lab namespace, an SSH
host, a Slurm submit host; :class:`~ringfence.targets.local.LocalExecutor` on loopback for
development); the driver reads the JSON lines the ranks write (each names its rank, so one stream
may carry several), reports progress as sizes complete, and builds a
:class:`~ringfence.bench.run.BenchRun` whose iteration times are the slowest rank's and whose
``launch`` says how the ranks were started (the Slurm job under srun). What was started is stopped —
by pid, and by ``scancel`` under srun — when anything fails or the timeout passes.
"""

from __future__ import annotations

import json
import random
import re
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ringfence import __version__
from ringfence.bench.errors import BenchError
from ringfence.bench.run import BenchConfig, BenchRun, Repeat, SizeResult, size_result_from_times
from ringfence.bench.stats import DTYPES
from ringfence.targets.interface import Executor
from ringfence.targets.ops import free_ports

if TYPE_CHECKING:
    from ringfence.bench.launchers import Launch, Launcher, Stream

__all__ = [
    "DEFAULT_SIZES",
    "BenchError",
    "BenchSpec",
    "Progress",
    "RankSpec",
    "parse_size",
    "parse_sizes",
    "run_allreduce",
    "sweep",
]

MiB = 1 << 20


def sweep(lo: int, hi: int, factor: int = 2) -> tuple[int, ...]:
    """Sizes lo, lo·factor, … up to hi inclusive (nccl-tests' ``-b lo -e hi -f factor``)."""
    if lo <= 0 or hi < lo or factor < 2:
        raise ValueError(f"bad sweep {lo}..{hi} ×{factor}")
    out = [lo]
    while out[-1] * factor <= hi:
        out.append(out[-1] * factor)
    return tuple(out)


#: 1 MiB .. 256 MiB, doubling.
DEFAULT_SIZES: tuple[int, ...] = sweep(MiB, 256 * MiB)

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10, "M": MiB, "MB": MiB, "MIB": MiB,
          "G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30}


def parse_size(text: str) -> int:
    """``4M``, ``4MiB``, ``512K``, ``1048576`` → bytes (binary units, as nccl-tests reads them)."""
    t = text.strip().upper()
    digits = t.rstrip("BKMGI")
    unit = t[len(digits):]
    if not digits.isdigit() or unit not in _UNITS:
        raise ValueError(f"{text!r} is not a size like 4M, 512K or 1048576")
    return int(digits) * _UNITS[unit]


def parse_sizes(text: str) -> tuple[int, ...]:
    """``1M..256M`` (doubling), ``1M..16M:4`` (factor 4), or a comma list ``1M,4M,64M``."""
    if ".." in text:
        rng, _, factor = text.partition(":")
        lo, _, hi = rng.partition("..")
        return sweep(parse_size(lo), parse_size(hi), int(factor) if factor else 2)
    return tuple(parse_size(s) for s in text.split(",") if s.strip())


@dataclass(frozen=True)
class RankSpec:
    """Where one rank runs: its node name, the executor reaching it, the address it listens on,
    and the interface gloo must use (``GLOO_SOCKET_IFNAME``; the tunnel's when tunnelled).

    Several ranks may name one node (consecutively): torchrun and srun then start that many per node."""

    node: str
    executor: Executor
    address: str
    interface: str | None = None
    python: tuple[str, ...] = ()  # how ringfence modules start on the host (empty: the driver's interpreter)
    env: Mapping[str, str] = field(default_factory=dict)  # the host's own additions (PYTHONPATH, SLURM_CONF)


@dataclass(frozen=True)
class BenchSpec:
    """What to measure. ``layer`` labels the arm (``none``, ``wireguard``…) and is not hashed."""

    sizes: tuple[int, ...] = DEFAULT_SIZES
    dtype: str = "float32"
    backend: str = "gloo"
    warmup: int = 5
    iterations: int = 20
    repeats: int = 1
    layer: str = "none"
    device: str = "cpu"
    plugins: tuple[str, ...] = ()  # MODULE:FUNC registering a torch.distributed backend in each rank
    env: Mapping[str, str] = field(default_factory=dict)  # extra environment for every rank
    timeout_s: float = 600.0  # the whole run; then every rank is stopped
    collective_timeout_s: float = 120.0  # one rendezvous or collective: a vanished peer fails fast

    def validate(self) -> None:
        """Refuse a spec the worker would choke on, before starting anything."""
        if self.dtype not in DTYPES:
            raise BenchError(f"unknown dtype {self.dtype!r}; one of {', '.join(sorted(DTYPES))}")
        elem = DTYPES[self.dtype]
        bad = [s for s in self.sizes if s <= 0 or s % elem]
        if not self.sizes or bad:
            raise BenchError(f"sizes must be positive multiples of {elem} bytes for {self.dtype}: {bad or 'none'}")
        if self.iterations < 1 or self.warmup < 0 or self.repeats < 1:
            raise BenchError("need iterations ≥ 1, warmup ≥ 0, repeats ≥ 1")


@dataclass(frozen=True)
class Progress:
    """One size finished on every rank."""

    repeat: int  # 0-based
    repeats: int
    done: int  # sizes finished in this repeat
    total: int
    result: SizeResult


#: where the rendezvous is placed on a host whose ports are read over its executor: below the kernel's
#: default ephemeral range (32768-60999), so an outgoing connection never holds it by chance
RENDEZVOUS_PORTS = (29500, 32767)


def _free_port(address: str, executor: Executor | None = None) -> int:
    """A port for rank 0's rendezvous. On loopback the kernel picks one; elsewhere one of
    :data:`RENDEZVOUS_PORTS` that nothing on rank 0's host listens on, read through its executor (a
    training job's own rendezvous, 29500, is the likeliest collision); a random one of the range only
    when the host's listeners cannot be read (a collision then fails loudly, EADDRINUSE)."""
    if address.startswith("127.") or address == "::1":
        with socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET) as s:
            s.bind((address, 0))
            port: int = s.getsockname()[1]
            return port
    lo, hi = RENDEZVOUS_PORTS
    free = free_ports(executor, lo, hi) if executor is not None else None
    if free is not None:
        if not free:
            raise BenchError(f"every rendezvous port {lo}-{hi} is in use on {address}")
        return random.choice(free)  # random among the free: two benchmarks started at once rarely clash
    return random.randint(lo, hi)


#: srun --label puts "N: " before each line of task N
_LABEL = re.compile(r"^\s*\d+: ")


def _read_events(stream: Stream) -> list[dict[str, Any]]:
    try:
        with stream.stdout.open("rb") as fh:
            fh.seek(stream.offset)
            chunk = fh.read()
    except OSError as exc:
        raise BenchError(f"cannot read the output of {stream.label} ({stream.stdout}): {exc.strerror or exc}") from exc
    stream.offset += len(chunk)
    text = stream.pending + chunk.decode("utf-8", errors="replace")
    lines = text.split("\n")
    stream.pending = lines.pop()
    new: list[dict[str, Any]] = []
    for line in lines:
        line = _LABEL.sub("", line, count=1)
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            # Not ours (a library printing to stdout); kept out of the protocol, not an error.
            continue
        if isinstance(event, dict) and "event" in event:
            new.append(event)
    return new


def _tail(path: Path, limit: int = 1500) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")[-limit:].strip()
    except OSError:
        return ""


def run_allreduce(
    ranks: Sequence[RankSpec],
    spec: BenchSpec,
    *,
    launcher: Launcher | str = "direct",
    master_port: int | None = None,
    progress: Callable[[Progress], None] | None = None,
    python: str = sys.executable,
    workdir: Path | None = None,
) -> BenchRun:
    """Run the benchmark with one rank per entry of ``ranks`` (rank 0's node hosts the rendezvous),
    started by ``launcher`` (a name of :data:`~ringfence.bench.launchers.LAUNCHERS` without a submit
    host, or a launcher); everything started is ended when it returns or raises."""
    from ringfence.bench.launchers import Launch, LaunchContext, make_launcher

    spec.validate()
    if len(ranks) < 2:
        raise BenchError("an all-reduce benchmark needs at least 2 ranks")
    chosen = make_launcher(launcher) if isinstance(launcher, str) else launcher
    master_addr = ranks[0].address
    port = master_port or _free_port(master_addr, ranks[0].executor)
    with tempfile.TemporaryDirectory(prefix="ringfence-bench-", dir=workdir) as tmp:
        launch = Launch(chosen.name, nodes=[r.node for r in ranks], interfaces=[r.interface or "" for r in ranks],
                        by_node={r.node: r.interface or "" for r in ranks})
        launch.identity["launcher"] = chosen.name
        try:
            chosen.start(LaunchContext(ranks, spec, master_addr, port, Path(tmp), (python,)), launch)
            events = _supervise(launch, len(ranks), spec, progress)
        finally:
            launch.stop()
        return _assemble(launch, events, spec)


def _rank_of(stream: Stream, event: Mapping[str, Any], world: int) -> int:
    r = event.get("rank")
    if not isinstance(r, int) or isinstance(r, bool) or r not in stream.ranks or not 0 <= r < world:
        raise BenchError(f"{stream.label} reported an event of rank {r!r}; it runs ranks "
                         f"{', '.join(map(str, stream.ranks))} of {world}")
    return r


def _supervise(launch: Launch, world: int, spec: BenchSpec,
               progress: Callable[[Progress], None] | None) -> dict[int, list[dict[str, Any]]]:
    deadline = time.monotonic() + spec.timeout_s
    events: dict[int, list[dict[str, Any]]] = {r: [] for r in range(world)}
    arrived: dict[tuple[int, int], dict[int, dict[str, Any]]] = {}
    done_per_repeat: dict[int, int] = {}

    def drain(stream: Stream) -> None:
        for ev in _read_events(stream):
            r = _rank_of(stream, ev, world)
            events[r].append(ev)
            launch.observe(r, ev)
            if ev["event"] == "error":
                raise BenchError(f"rank {r} on {launch.nodes[r]} failed: {ev.get('message', '?')}")
            if ev["event"] == "size":
                key = (int(ev["repeat"]), int(ev["size"]))
                arrived.setdefault(key, {})[r] = ev
                if len(arrived[key]) == world and progress is not None:
                    done_per_repeat[key[0]] = done_per_repeat.get(key[0], 0) + 1
                    progress(Progress(key[0], spec.repeats, done_per_repeat[key[0]], len(spec.sizes),
                                      _combine(arrived[key], world)))

    while True:
        for stream in launch.streams:
            drain(stream)
        codes = [stream.process.poll() for stream in launch.streams]
        for stream, code in zip(launch.streams, codes, strict=True):
            if code not in (None, 0):
                drain(stream)  # an error event the rank wrote before it exited names the cause
                why = _tail(stream.stderr) or "no output"
                raise BenchError(f"{stream.label} exited with {code}: {why}", hint=stream.hint)
        if all(code == 0 for code in codes):
            for stream in launch.streams:
                drain(stream)
            return events
        if time.monotonic() > deadline:
            raise BenchError(
                f"the benchmark did not finish within {spec.timeout_s:.0f} s; all ranks were stopped",
                hint="use fewer or smaller sizes, fewer iterations, or a longer --timeout",
            )
        time.sleep(0.05)


def _combine(by_rank: Mapping[int, Mapping[str, Any]], world: int) -> SizeResult:
    # Each iteration took as long as its slowest rank: the collective is done only when all are.
    per_rank = [list(map(float, by_rank[r]["times_us"])) for r in range(world)]
    n = len(per_rank[0])
    if any(len(t) != n for t in per_rank):
        raise BenchError("ranks reported different iteration counts for one size")
    times = [max(t[i] for t in per_rank) for i in range(n)]
    wrong = sum(int(by_rank[r]["wrong"]) for r in range(world))
    first = by_rank[0]
    return size_result_from_times(int(first["size"]), int(first["count"]), times, world, wrong)


def _launch_notes(launch: Launch) -> list[str]:
    ident = launch.identity
    if launch.launcher != "srun":
        return [f"launcher: {launch.launcher}"]
    job = ident.get("slurm_job")
    if not job:
        # without the job id the run cannot be tied to the scheduler's record: not a Slurm run as far as we know
        raise BenchError(f"the ranks srun started on {ident.get('submit_host', '?')} reported no Slurm job id "
                         "(SLURM_JOB_ID): the run cannot be attributed to a Slurm job")
    return [f"launcher: srun, Slurm job {job} ({ident.get('job_name', '?')}, submitted on "
            f"{ident.get('submit_host', '?')})"]


def _assemble(launch: Launch, events: Mapping[int, list[dict[str, Any]]], spec: BenchSpec) -> BenchRun:
    world = len(events)
    notes: list[str] = _launch_notes(launch)
    ready = [next((e for e in events[r] if e["event"] == "ready"), None) for r in range(world)]
    if any(e is None for e in ready):
        raise BenchError("a rank finished without announcing itself; is ringfence installed on every node?")
    versions = dict(ready[0]["versions"]) if ready[0] else {}
    for r, e in enumerate(ready[1:], start=1):
        if e and e["versions"] != versions:
            notes.append(f"rank {r} runs different versions: {e['versions']} vs rank 0 {versions}")
    versions["ringfence"] = __version__
    repeats: list[Repeat] = []
    for k in range(spec.repeats):
        results: list[SizeResult] = []
        for size in spec.sizes:
            by_rank: dict[int, dict[str, Any]] = {}
            for r in range(world):
                ev = next((e for e in events[r] if e["event"] == "size" and e["repeat"] == k and e["size"] == size),
                          None)
                if ev is None:
                    raise BenchError(f"rank {r} reported no result for {size} bytes in repeat {k + 1}")
                by_rank[r] = ev
            results.append(_combine(by_rank, world))
        started = next((str(e["started"]) for e in events[0] if e["event"] == "repeat" and e["repeat"] == k), "")
        repeats.append(Repeat(results=tuple(results), started=started, source="ringfence bench allreduce"))
    config = BenchConfig(
        tool="ringfence",
        sizes=spec.sizes,
        dtype=spec.dtype,
        world_size=world,
        nodes=tuple(launch.nodes),
        warmup=spec.warmup,
        iterations=spec.iterations,
        versions=tuple(sorted(versions.items())),
        params=(("device", spec.device),),
        placement="in-place",
        backend=spec.backend,
        layer=spec.layer,
        interfaces=tuple(launch.interfaces),
    )
    return BenchRun(config=config, repeats=tuple(repeats), notes=tuple(notes),
                    launch=tuple(sorted(launch.identity.items())))
