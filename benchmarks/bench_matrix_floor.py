"""Where `communication_matrix` spends its time above the bare DuckDB join: its first pass with pieces removed.

On the flows of ``bench_classify.py`` (10 M rows, 10,000 nodes), in rotation with the bare join (join twice
to the inventory + group by zone pair) in one process, each the median of N per-round ratios:

* the join to the *compiled* inventory + group by the integer class key alone (no port cell, no
  unknown-address key) — the least any classification by address class costs;
* plus the port cell (the balanced CASE tree on ``dport``, and the cells it multiplies the groups by);
* plus the unknown-address key (the first group-by as the matrix runs it);
* ``communication_matrix`` itself (second stage, ordering, per-call set-up).

Usage: ``python benchmarks/bench_matrix_floor.py [--dir DIR] [--rows 10000000] [--threads 2] [--rounds 7]``
(generate the flow file first with ``bench_classify.py --dir DIR``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_classify import build_policy_dict  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    """Run the rotation; print a markdown table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "ringfence-bench")
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args(argv)
    os.environ["RINGFENCE_THREADS"] = str(args.threads)

    import pyarrow as pa

    from ringfence.analyze.engine import session
    from ringfence.analyze.matrix import _COUNTS, _grouped, communication_matrix
    from ringfence.policy import Policy

    path = args.dir / f"flows-{args.rows}-10000-7.parquet"
    if not path.exists():
        print(f"no {path}: run bench_classify.py --dir {args.dir} --rows {args.rows} first", file=sys.stderr)
        return 2
    policy = Policy.model_validate_json(json.dumps(build_policy_dict(10_000)))
    communication_matrix(path, policy)  # warm-up: page cache, compiled plan
    with session() as con:
        src = _grouped(con, path, policy, (), _COUNTS)
        inventory = pa.table(
            {"address": [n.addresses[0] for n in policy.nodes], "zone": [n.zone for n in policy.nodes]}
        )
        con.register("inventory", inventory)
        quoted = str(path).replace("'", "''")
        bare = f"""SELECT s.zone AS src_zone, d.zone AS dst_zone, f.protection, count(*) AS flows,
                   sum(f.bytes) AS bytes
            FROM read_parquet('{quoted}') f LEFT JOIN inventory s ON s.address = f.src
            LEFT JOIN inventory d ON d.address = f.dst GROUP BY ALL"""
        # the first stage of the grouped SQL, ended at its first group-by
        first = src[: src.index(", rf_g1 AS")] + " SELECT sum(flows) FROM rf_g0"
        cell_end = first.index("AS rf_cell FROM")
        cell_start = first.rindex("(CASE f.proto", 0, cell_end)
        no_unknown = first.replace("SELECT rf_du, rf_k0, count(*)", "SELECT rf_k0, count(*)")
        no_cell = no_unknown[:cell_start] + "0 " + no_unknown[no_unknown.index("AS rf_cell FROM"):]
        cases: list[tuple[str, str | None]] = [
            ("bare join + group by zone pair", bare),
            ("join to the compiled inventory + group by class key (no port cell, no unknown-address key)", no_cell),
            ("+ port cell", no_unknown),
            ("+ unknown-address key (the matrix's first group-by)", first),
            ("communication_matrix, all of it", None),
        ]
        wall: dict[str, list[float]] = {name: [] for name, _ in cases}
        cpu: dict[str, list[float]] = {name: [] for name, _ in cases}
        load = os.getloadavg()[0]
        for _ in range(args.rounds):
            for name, sql in cases:
                c0, t0 = time.process_time(), time.perf_counter()
                if sql is None:
                    communication_matrix(path, policy)
                else:
                    con.query(sql)
                wall[name].append(time.perf_counter() - t0)
                cpu[name].append(time.process_time() - c0)
    base = cases[0][0]
    print(f"\nload {load:.1f} -> {os.getloadavg()[0]:.1f}; {args.rounds} rounds, {args.threads} threads, "
          f"{args.rows:,} flows\n")
    print("| case | median wall s | x bare (wall) | median CPU s | x bare (CPU) |\n|---|---:|---:|---:|---:|")
    for name, _ in cases:
        rw = statistics.median(w / b for w, b in zip(wall[name], wall[base], strict=True))
        rc = statistics.median(c / b for c, b in zip(cpu[name], cpu[base], strict=True))
        w, c = statistics.median(wall[name]), statistics.median(cpu[name])
        print(f"| {name} | {w:.3f} | {rw:.2f} | {c:.3f} | {rc:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
