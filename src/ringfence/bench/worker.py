"""One rank of the all-reduce benchmark: ``python -m ringfence.bench.worker --rank R --world N ...``.

Started by a launcher of :mod:`ringfence.bench.launchers` through an executor (a lab namespace, an SSH
host, a pod). Its rank, world and rendezvous come from the command line (``direct``), else from
torchrun's environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``;
the rendezvous store is then torchrun's own), else from Slurm's (``SLURM_PROCID``, ``SLURM_NTASKS``,
``SLURM_LOCALID``; the master is the first node of the step, at its ``--node-addr`` address, on
``--master-port``).
It speaks JSON lines on stdout, one event per line, flushed as it goes so the driver can show
progress: ``ready`` (host, versions), ``repeat`` (a sweep starts), ``size`` (this rank's
per-iteration times and wrong-element count for one size), ``done``; or ``error`` and exit 1.

Each timed iteration: refill the buffer from a known pattern (not timed), barrier, time one
``all_reduce``, then check every element against the exact expected sum. The pattern keeps sums
small integers, exact in every supported dtype (bfloat16 up to 64 ranks).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib
import json
import os
import platform
import re
import socket
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ringfence.bench.stats import DTYPES

__all__ = ["PATTERN_PERIOD", "Placement", "expand_hostlist", "main", "placement"]

#: Rank r contributes 1 + ((i + r) mod PERIOD) at element i; the sum is at most PERIOD·n.
PATTERN_PERIOD = 4


def _emit(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def _load_plugin(spec: str) -> None:
    # A plugin registers a torch.distributed backend (e.g. an encrypting or a test-only one);
    # explicit on the command line, never a side effect of importing ringfence.
    module_name, _, func_name = spec.partition(":")
    module = importlib.import_module(module_name)
    func: Callable[[], object] = getattr(module, func_name or "register")
    func()


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m ringfence.bench.worker")
    p.add_argument("--rank", type=int, help="this rank (default: torchrun's RANK or Slurm's SLURM_PROCID)")
    p.add_argument("--world", type=int, help="ranks in all (default: WORLD_SIZE or SLURM_NTASKS)")
    p.add_argument("--master", help="ADDR:PORT of rank 0's rendezvous (default: from torchrun or Slurm)")
    p.add_argument("--master-port", type=int, help="under Slurm: the rendezvous port on the step's first node")
    p.add_argument("--node-addr", default="", help="under Slurm: NODE=ADDR,… (the address peers reach a node at)")
    p.add_argument("--node-iface", default="", help="under Slurm: NODE=IFACE,… (GLOO_SOCKET_IFNAME per node)")
    p.add_argument("--sizes", required=True, help="comma-separated sizes in bytes")
    p.add_argument("--backend", default="gloo")
    p.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--device", default="cpu", help="cpu, or cuda:N for nccl")
    p.add_argument("--plugin", action="append", default=[], help="MODULE:FUNC registering a backend")
    p.add_argument("--timeout", type=float, default=300.0, help="rendezvous and collective timeout, s")
    return p.parse_args(argv)


def _pairs(text: str) -> dict[str, str]:
    return dict(p.split("=", 1) for p in text.split(",") if "=" in p)


def expand_hostlist(text: str) -> list[str]:
    """Slurm's compressed host list → names: ``worker-[0-2,5],mgmt`` → worker-0, worker-1, worker-2, worker-5, mgmt
    (zero padding kept: ``n[08-10]`` → n08, n09, n10)."""
    names: list[str] = []
    for part in re.findall(r"[^,\[]*(?:\[[^\]]*\][^,\[]*)*", text):
        if not part:
            continue
        m = re.fullmatch(r"([^\[]*)\[([^\]]*)\](.*)", part)
        if m is None:
            names.append(part)
            continue
        prefix, ranges, suffix = m.groups()
        for rng in ranges.split(","):
            lo, _, hi = rng.partition("-")
            width = len(lo)
            for i in range(int(lo), int(hi or lo) + 1):
                names.extend(expand_hostlist(f"{prefix}{i:0{width}d}{suffix}"))
    return names


@dataclass(frozen=True)
class Placement:
    """Where this rank sits and how it meets the others."""

    rank: int
    world: int
    init_method: str  # tcp://ADDR:PORT, or env:// under torchrun (its agent's store)
    launcher: str  # direct, torchrun, srun
    local_rank: int = 0
    node: str = ""  # the node it runs on, as the scheduler names it (Slurm)
    slurm_job: str = ""


def placement(args: argparse.Namespace, env: Mapping[str, str]) -> Placement:
    """This rank's place from the command line, else torchrun's environment, else Slurm's."""
    if args.rank is not None and args.world is not None and args.master:
        host, _, port = args.master.rpartition(":")
        return Placement(args.rank, args.world, f"tcp://{host}:{port}", "direct")
    if "TORCHELASTIC_RUN_ID" in env or ("RANK" in env and "WORLD_SIZE" in env and "MASTER_ADDR" in env):
        missing = [k for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT") if k not in env]
        if missing:
            raise ValueError(f"torchrun did not set {', '.join(missing)}")
        # env:// reuses torchrun's agent store (TORCHELASTIC_USE_AGENT_STORE) at MASTER_ADDR:MASTER_PORT
        return Placement(int(env["RANK"]), int(env["WORLD_SIZE"]), "env://", "torchrun",
                         local_rank=int(env["LOCAL_RANK"]))
    if "SLURM_PROCID" in env:
        missing = [k for k in ("SLURM_NTASKS", "SLURM_LOCALID") if k not in env]
        nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST", "")
        if missing or not nodelist:
            raise ValueError(f"Slurm did not set {', '.join(missing) or 'SLURM_STEP_NODELIST'}")
        port = args.master_port or (int(env["MASTER_PORT"]) if env.get("MASTER_PORT") else None)
        if port is None:
            raise ValueError("under Slurm the rendezvous port is given by --master-port (or MASTER_PORT)")
        first = expand_hostlist(nodelist)[0]
        addr = _pairs(args.node_addr).get(first, first)  # a real cluster's node name resolves; the lab's do not
        host = f"[{addr}]" if ":" in addr else addr
        return Placement(int(env["SLURM_PROCID"]), int(env["SLURM_NTASKS"]), f"tcp://{host}:{port}", "srun",
                         local_rank=int(env["SLURM_LOCALID"]), node=env.get("SLURMD_NODENAME", ""),
                         slurm_job=env.get("SLURM_JOB_ID", ""))
    raise ValueError("no --rank/--world/--master given, and neither torchrun's nor Slurm's environment is set")


def main(argv: Sequence[str] | None = None) -> int:
    """Run this rank; return the process exit code."""
    args = _parse(argv)
    env = dict(os.environ)
    rank: int | None = args.rank
    try:
        where = placement(args, env)
        rank = where.rank
        if where.node and where.node in _pairs(args.node_iface):
            os.environ["GLOO_SOCKET_IFNAME"] = _pairs(args.node_iface)[where.node]
        return _run(args, where)
    except Exception as exc:  # noqa: BLE001 - the rank's one boundary: report, then exit non-zero
        if rank is None:  # the driver attributes events by rank: say which one this would have been
            rank = _env_int(env, "RANK", "SLURM_PROCID")
        _emit({"event": "error", "rank": rank, "message": f"{type(exc).__name__}: {exc}"})
        return 1


def _env_int(env: Mapping[str, str], *names: str) -> int | None:
    for n in names:
        if env.get(n, "").isdigit():
            return int(env[n])
    return None


def _run(args: argparse.Namespace, where: Placement) -> int:
    import torch
    import torch.distributed as dist

    if "OMP_NUM_THREADS" not in os.environ:
        # The benchmark times communication. torch's intra-op (OpenMP) threads, woken by the untimed result
        # check, spin-wait into the next timed collective and take the cores the backend needs: on the lab's
        # two cores they cut gloo's 4 MiB busbw from 0.35-0.45 to 0.13-0.15 GB/s. A caller who sets
        # OMP_NUM_THREADS keeps its own choice.
        torch.set_num_threads(1)
    if args.backend == "ringfence":
        # ringfence's own encrypted backend needs no --plugin, but it is still registered by an
        # explicit call: importing ringfence never registers anything.
        from ringfence.secure import transport

        transport.register()
    for plugin in args.plugin:
        _load_plugin(plugin)
    dtype = getattr(torch, args.dtype)
    elem = DTYPES[args.dtype]
    device = torch.device(args.device)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    # recorded with the run: a comparison between runs with different intra-op threads is not like with like
    versions = {"torch": str(torch.__version__), "python": platform.python_version(),
                "intra_op_threads": str(torch.get_num_threads())}
    if device.type == "cuda":
        torch.cuda.set_device(device)
        versions["cuda"] = str(torch.version.cuda)
        versions["nccl"] = ".".join(str(v) for v in torch.cuda.nccl.version())  # type: ignore[no-untyped-call]
    _emit({"event": "ready", "rank": where.rank, "host": socket.gethostname(), "versions": versions,
           "launcher": where.launcher, "local_rank": where.local_rank,
           **({"node": where.node} if where.node else {}),
           **({"slurm_job": where.slurm_job} if where.slurm_job else {})})

    dist.init_process_group(
        args.backend,
        init_method=where.init_method,
        rank=where.rank,
        world_size=where.world,
        timeout=_dt.timedelta(seconds=args.timeout),
    )

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    try:
        period = torch.arange(PATTERN_PERIOD, dtype=torch.int64)
        mine = 1 + (period + where.rank) % PATTERN_PERIOD
        total = torch.zeros(PATTERN_PERIOD, dtype=torch.int64)
        for r in range(where.world):
            total += 1 + (period + r) % PATTERN_PERIOD
        for repeat in range(args.repeats):
            _emit({"event": "repeat", "rank": where.rank, "repeat": repeat,
                   "started": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")})
            for size in sizes:
                count = size // elem
                reps = count // PATTERN_PERIOD + 1
                src = mine.repeat(reps)[:count].to(dtype=dtype, device=device)
                expected = total.repeat(reps)[:count].to(dtype=dtype, device=device)
                buf = torch.empty_like(src)
                for _ in range(args.warmup):
                    buf.copy_(src)
                    dist.all_reduce(buf)
                sync()
                times: list[float] = []
                wrong = 0
                for _ in range(args.iters):
                    buf.copy_(src)
                    sync()
                    dist.barrier()
                    t0 = time.perf_counter()
                    dist.all_reduce(buf)
                    sync()
                    times.append((time.perf_counter() - t0) * 1e6)
                    wrong += int(torch.ne(buf, expected).sum().item())
                _emit({"event": "size", "rank": where.rank, "repeat": repeat, "size": size, "count": count,
                       "times_us": times, "wrong": wrong})
                del src, expected, buf
        dist.barrier()
    finally:
        dist.destroy_process_group()
    _emit({"event": "done", "rank": where.rank})
    return 0


if __name__ == "__main__":
    sys.exit(main())
