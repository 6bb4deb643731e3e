"""Attributing flows to jobs by node and time interval: 10 M flows, ~3,000 Slurm job spans on 1,024 nodes.

Builds (in memory) a flow table with ``src_node``/``dst_node``/``first_seen``/``bytes`` and a day of job
spans (8-node jobs of 20–100 minutes back to back on every node, with idle gaps; the newest still
running), then measures, each the median of N rounds run in rotation (a load change on a shared machine
falls on both):

* ``baseline`` — the bare DuckDB range join on the same data: spans joined twice (source and destination
  node) on ``node = node AND start <= first_seen < end``, all rows out as Arrow;
* ``attribute`` — :func:`ringfence.analyze.attribute.attribute_flows`: the spans tabulated, one ASOF join
  per side, the span numbers scattered back into row order, job and user columns added.

Target (issue 13): ``attribute`` within 2x of the baseline (median of per-round ratios).
Usage: ``python benchmarks/bench_attribute.py [--rows 10000000] [--threads 2] [--repeats 3]``.
Exit status 1 when the target is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

NODES, JOB_NODES = 1024, 8
T0 = datetime(2026, 12, 1, tzinfo=UTC)
DAY_S = 86_400


def make_spans(rng: np.random.Generator) -> list:  # type: ignore[type-arg]
    """Back-to-back jobs of 8 nodes, 20–100 minutes each, 0–10 minutes idle between; the last ones still run."""
    from ringfence.jobs import JobSpan

    spans = []
    job = 0
    for group in range(NODES // JOB_NODES):
        nodes = tuple(f"n{group * JOB_NODES + k:04d}" for k in range(JOB_NODES))
        t = int(rng.integers(0, 600))
        while t < DAY_S:
            length = int(rng.integers(1200, 6000))
            end = t + length
            spans.append(JobSpan(job=str(job), user=f"user{job % 97}", nodes=nodes, name=f"train-{job % 13}",
                                 start=T0 + timedelta(seconds=t),
                                 end=None if end >= DAY_S else T0 + timedelta(seconds=end)))
            job += 1
            t = end + int(rng.integers(0, 600))
    return spans


def make_flows(rows: int, rng: np.random.Generator) -> pa.Table:
    """``rows`` flows between the nodes over the day (5 % from/to addresses outside the inventory: null node)."""
    names = pa.array([f"n{i:04d}" for i in range(NODES)] + [None], pa.string())
    src = rng.integers(0, NODES, rows)
    dst = np.where(rng.random(rows) < 0.05, NODES, rng.integers(0, NODES, rows))
    ts = (T0.timestamp() * 1e9 + rng.integers(0, DAY_S * 10**9, rows)).astype("int64")
    return pa.table({
        "src_node": pc.take(names, pa.array(src)), "dst_node": pc.take(names, pa.array(dst)),
        "first_seen": pa.array(ts, pa.timestamp("ns", tz="UTC")), "bytes": pa.array(rng.integers(64, 1 << 20, rows)),
    })


def baseline(flows: pa.Table, spans: list, threads: int) -> pa.Table:  # type: ignore[type-arg]
    """The bare range join (what DuckDB does with the data and no ringfence)."""
    import duckdb

    far = T0 + timedelta(days=3650)
    rows = [(n, s.start, s.end or far, s.job, s.user) for s in spans for n in s.nodes]
    sp = pa.table({"node": [r[0] for r in rows], "rf_start": pa.array([r[1] for r in rows], pa.timestamp("ns", "UTC")),
                   "rf_end": pa.array([r[2] for r in rows], pa.timestamp("ns", "UTC")),
                   "job": [r[3] for r in rows], "user": [r[4] for r in rows]})
    con = duckdb.connect()
    con.execute(f"SET threads = {threads}")
    con.register("flows", flows)
    con.register("sp", sp)
    out = con.sql(  # the engine's own fast path (execute().to_arrow_table() copies the rows once more)
        """SELECT f.*, s1.job AS src_job, s1."user" AS src_user, s2.job AS dst_job, s2."user" AS dst_user
           FROM flows AS f
           LEFT JOIN sp AS s1 ON s1.node = f.src_node AND f.first_seen >= s1.rf_start AND f.first_seen < s1.rf_end
           LEFT JOIN sp AS s2 ON s2.node = f.dst_node AND f.first_seen >= s2.rf_start AND f.first_seen < s2.rf_end"""
    ).to_arrow_table()
    con.close()
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print a JSON summary; exit 1 when the 2x target is missed."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--rows", type=int, default=10_000_000)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--no-check", dest="check", action="store_false",
                   help="skip the first, unmeasured run of both that checks they attribute the same rows")
    args = p.parse_args(argv)
    os.environ["RINGFENCE_THREADS"] = str(args.threads)
    from ringfence.analyze.attribute import attribute_flows

    rng = np.random.default_rng(13)
    spans = make_spans(rng)
    flows = make_flows(args.rows, rng)
    cases = {"baseline": lambda: baseline(flows, spans, args.threads),
             "attribute": lambda: attribute_flows(flows, spans)}
    b = None
    if args.check:  # the two answers agree (row order aside): same attributed row count per column
        a, b = cases["baseline"](), cases["attribute"]()
        for col in ("src_job", "dst_job", "src_user", "dst_user"):
            assert a.num_rows == b.num_rows and a.column(col).null_count == b.column(col).null_count, col
    times: dict[str, list[float]] = {k: [] for k in cases}
    cpu: dict[str, list[float]] = {k: [] for k in cases}
    ratios = []
    for r in range(args.repeats):
        order = list(cases) if r % 2 == 0 else list(reversed(cases))
        got = {}
        for name in order:
            start, start_cpu = time.perf_counter(), time.process_time()
            cases[name]()
            got[name] = time.perf_counter() - start
            times[name].append(got[name])
            cpu[name].append(time.process_time() - start_cpu)  # all threads: what a loaded machine cannot skew
        ratios.append(got["attribute"] / got["baseline"])
        print(f"round {r + 1}: " + ", ".join(f"{k} {v:.2f}s (cpu {cpu[k][-1]:.2f}s)" for k, v in got.items())
              + f", load {os.getloadavg()[0]:.1f}", file=sys.stderr, flush=True)
    summary = {
        "rows": args.rows, "spans": len(spans), "nodes": NODES, "threads": args.threads, "repeats": args.repeats,
        "median_s": {k: round(statistics.median(v), 3) for k, v in times.items()},
        "median_cpu_s": {k: round(statistics.median(v), 3) for k, v in cpu.items()},
        "ratio_median": round(statistics.median(ratios), 3),
        "attributed_src": None if b is None else b.num_rows - b.column("src_job").null_count,
        "load_average": os.getloadavg()[0], "date": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    print(json.dumps(summary, indent=2))
    return 0 if summary["ratio_median"] <= 2.0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
