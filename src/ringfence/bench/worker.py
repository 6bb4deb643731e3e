"""One rank of the all-reduce benchmark: ``python -m ringfence.bench.worker --rank R --world N ...``.

Started by :mod:`ringfence.bench.driver` through an executor (a lab namespace, an SSH host, a pod).
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
import platform
import socket
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from ringfence.bench.stats import DTYPES

__all__ = ["PATTERN_PERIOD", "main"]

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
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--master", required=True, help="ADDR:PORT of rank 0's rendezvous")
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


def main(argv: Sequence[str] | None = None) -> int:
    """Run this rank; return the process exit code."""
    args = _parse(argv)
    try:
        return _run(args)
    except Exception as exc:  # noqa: BLE001 - the rank's one boundary: report, then exit non-zero
        _emit({"event": "error", "rank": args.rank, "message": f"{type(exc).__name__}: {exc}"})
        return 1


def _run(args: argparse.Namespace) -> int:
    import torch
    import torch.distributed as dist

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
    versions = {"torch": str(torch.__version__), "python": platform.python_version()}
    if device.type == "cuda":
        torch.cuda.set_device(device)
        versions["cuda"] = str(torch.version.cuda)
        versions["nccl"] = ".".join(str(v) for v in torch.cuda.nccl.version())  # type: ignore[no-untyped-call]
    _emit({"event": "ready", "rank": args.rank, "host": socket.gethostname(), "versions": versions})

    host, _, port = args.master.rpartition(":")
    dist.init_process_group(
        args.backend,
        init_method=f"tcp://{host}:{port}",
        rank=args.rank,
        world_size=args.world,
        timeout=_dt.timedelta(seconds=args.timeout),
    )

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    try:
        period = torch.arange(PATTERN_PERIOD, dtype=torch.int64)
        mine = 1 + (period + args.rank) % PATTERN_PERIOD
        total = torch.zeros(PATTERN_PERIOD, dtype=torch.int64)
        for r in range(args.world):
            total += 1 + (period + r) % PATTERN_PERIOD
        for repeat in range(args.repeats):
            _emit({"event": "repeat", "rank": args.rank, "repeat": repeat,
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
                _emit({"event": "size", "rank": args.rank, "repeat": repeat, "size": size, "count": count,
                       "times_us": times, "wrong": wrong})
                del src, expected, buf
        dist.barrier()
    finally:
        dist.destroy_process_group()
    _emit({"event": "done", "rank": args.rank})
    return 0


if __name__ == "__main__":
    sys.exit(main())
