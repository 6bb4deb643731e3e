"""Plaintext gloo vs the authenticated-encrypted ``ringfence`` backend: busbw and latency, same machine, same run.

    .venv/bin/python benchmarks/bench_transport.py                     # loopback, 2 and 4 ranks
    .venv/bin/python benchmarks/bench_transport.py --target lab        # one rank per lab worker namespace

Arms are interleaved (gloo, ringfence, gloo, ringfence, …) so that a noisy neighbour hits both alike;
each cell is the median over ``--repeats`` runs of that run's figure (busbw from the mean iteration
time at 4 MiB and 64 MiB, p50 latency at ≤ 64 KiB). Prints a markdown table with machine and date,
ready for BENCHMARKS.md. Uses the benchmark driver (:mod:`ringfence.bench.driver`), so every rank is
a real process and every all-reduce result is checked element by element.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

from ringfence.bench.driver import BenchSpec, RankSpec, parse_sizes, run_allreduce
from ringfence.bench.placement import local_ranks
from ringfence.secure import pki

LATENCY_MAX = 64 << 10
BANDWIDTH_SIZES = (4 << 20, 64 << 20)
PLUGIN = "ringfence.secure.transport:register_backend"


def _pki(world: int, root: Path) -> str:
    pki.init_ca(root, "bench")
    for r in range(world):
        pki.issue(root, f"spiffe://bench/job/allreduce/rank/{r}", lifetime=timedelta(hours=2))
    return str(root / "nodes" / "job-allreduce-rank-{rank}")


def _ranks(target: str, world: int, lab_name: str | None) -> list[RankSpec]:
    if target == "local":
        return local_ranks([f"rank-{r}" for r in range(world)])
    from ringfence.bench.placement import lab_ranks

    return lab_ranks([f"worker-{r}" for r in range(world)], lab_name=lab_name)


def _fmt_size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", choices=["local", "lab"], default="local")
    p.add_argument("--lab", help="lab name (default: the only running lab)")
    p.add_argument("--up", action="store_true", help="with --target lab: bring up a lab for the run, down after")
    p.add_argument("--worlds", default="2,4", help="rank counts, comma-separated")
    p.add_argument("--sizes", default="4K,16K,64K,4M,64M")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--chunk", type=int, default=None, help="RINGFENCE_TRANSPORT_CHUNK_BYTES")
    args = p.parse_args(argv)
    if args.target == "lab" and args.up:
        from ringfence.lab import Lab

        lab = Lab.up(workers=max(int(w) for w in args.worlds.split(",")), jobs=1, traffic=False)
        try:
            return _measure(args, lab.name)
        finally:
            lab.down()
    return _measure(args, args.lab)


def _measure(args: argparse.Namespace, lab_name: str | None) -> int:
    sizes = parse_sizes(args.sizes)
    worlds = [int(w) for w in args.worlds.split(",")]
    rows: dict[tuple[int, str, int], list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="rf-bench-pki-") as tmp:
        rank_dir = _pki(max(worlds), Path(tmp))
        env = {"RINGFENCE_TRANSPORT_DIR": rank_dir, "OMP_NUM_THREADS": "1"}
        if args.chunk:
            env["RINGFENCE_TRANSPORT_CHUNK_BYTES"] = str(args.chunk)
        for world in worlds:
            ranks = _ranks(args.target, world, lab_name)
            for rep in range(args.repeats):
                for backend in ("gloo", "ringfence"):
                    spec = BenchSpec(
                        sizes=sizes, backend=backend, warmup=args.warmup, iterations=args.iters,
                        plugins=(PLUGIN,) if backend == "ringfence" else (), env=env, layer=backend,
                    )  # fmt: skip
                    run = run_allreduce(ranks, spec)
                    for res in run.repeats[0].results:
                        assert res.wrong in (0, None), f"{backend}: {res.wrong} wrong elements at {res.size}"
                        rows.setdefault((world, backend, res.size), []).append((res.busbw, res.p50_us or 0.0))
                    print(f"world {world} repeat {rep + 1}/{args.repeats} {backend}: done", file=sys.stderr)
    load = os.getloadavg()
    where = "loopback" if args.target == "local" else f"lab namespaces ({lab_name or 'attached lab'})"
    print(f"### ringfence transport vs plaintext gloo — {where}\n")
    print(f"- machine: {platform.node()}, {os.cpu_count()} CPUs ({platform.processor() or platform.machine()}), "
          f"Linux {platform.release()}, load average {load[0]:.1f}/{load[1]:.1f}")  # fmt: skip
    print(f"- date: {datetime.now(UTC).isoformat(timespec='minutes')}")
    print(f"- {args.repeats} interleaved repeats × {args.iters} iterations (after {args.warmup} warm-up), float32, "
          "median of the per-repeat figures; OMP_NUM_THREADS=1 for both arms\n")  # fmt: skip
    print("| ranks | size | gloo | ringfence | ringfence / gloo | target |")
    print("|---:|---:|---:|---:|---:|---|")
    for world in worlds:
        for size in sizes:
            g = rows[(world, "gloo", size)]
            r = rows[(world, "ringfence", size)]
            if size <= LATENCY_MAX:
                gl = statistics.median(x[1] for x in g)
                rl = statistics.median(x[1] for x in r)
                print(f"| {world} | {_fmt_size(size)} | {gl:.0f} µs p50 | {rl:.0f} µs p50 | {rl / gl:.2f}× latency "
                      "| ≤ 1.5× |")  # fmt: skip
            else:
                gb = statistics.median(x[0] for x in g)
                rb = statistics.median(x[0] for x in r)
                target = {4 << 20: "≥ 90 %", 64 << 20: "≥ 95 %"}.get(size, "") if world == 2 else "report"
                print(f"| {world} | {_fmt_size(size)} | {gb:.3f} GB/s | {rb:.3f} GB/s | {100 * rb / gb:.0f} % busbw "
                      f"| {target} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
