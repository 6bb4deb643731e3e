"""The same analysis on DuckDB and on Spark (local mode): time per flow count, and the crossover.

Uses the synthetic 10,000-node cluster and flow generator of ``bench_classify.py``. For each flow
count, writes the flows once as a hive-partitioned Parquet dataset (``day=…/hour=…``, what a collector
writes), then runs :func:`ringfence.analyze.communication_matrix` on it with ``--engine duckdb`` and
``--engine spark=local[N]`` — the same SQL definition, transpiled for Spark — in rotation, median of
the repeats after one warm-up each (Spark's warm-up includes starting the JVM, reported apart). It
checks that both engines give *identical* matrices and reports the crossover: the smallest flow count
at which Spark is faster, or that none was reached in the measured range.

Usage: ``python benchmarks/bench_engines.py [--sizes 100000,1000000,10000000] [--threads 2] [--repeats 3]``.
Exit status 1 when the engines disagree.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_classify import build_policy_dict, generate_flows  # noqa: E402


def _write_partitioned(table: pa.Table, root: Path, parts: int) -> None:
    tmp = root.with_suffix(".tmp")
    step = -(-table.num_rows // parts)
    for i in range(parts):
        part = tmp / f"day=2026-12-{1 + i // 24:02d}" / f"hour={i % 24:02d}"
        part.mkdir(parents=True, exist_ok=True)
        pq.write_table(table.slice(i * step, step), part / "part-0.parquet", row_group_size=1 << 20)
    tmp.replace(root)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print a markdown table; exit 1 if the engines disagree."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="100000,1000000,10000000")
    ap.add_argument("--nodes", type=int, default=10_000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--parts", type=int, default=24, help="hour partitions per dataset")
    ap.add_argument("--dir", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "ringfence-bench")
    args = ap.parse_args(argv)
    os.environ["RINGFENCE_THREADS"] = str(args.threads)
    os.environ.setdefault("RINGFENCE_SPARK_PARTITIONS", str(2 * args.threads))

    from ringfence.analyze import EngineKind, EngineSpec, communication_matrix
    from ringfence.policy import Policy

    doc = build_policy_dict(args.nodes)
    policy = Policy.model_validate_json(json.dumps(doc))
    duck = EngineSpec()
    spark = EngineSpec(EngineKind.SPARK, f"local[{args.threads}]")
    rows: list[tuple[int, float, list[float], float, list[float], bool]] = []
    jvm_start = None
    for size in (int(s) for s in args.sizes.split(",")):
        root = args.dir / f"flows-hive-{size}-{args.nodes}"
        if not root.exists():
            args.dir.mkdir(parents=True, exist_ok=True)
            _write_partitioned(generate_flows(doc, size, seed=7), root, args.parts)
        t0 = time.perf_counter()
        expected = communication_matrix(root, policy, engine=duck)  # warm-up
        got = communication_matrix(root, policy, engine=spark)  # warm-up (first: starts the JVM)
        if jvm_start is None:
            jvm_start = time.perf_counter() - t0
        same = got.equals(expected)
        d_runs: list[float] = []
        s_runs: list[float] = []
        for _ in range(args.repeats):
            for engine, runs in ((duck, d_runs), (spark, s_runs)):
                t = time.perf_counter()
                communication_matrix(root, policy, engine=engine)
                runs.append(time.perf_counter() - t)
        rows.append((size, statistics.median(d_runs), d_runs, statistics.median(s_runs), s_runs, same))
        print(f"{size:,} flows done", file=sys.stderr)

    print(
        f"\ncommunication_matrix on a hive-partitioned Parquet dataset ({args.parts} hour partitions), "
        f"{len(policy.nodes):,} nodes, {args.threads} threads / local[{args.threads}], median of {args.repeats}\n"
    )
    print("| flows | DuckDB s | runs | Spark local s | runs | Spark / DuckDB | identical matrix |")
    print("|---:|---:|---|---:|---|---:|---|")
    for size, d, d_runs, s, s_runs, same in rows:
        print(
            f"| {size:,} | {d:.3f} | {', '.join(f'{r:.2f}' for r in d_runs)} | {s:.3f} "
            f"| {', '.join(f'{r:.2f}' for r in s_runs)} | {s / d:.1f}x | {'yes' if same else 'NO'} |"
        )
    faster = [size for size, d, _, s, _, _ in rows if s < d]
    print(f"\nfirst warm-up (JVM start + first query): {jvm_start:.1f} s")
    if faster:
        print(f"crossover: Spark local is faster from {faster[0]:,} flows")
    else:
        print(f"crossover: not reached up to {rows[-1][0]:,} flows — DuckDB faster at every measured size")
    print(f"load average at the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return 0 if all(r[5] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
