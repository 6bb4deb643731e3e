"""One rank of the torch-level transport tests (run as a script: ``ranks_torch.py MODE RANK WORLD PORT OUT``).

MODE ``ops``: every collective over the ``ringfence`` backend, each result compared with what it must
be; writes ``{"failures": [...], "checked": N}``. MODE ``ddp-<backend>``: trains a small model with
DistributedDataParallel over that backend from a fixed seed; writes the final parameters.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from ringfence.secure import transport

# Registration is an explicit call: importing ringfence registers nothing.
transport.register()

DTYPES = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int32,
    torch.int64,
    torch.int8,
    torch.uint8,
]
OPS: dict[str, tuple[Any, Callable[[list[torch.Tensor]], torch.Tensor]]] = {
    "SUM": (dist.ReduceOp.SUM, lambda xs: _fold(torch.add, xs)),
    "PRODUCT": (dist.ReduceOp.PRODUCT, lambda xs: _fold(torch.mul, xs)),
    "MIN": (dist.ReduceOp.MIN, lambda xs: _fold(torch.minimum, xs)),
    "MAX": (dist.ReduceOp.MAX, lambda xs: _fold(torch.maximum, xs)),
}


def _fold(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], xs: list[torch.Tensor]) -> torch.Tensor:
    out = xs[0]
    for x in xs[1:]:
        out = fn(out, x)
    return out


def _input(rank: int, dtype: torch.dtype, n: int) -> torch.Tensor:
    return ((torch.arange(n) * (rank + 2)) % 5 + 1).to(dtype)


def ops(rank: int, world: int) -> dict[str, object]:
    failures: list[str] = []
    checked = 0

    def check(name: str, got: torch.Tensor, want: torch.Tensor) -> None:
        nonlocal checked
        checked += 1
        if not torch.equal(got, want.to(got.dtype)):
            failures.append(f"{name}: got {got.flatten()[:6].tolist()} want {want.flatten()[:6].tolist()}")

    for dtype in DTYPES:
        for name, (op, ref) in OPS.items():
            for n in (1, 1000, 70_001):
                t = _input(rank, dtype, n)
                dist.all_reduce(t, op=op)
                check(f"all_reduce {name} {dtype} n={n}", t, ref([_input(r, dtype, n) for r in range(world)]))
    for dtype in (torch.float32, torch.bfloat16):
        t = torch.full((513,), float(rank + 1), dtype=dtype)
        dist.all_reduce(t, op=dist.ReduceOp.AVG)
        check(f"all_reduce AVG {dtype}", t, torch.full((513,), sum(range(1, world + 1)) / world))
    grid = torch.arange(64, dtype=torch.float32).reshape(8, 8) * (rank + 1)
    dist.all_reduce(grid.t())  # non-contiguous view: results land in the base tensor
    check("all_reduce non-contiguous", grid, torch.arange(64, dtype=torch.float32).reshape(8, 8) * 3)
    b = torch.arange(100_000, dtype=torch.float64) if rank == 1 else torch.zeros(100_000, dtype=torch.float64)
    dist.broadcast(b, src=1)
    check("broadcast", b, torch.arange(100_000, dtype=torch.float64))
    outs = [torch.zeros(5, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(outs, torch.full((5,), rank, dtype=torch.int64))
    check("all_gather", torch.stack(outs), torch.arange(world).repeat_interleave(5).reshape(world, 5))
    flat = torch.zeros(world * 3)
    dist.all_gather_single(flat, torch.full((3,), float(rank)))
    check("all_gather_single", flat, torch.arange(world, dtype=torch.float32).repeat_interleave(3))
    out = torch.zeros(4)
    dist.reduce_scatter(out, [torch.full((4,), float(10 * r + rank)) for r in range(world)])
    check("reduce_scatter", out, torch.full((4,), float(10 * rank * world + sum(range(world)))))
    out2 = torch.zeros(2, dtype=torch.bfloat16)
    dist.reduce_scatter_single(out2, torch.arange(2 * world, dtype=torch.bfloat16) + rank)
    want = torch.arange(2 * world, dtype=torch.float32).reshape(world, 2)[rank] * world + sum(range(world))
    check("reduce_scatter_single", out2, want)
    dist.barrier()
    # both ranks send before either receives: send must not wait for the matching recv
    peer = 1 - rank
    w = dist.isend(torch.full((300_000,), float(rank)), peer, tag=7)
    got = torch.zeros(300_000)
    dist.recv(got, peer, tag=7)
    assert w is not None
    w.wait()
    check("send/recv", got, torch.full((300_000,), float(peer)))
    return {"failures": failures, "checked": checked}


def ddp(rank: int, world: int) -> dict[str, object]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    ddp_model = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.001)  # several buckets
    opt = torch.optim.SGD(ddp_model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(100 + rank)
    for _ in range(5):
        x = torch.randn(8, 16, generator=gen)
        y = torch.randn(8, 4, generator=gen)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp_model(x), y)
        loss.backward()  # type: ignore[no-untyped-call]
        opt.step()
    return {"params": [p.detach().flatten().tolist() for p in model.parameters()]}


def main() -> None:
    mode, rank, world, port, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    backend = mode.removeprefix("ddp-") if mode.startswith("ddp-") else "ringfence"
    dist.init_process_group(
        backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world, timeout=timedelta(seconds=30)
    )
    result = ops(rank, world) if mode == "ops" else ddp(rank, world)
    dist.destroy_process_group()
    with open(out, "w") as fh:
        json.dump(result, fh)
    if backend == "gloo":
        # The plain-gloo reference arm only has to deliver its parameters. torch/gloo's own C++ threads
        # intermittently abort it at interpreter shutdown ("terminate called without an active exception",
        # seen in CI under load); ringfence's arm exits normally so its clean shutdown stays tested.
        sys.stdout.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
