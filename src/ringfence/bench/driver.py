"""Run the all-reduce benchmark across nodes: one worker process per rank, through executors.

The driver starts ``python -m ringfence.bench.worker`` on each rank's executor (a lab namespace,
an SSH host; :class:`~ringfence.targets.local.LocalExecutor` on loopback for development), reads
the JSON lines each rank writes, reports progress as sizes complete, and builds a
:class:`~ringfence.bench.run.BenchRun` whose iteration times are the slowest rank's. Ranks are
stopped by pid when anything fails or the timeout passes.
"""

from __future__ import annotations

import json
import random
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ringfence import __version__
from ringfence.bench.run import BenchConfig, BenchRun, Repeat, SizeResult, size_result_from_times
from ringfence.bench.stats import DTYPES
from ringfence.errors import RingfenceError
from ringfence.targets.interface import Executor, Process

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


class BenchError(RingfenceError):
    """The benchmark could not run to completion (a rank failed, timed out, or spoke nonsense)."""


@dataclass(frozen=True)
class RankSpec:
    """Where one rank runs: its node name, the executor reaching it, the address it listens on,
    and the interface gloo must use (``GLOO_SOCKET_IFNAME``; the tunnel's when tunnelled)."""

    node: str
    executor: Executor
    address: str
    interface: str | None = None


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


@dataclass
class _Rank:
    spec: RankSpec
    process: Process
    stdout: Path
    stderr: Path
    offset: int = 0
    pending: str = ""
    events: list[dict[str, Any]] = field(default_factory=list)


def _free_port(address: str) -> int:
    # Only a loopback master can be probed from here; inside a namespace or on another host the port
    # space is not ours to see, so a random high port (collisions are rare and fail loudly) is used.
    if address.startswith("127.") or address == "::1":
        with socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET) as s:
            s.bind((address, 0))
            port: int = s.getsockname()[1]
            return port
    return random.randint(29500, 32999)


def _worker_argv(python: str, rank: int, world: int, master: str, spec: BenchSpec) -> list[str]:
    argv = [python, "-m", "ringfence.bench.worker", "--rank", str(rank), "--world", str(world),
            "--master", master, "--sizes", ",".join(str(s) for s in spec.sizes), "--backend", spec.backend,
            "--dtype", spec.dtype, "--warmup", str(spec.warmup), "--iters", str(spec.iterations),
            "--repeats", str(spec.repeats), "--device", spec.device,
            "--timeout", str(int(min(spec.collective_timeout_s, spec.timeout_s)))]
    for plugin in spec.plugins:
        argv += ["--plugin", plugin]
    return argv


def _read_events(rank: _Rank) -> list[dict[str, Any]]:
    try:
        with rank.stdout.open("rb") as fh:
            fh.seek(rank.offset)
            chunk = fh.read()
    except OSError as exc:
        raise BenchError(f"cannot read rank output {rank.stdout}: {exc.strerror or exc}") from exc
    rank.offset += len(chunk)
    text = rank.pending + chunk.decode("utf-8", errors="replace")
    lines = text.split("\n")
    rank.pending = lines.pop()
    new: list[dict[str, Any]] = []
    for line in lines:
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            # Not ours (a library printing to stdout); kept out of the protocol, not an error.
            continue
        if isinstance(event, dict) and "event" in event:
            new.append(event)
    rank.events.extend(new)
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
    master_port: int | None = None,
    progress: Callable[[Progress], None] | None = None,
    python: str = sys.executable,
    workdir: Path | None = None,
) -> BenchRun:
    """Run the benchmark with one rank per entry of ``ranks`` (rank 0 hosts the rendezvous)."""
    spec.validate()
    if len(ranks) < 2:
        raise BenchError("an all-reduce benchmark needs at least 2 ranks")
    world = len(ranks)
    master_addr = ranks[0].address
    port = master_port or _free_port(master_addr)
    master = f"[{master_addr}]:{port}" if ":" in master_addr else f"{master_addr}:{port}"
    with tempfile.TemporaryDirectory(prefix="ringfence-bench-", dir=workdir) as tmp:
        started: list[_Rank] = []
        try:
            for r, rs in enumerate(ranks):
                env = {"MASTER_ADDR": master_addr, "MASTER_PORT": str(port), **spec.env}
                if rs.interface:
                    env["GLOO_SOCKET_IFNAME"] = rs.interface
                out, err = Path(tmp, f"rank{r}.out"), Path(tmp, f"rank{r}.err")
                proc = rs.executor.spawn(_worker_argv(python, r, world, master, spec), env=env, stdout=out, stderr=err)
                started.append(_Rank(rs, proc, out, err))
            _supervise(started, spec, progress)
        finally:
            for rank in started:
                rank.process.stop(timeout=5.0)
        return _assemble(started, spec)


def _supervise(ranks: list[_Rank], spec: BenchSpec, progress: Callable[[Progress], None] | None) -> None:
    deadline = time.monotonic() + spec.timeout_s
    world = len(ranks)
    arrived: dict[tuple[int, int], dict[int, dict[str, Any]]] = {}
    done_per_repeat: dict[int, int] = {}
    while True:
        for r, rank in enumerate(ranks):
            for ev in _read_events(rank):
                if ev["event"] == "error":
                    raise BenchError(f"rank {r} on {rank.spec.node} failed: {ev.get('message', '?')}")
                if ev["event"] == "size":
                    key = (int(ev["repeat"]), int(ev["size"]))
                    arrived.setdefault(key, {})[r] = ev
                    if len(arrived[key]) == world and progress is not None:
                        done_per_repeat[key[0]] = done_per_repeat.get(key[0], 0) + 1
                        progress(Progress(key[0], spec.repeats, done_per_repeat[key[0]], len(spec.sizes),
                                          _combine(arrived[key], world)))
        codes = [rank.process.poll() for rank in ranks]
        for r, code in enumerate(codes):
            if code not in (None, 0):
                _read_events(ranks[r])
                errs = [e for e in ranks[r].events if e["event"] == "error"]
                why = errs[0].get("message", "") if errs else _tail(ranks[r].stderr) or "no output"
                raise BenchError(f"rank {r} on {ranks[r].spec.node} exited with {code}: {why}")
        if all(code == 0 for code in codes):
            for rank in ranks:
                _read_events(rank)
            return
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


def _assemble(ranks: list[_Rank], spec: BenchSpec) -> BenchRun:
    world = len(ranks)
    notes: list[str] = []
    ready = [next((e for e in rank.events if e["event"] == "ready"), None) for rank in ranks]
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
            for r, rank in enumerate(ranks):
                ev = next((e for e in rank.events if e["event"] == "size" and e["repeat"] == k and e["size"] == size),
                          None)
                if ev is None:
                    raise BenchError(f"rank {r} reported no result for {size} bytes in repeat {k + 1}")
                by_rank[r] = ev
            results.append(_combine(by_rank, world))
        started = next((str(e["started"]) for e in ranks[0].events if e["event"] == "repeat" and e["repeat"] == k), "")
        repeats.append(Repeat(results=tuple(results), started=started, source="ringfence bench allreduce"))
    config = BenchConfig(
        tool="ringfence",
        sizes=spec.sizes,
        dtype=spec.dtype,
        world_size=world,
        nodes=tuple(rank.spec.node for rank in ranks),
        warmup=spec.warmup,
        iterations=spec.iterations,
        versions=tuple(sorted(versions.items())),
        params=(("device", spec.device),),
        placement="in-place",
        backend=spec.backend,
        layer=spec.layer,
        interfaces=tuple(rank.spec.interface or "" for rank in ranks),
    )
    return BenchRun(config=config, repeats=tuple(repeats), notes=tuple(notes))
