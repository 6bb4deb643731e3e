"""The collective-path canary on the lab: plaintext gloo vs gloo over IPsec (kernel-libipsec) vs over wireguard-go.

    .venv/bin/python benchmarks/bench_ipsec.py --up            # a lab of its own (2 workers, no background job)
    .venv/bin/python benchmarks/bench_ipsec.py --lab NAME      # an existing lab, beside its training job

One run, arms interleaved per repeat (plaintext, ipsec, wireguard-go, plaintext, …) so that a noisy
neighbour hits all alike; every arm is the same test (sizes, iterations, ranks), so the rollout gate
(:func:`ringfence.bench.compare.compare_runs`, the policy's default budget) judges each layer against
plaintext, and its verdict is printed. The layer is enabled among the ranks' workers (strict mode: no
plaintext path between them) for its arm only, then disabled; after each arm the tunnel's own byte
counters must show that the all-reduce went through it. Prints a markdown section ready for
BENCHMARKS.md: machine, date, load, medians of the per-repeat busbw, ratio against plaintext.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from ringfence.bench.compare import compare_runs
from ringfence.bench.driver import BenchSpec, RankSpec, parse_sizes, run_allreduce
from ringfence.bench.run import BenchRun

if TYPE_CHECKING:
    from ringfence.lab import Lab

ARMS = ("plaintext", "ipsec", "wireguard")


def _fmt_size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


def _over_ipsec(lab: Lab, ranks: list[RankSpec], spec: BenchSpec) -> tuple[BenchRun, int]:
    from ringfence.secure.layers import ipsec_run

    nodes = [r.node for r in ranks]
    ipsec_run.enable_ipsec(lab.site(), nodes, cluster=lab.policy().cluster, strict=True)
    try:
        run = run_allreduce(ranks, spec)
        sent = sum(c.bytes_out for n in nodes for s in ipsec_run.node_handle(lab.site(), n).sas()
                   for c in s.children)
    finally:
        ipsec_run.disable_ipsec(lab.site())
    return run, sent


def _over_wireguard(lab: Lab, ranks: list[RankSpec], spec: BenchSpec) -> tuple[BenchRun, int]:
    from ringfence.secure.layers import wireguard_run

    nodes = [r.node for r in ranks]
    wireguard_run.enable_wireguard(lab.site(), nodes, strict=True)
    try:
        run = run_allreduce(ranks, spec)
        sent = sum(p.tx_bytes for n in nodes for p in wireguard_run.node_handle(lab.site(), n).peers())
    finally:
        wireguard_run.disable_wireguard(lab.site())
    return run, sent


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--lab", help="lab name (default: the only running lab)")
    p.add_argument("--up", action="store_true", help="bring up a lab for the run (no background job), down after")
    p.add_argument("--sizes", default="4M,64M")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    args = p.parse_args(argv)
    from ringfence.lab import Lab

    if not args.up:
        return _measure(args, Lab.attach(args.lab), background=True)
    lab = Lab.up(workers=2, jobs=1, traffic=False)
    try:
        return _measure(args, lab, background=False)
    finally:
        try:
            lab.down()
        finally:
            from ringfence.secure.layers.runtime import StateStore

            StateStore(lab.name).forget()


def _measure(args: argparse.Namespace, lab: Lab, *, background: bool) -> int:
    from ringfence.lab.points import lab_ranks

    sizes = parse_sizes(args.sizes)
    ranks = lab_ranks(["worker-0", "worker-1"], lab_name=lab.name)
    runs: dict[str, BenchRun] = {}
    busbw: dict[tuple[str, int], list[float]] = {}
    carried: dict[str, list[int]] = {}
    over: dict[str, Callable[[Lab, list[RankSpec], BenchSpec], tuple[BenchRun, int]]] = {
        "ipsec": _over_ipsec, "wireguard": _over_wireguard}
    for rep in range(args.repeats):
        for arm in ARMS:
            spec = BenchSpec(sizes=sizes, warmup=args.warmup, iterations=args.iters, layer=arm,
                             env={"OMP_NUM_THREADS": "1"})
            t0 = time.monotonic()
            if arm in over:
                run, sent = over[arm](lab, ranks, spec)
                # every iteration moves at least the largest message out of some rank: less through the tunnel
                # means gloo went around it and the arm would be measuring plaintext
                floor = max(sizes) * (args.iters + args.warmup)
                if sent < floor:
                    raise SystemExit(f"{arm} arm: the tunnels carried only {sent} bytes (< {floor}); gloo went around")
                carried.setdefault(arm, []).append(sent)
            else:
                run = run_allreduce(ranks, spec)
            for res in run.repeats[0].results:
                if res.wrong not in (0, None):
                    raise SystemExit(f"{arm}: {res.wrong} wrong elements at {res.size}")
                busbw.setdefault((arm, res.size), []).append(res.busbw)
            runs[arm] = runs[arm].merged(run) if arm in runs else run
            print(f"repeat {rep + 1}/{args.repeats} {arm}: {time.monotonic() - t0:.0f} s", file=sys.stderr)
    _print(args, lab, sizes, busbw, carried, runs, background)
    return 0


def _print(args: argparse.Namespace, lab: Lab, sizes: tuple[int, ...], busbw: dict[tuple[str, int], list[float]],
           carried: dict[str, list[int]], runs: dict[str, BenchRun], background: bool) -> None:
    load = os.getloadavg()
    print(f"### Collective-path canary: plaintext vs IPsec (kernel-libipsec) vs wireguard-go — lab {lab.name}\n")
    print(f"- machine: {platform.node()}, {os.cpu_count()} CPUs ({platform.processor() or platform.machine()}), "
          f"Linux {platform.release()}, load average {load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f} at the end")
    print(f"- date: {datetime.now(UTC).isoformat(timespec='minutes')}")
    print(f"- `python benchmarks/bench_ipsec.py {'--up' if not background else '--lab ' + lab.name}` — gloo, 2 ranks "
          f"(worker-0, worker-1), float32, {args.repeats} interleaved repeats × {args.iters} iterations (after "
          f"{args.warmup} warm-up), median of the per-repeat busbw; "
          f"{'beside the lab training job' if background else 'no background job'}")
    print("- through the tunnels: " + ", ".join(f"{a} {sum(v) / 1e9:.2f} GB" for a, v in carried.items()))
    print()
    print("| size | plaintext | ipsec | wireguard-go | ipsec / plaintext | wireguard-go / plaintext "
          "| ipsec / wireguard-go |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for size in sizes:
        g, i, w = (statistics.median(busbw[(a, size)]) for a in ARMS)
        print(f"| {_fmt_size(size)} | {g:.3f} GB/s | {i:.3f} GB/s | {w:.3f} GB/s | {100 * i / g:.1f} % "
              f"| {100 * w / g:.1f} % | {i / w:.2f}× |")
    print()
    for arm in ("ipsec", "wireguard"):
        cmp = compare_runs(runs["plaintext"], runs[arm])
        print(f"- gate, {arm} vs plaintext (default budget): **{cmp.verdict.value}** — {cmp.reasons[0]}")


if __name__ == "__main__":
    raise SystemExit(main())
