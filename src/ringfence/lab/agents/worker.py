"""Worker node: one rank of a training job — a real gloo all-reduce loop plus the job's storage and API traffic.

Each step: all-reduce a float32 tensor among the job's ranks (collective), read a dataset shard from
storage (storage), every few steps write a checkpoint slice to storage (storage; storage then
replicates it off-site), and report progress to the management API (management). The lab sets
``GLOO_SOCKET_IFNAME`` to the node's interface so gloo binds the lab address.
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import timedelta
from typing import Any

from ringfence.lab.agents.common import HttpClient, Status, base_parser, resolve_endpoint


def main(argv: list[str] | None = None) -> int:
    """Train (well: all-reduce) until killed; exit 1 when the collective fails."""
    p = base_parser(__doc__ or "")
    p.add_argument("--job", required=True)
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--master-addr", required=True)
    p.add_argument("--master-port", type=int, required=True)
    p.add_argument("--storage", required=True, help="host:port of the object server")
    p.add_argument("--mgmt", required=True, help="host:port of the job API")
    p.add_argument("--fallback-address", action="append", default=[], metavar="NAME=ADDR",
                   help="the address to use when NAME does not resolve (repeatable)")
    p.add_argument("--numel", type=int, default=1 << 20, help="float32 elements all-reduced per step (4 MiB)")
    p.add_argument("--interval", type=float, default=0.25, help="pause between steps, seconds")
    p.add_argument("--checkpoint-every", type=int, default=5)
    p.add_argument("--checkpoint-bytes", type=int, default=256 << 10)
    p.add_argument("--shards", type=int, default=16)
    p.add_argument("--timeout", type=float, default=60.0, help="gloo rendezvous/collective timeout, seconds")
    args = p.parse_args(argv)
    # No SIGTERM handler: a rank blocked in a collective whose peer already left would only notice at the
    # gloo timeout. The default action ends it at once, and a rank has nothing to flush.
    status = Status(args.status_file, "worker", job=args.job, rank=args.rank, world=args.world)
    fallbacks = dict(f.split("=", 1) for f in args.fallback_address)
    args.storage = resolve_endpoint(args.storage, fallbacks, status)
    args.mgmt = resolve_endpoint(args.mgmt, fallbacks, status)

    # torch is imported here, not at module level: it costs seconds, and --help or a bad argument should not.
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://{args.master_addr}:{args.master_port}",
        rank=args.rank,
        world_size=args.world,
        timeout=timedelta(seconds=args.timeout),
    )
    status.set("ready", True)
    client = HttpClient(args)
    storage = f"{client.scheme()}://{args.storage}"
    mgmt = f"{client.scheme()}://{args.mgmt}"
    tensor = torch.ones(args.numel, dtype=torch.float32)
    nbytes = args.numel * 4
    step = 0
    code = 0
    while True:
        start = time.perf_counter()
        try:
            dist.all_reduce(tensor)
        except RuntimeError as exc:
            status.error("allreduce", exc)
            code = 1
            break
        seconds = time.perf_counter() - start
        tensor.div_(args.world)
        step += 1
        busbw = nbytes / seconds * 2 * (args.world - 1) / args.world
        status.count("steps")
        status.set("last_busbw_Bps", busbw, flush=False)
        _traffic(client, storage, mgmt, args, status, step, tensor, seconds, busbw)
        time.sleep(args.interval)
    dist.destroy_process_group()
    status.set("ready", False)
    return code


def _traffic(client: HttpClient, storage: str, mgmt: str, args: argparse.Namespace, status: Status, step: int,
             tensor: Any, seconds: float, busbw: float) -> None:
    job, rank = args.job, args.rank
    shard = (step * args.world + rank) % args.shards
    try:
        code, data = client.request("GET", f"{storage}/datasets/{job}/shard-{shard}")
        status.count("shards_read" if code == 200 else "shard_rejected")
        status.count("shard_bytes", len(data))
    except OSError as exc:
        status.error("shard", exc)
    if step % args.checkpoint_every == 1:
        ckpt = tensor[: args.checkpoint_bytes // 4].numpy().tobytes()
        try:
            code, _ = client.request("PUT", f"{storage}/checkpoints/{job}/rank-{rank}/step-{step}", ckpt,
                                     {"Content-Type": "application/octet-stream"})
            status.count("checkpoints_written" if code < 300 else "checkpoint_rejected")
        except OSError as exc:
            status.error("checkpoint", exc)
    report = {"job": job, "rank": rank, "step": step, "allreduce_s": seconds, "busbw_Bps": busbw}
    try:
        code, _ = client.request("POST", f"{mgmt}/report", json.dumps(report).encode(),
                                 {"Content-Type": "application/json"})
        status.count("reports" if code < 300 else "report_rejected")
    except OSError as exc:
        status.error("report", exc)


if __name__ == "__main__":
    raise SystemExit(main())
