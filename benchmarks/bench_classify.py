"""Classification at scale: 10 M flows (Parquet) against a 10,000-node inventory.

Generates (once, cached) a synthetic cluster policy — 100 jobs of 88 workers, 1,000 storage nodes,
management, users, jump hosts, external replicas; ~300 approved flows including a CIDR egress rule —
and a Parquet file of flows that look like its traffic (collective, storage, management, admin,
replication, plus unapproved lateral and egress flows). Then measures, each the median of N runs:

* ``baseline`` — a bare DuckDB join + group-by on the same file: both addresses joined to the
  inventory, grouped by zone pair and protection (what any SQL engine does with no classification);
* ``ringfence matrix`` — :func:`ringfence.analyze.communication_matrix` on the file: compile the
  policy, classify every flow (service, collective, approved-rule range join), group into the
  observed vs. approved matrix;
* ``ringfence breakdown`` — :func:`ringfence.analyze.protection_breakdown` (per class × protection);
* with ``--per-flow``: :func:`ringfence.analyze.classify` materialising all rows as Arrow.

Targets (issues 3, 12): the matrix in < 3 s on 2 cores and within 1.2x of the baseline (the median of
per-round ratios: cases run in rotation, so a load change on a shared machine falls on all of them).
Usage: ``python benchmarks/bench_classify.py [--rows 10000000] [--threads 2] [--repeats 3] [--per-flow]``.
Exit status 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

JOBS, JOB_SIZE, STORAGE, MGMT, USERS, JUMPS, EXTERNAL = 100, 88, 1000, 100, 50, 10, 40


def _addr(block: int, i: int) -> str:
    return f"10.{block}.{i // 256}.{i % 256}"


def build_policy_dict(nodes: int, jobs: int | None = None) -> dict[str, Any]:
    """The synthetic policy (as the YAML document would be) for about ``nodes`` nodes; ``jobs`` changes
    how many jobs the workers are split into (default 100 of 88 at 10,000 nodes; the flow generator
    assumes the default)."""
    scale = nodes / 10_000
    storage, mgmt = max(1, round(STORAGE * scale)), max(1, round(MGMT * scale))
    job_size = JOB_SIZE
    if jobs is None:
        jobs = max(1, round(JOBS * scale))
    else:
        job_size = max(1, round(JOBS * JOB_SIZE * scale / jobs))
    zones = [
        {"name": "workload"},
        {"name": "storage"},
        {"name": "management"},
        {"name": "user"},
        {"name": "admin"},
        {"name": "external", "trust": "external"},
    ]
    node_list: list[dict[str, Any]] = []
    job_list: list[dict[str, Any]] = []
    services: list[dict[str, Any]] = []
    for j in range(jobs):
        members = []
        for k in range(job_size):
            i = j * job_size + k
            node_list.append({"name": f"w{i}", "zone": "workload", "addresses": [_addr(1, i)]})
            members.append(f"w{i}")
        job_list.append({"name": f"job{j}", "identity": f"spiffe://bench/job/{j}", "members": members})
    for kind, zone, block, count, svc_port, svc_class in (
        ("st", "storage", 2, storage, 8080, "storage"),
        ("mg", "management", 3, mgmt, 8000, "management"),
        ("us", "user", 4, USERS, None, None),
        ("jp", "admin", 5, JUMPS, None, None),
        ("ex", "external", 9, EXTERNAL, 9000, "replication"),
    ):
        for i in range(count):
            node_list.append({"name": f"{kind}{i}", "zone": zone, "addresses": [_addr(block, i)]})
            if svc_port is not None:
                services.append({"name": f"{kind}{i}-svc", "node": f"{kind}{i}", "port": svc_port, "class": svc_class})
            if kind == "mg":
                services.append(
                    {"name": f"mg{i}-ssh", "node": f"mg{i}", "port": 22, "class": "management", "admin": True}
                )
    approved: list[dict[str, Any]] = []
    for j in range(jobs):
        approved += [
            {"id": f"job{j}-coll", "from": {"job": f"job{j}"}, "to": {"job": f"job{j}"}, "ports": "1024-65535",
             "class": "collective"},
            {"id": f"job{j}-data", "from": {"job": f"job{j}"}, "to": {"zone": "storage"}, "ports": 8080,
             "class": "storage"},
            {"id": f"job{j}-api", "from": {"job": f"job{j}"}, "to": {"zone": "management"}, "ports": 8000,
             "class": "management"},
        ]  # fmt: skip
    approved += [
        {"id": "users-api", "from": {"zone": "user"}, "to": {"zone": "management"}, "ports": 8000,
         "class": "management"},
        {"id": "admin-ssh", "from": {"zone": "admin"}, "to": {"zone": "management"}, "ports": 22,
         "class": "management"},
        {"id": "replicate", "from": {"zone": "storage"}, "to": {"zone": "external"}, "ports": 9000,
         "class": "replication"},
        {"id": "offsite-tls", "from": {"zone": "storage"}, "to": {"cidr": "198.51.100.0/24"}, "ports": 443,
         "class": "replication"},
    ]  # fmt: skip
    req = {"protection": "required"}
    return {
        "cluster": "bench",
        "zones": zones,
        "nodes": node_list,
        "jobs": job_list,
        "services": services,
        "approved": approved,
        "classes": {"storage": req, "collective": req, "management": req, "replication": req},
    }


def generate_flows(doc: dict[str, Any], rows: int, seed: int) -> pa.Table:
    """Flows shaped like the policy's traffic, vectorised with numpy."""
    rng = np.random.default_rng(seed)
    jobs = len(doc["jobs"])
    n_st = sum(1 for n in doc["nodes"] if n["zone"] == "storage")
    n_mg = sum(1 for n in doc["nodes"] if n["zone"] == "management")
    workers = jobs * JOB_SIZE
    # Address table: workers, storage, mgmt, users, jumps, external, then unknown internet addresses.
    addrs = [n["addresses"][0] for n in doc["nodes"]]
    base = {"w": 0, "st": workers, "mg": workers + n_st, "us": workers + n_st + n_mg}
    base["jp"] = base["us"] + USERS
    base["ex"] = base["jp"] + JUMPS
    unknown0 = len(addrs)
    addrs += [f"198.51.100.{i}" for i in range(1, 200)] + [f"203.0.113.{i}" for i in range(1, 200)]
    kinds = rng.choice(8, size=rows, p=[0.55, 0.22, 0.10, 0.05, 0.03, 0.02, 0.02, 0.01])
    src = np.empty(rows, np.int64)
    dst = np.empty(rows, np.int64)
    dport = np.empty(rows, np.int32)
    job = rng.integers(0, jobs, rows)
    w_a = job * JOB_SIZE + rng.integers(0, JOB_SIZE, rows)
    w_b = job * JOB_SIZE + rng.integers(0, JOB_SIZE, rows)
    w_other = ((job + 1 + rng.integers(0, max(jobs - 1, 1), rows)) % jobs) * JOB_SIZE + rng.integers(0, JOB_SIZE, rows)
    st = base["st"] + rng.integers(0, n_st, rows)
    mg = base["mg"] + rng.integers(0, n_mg, rows)
    ephemeral = rng.integers(1024, 65536, rows).astype(np.int32)
    table = [
        (w_a, w_b, ephemeral),  # 0 collective within a job
        (w_a, st, 8080),  # 1 dataset reads
        (w_a, mg, 8000),  # 2 job API
        (w_a, w_other, ephemeral),  # 3 cross-job lateral (unapproved)
        (base["jp"] + rng.integers(0, JUMPS, rows), mg, 22),  # 4 admin ssh
        (st, base["ex"] + rng.integers(0, EXTERNAL, rows), 9000),  # 5 replication
        (st, unknown0 + rng.integers(0, 199, rows), 443),  # 6 off-site TLS (CIDR rule)
        (w_a, unknown0 + 199 + rng.integers(0, 199, rows), 443),  # 7 egress to the internet (unapproved)
    ]
    for k, (s, d, p) in enumerate(table):
        m = kinds == k
        src[m] = s[m]
        dst[m] = d[m]
        dport[m] = p[m] if isinstance(p, np.ndarray) else p
    addr = pa.array(addrs, pa.string())
    protections = np.array(["encrypted", "plaintext", "handshake-only", "unknown"])
    prot = protections[rng.choice(4, size=rows, p=[0.7, 0.2, 0.05, 0.05])]
    return pa.table(
        {
            "src": addr.take(pa.array(src)),
            "dst": addr.take(pa.array(dst)),
            "sport": pa.array(rng.integers(32768, 61000, rows).astype(np.int32)),
            "dport": pa.array(dport),
            "proto": pa.array(np.full(rows, 6, np.uint8)),
            "packets": pa.array(rng.integers(1, 10_000, rows)),
            "bytes": pa.array(rng.integers(100, 100_000_000, rows)),
            "protection": pa.array(prot).dictionary_encode(),
            "source": pa.DictionaryArray.from_arrays(pa.array(np.zeros(rows, np.int32)), pa.array(["bench"])),
        }
    )


def _interleaved(
    cases: list[tuple[str, Callable[[], object]]], repeats: int
) -> list[tuple[str, list[float], list[float]]]:
    """Wall and CPU seconds (this process, all engine threads) of each case, run in rotation: one run
    of every case per round, so a load change on the shared machine falls on all cases alike rather
    than on whichever case happened to run then."""
    wall: dict[str, list[float]] = {name: [] for name, _ in cases}
    cpu: dict[str, list[float]] = {name: [] for name, _ in cases}
    for _ in range(repeats):
        for name, fn in cases:
            c0, t0 = time.process_time(), time.perf_counter()
            fn()
            wall[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
    return [(name, wall[name], cpu[name]) for name, _ in cases]


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print a markdown table; exit 1 if a target is missed."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--nodes", type=int, default=10_000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--dir", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "ringfence-bench")
    ap.add_argument("--per-flow", action="store_true", help="also time classify() materialising every row")
    args = ap.parse_args(argv)
    os.environ["RINGFENCE_THREADS"] = str(args.threads)  # read by ringfence.analyze's engine sessions

    import duckdb

    from ringfence.analyze import classify, communication_matrix, protection_breakdown
    from ringfence.policy import Policy

    doc = build_policy_dict(args.nodes)
    policy = Policy.model_validate_json(json.dumps(doc))
    args.dir.mkdir(parents=True, exist_ok=True)
    path = args.dir / f"flows-{args.rows}-{args.nodes}-{args.seed}.parquet"
    if not path.exists():
        t0 = time.perf_counter()
        tmp = path.with_suffix(".tmp")
        pq.write_table(generate_flows(doc, args.rows, args.seed), tmp, row_group_size=1 << 20)
        tmp.replace(path)
        print(f"generated {path} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)

    inventory = pa.table(
        {
            "address": [n.addresses[0] for n in policy.nodes],
            "node": [n.name for n in policy.nodes],
            "zone": [n.zone for n in policy.nodes],
        }
    )
    con = duckdb.connect()
    con.execute(f"SET threads = {args.threads}")
    con.register("inventory", inventory)
    source = "read_parquet('" + str(path).replace("'", "''") + "')"
    baseline_sql = f"""SELECT s.zone AS src_zone, d.zone AS dst_zone, f.protection,
               count(*) AS flows, sum(f.bytes) AS bytes
        FROM {source} f LEFT JOIN inventory s ON s.address = f.src LEFT JOIN inventory d ON d.address = f.dst
        GROUP BY ALL"""

    matrix = communication_matrix(path, policy)  # warm-up (file cache, compiled plan), and the figures below
    cases: list[tuple[str, Callable[[], object]]] = [
        ("baseline: join twice + group by zone pair", lambda: con.sql(baseline_sql).to_arrow_table()),
        ("ringfence communication_matrix", lambda: communication_matrix(path, policy)),
        ("ringfence protection_breakdown", lambda: protection_breakdown(path, policy)),
        # A fresh copy of the policy is a cache miss: what one CLI run pays, the compile step included.
        ("ringfence communication_matrix, compile included", lambda: communication_matrix(path, policy.model_copy())),
    ]
    if args.per_flow:
        flows = pq.read_table(path)
        cases.append(("ringfence classify (every row to Arrow)", lambda: classify(flows, policy)))
    results = _interleaved(cases, args.repeats)

    print(
        f"\n{args.rows:,} flows, {len(policy.nodes):,} nodes, {len(policy.approved)} approved flows, "
        f"{args.threads} threads, median of {args.repeats}, cases interleaved\n"
    )
    base_wall, base_cpu = results[0][1], results[0][2]
    print(
        "| case | median wall s | runs s | x baseline (wall, median of round ratios) "
        "| median CPU s | x baseline (CPU) |"
    )
    print("|---|---:|---|---:|---:|---:|")
    ratios: dict[str, float] = {}
    for name, wall, cpu in results:
        ratio = statistics.median(w / b for w, b in zip(wall, base_wall, strict=True))
        cpu_ratio = statistics.median(c / b for c, b in zip(cpu, base_cpu, strict=True))
        ratios[name] = ratio
        print(
            f"| {name} | {statistics.median(wall):.3f} | {', '.join(f'{r:.2f}' for r in wall)} | {ratio:.2f} "
            f"| {statistics.median(cpu):.3f} | {cpu_ratio:.2f} |"
        )
    print(
        f"\nload average at the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())} (wall times need an idle machine)"
    )
    status = dict(zip(matrix.column("status").to_pylist(), matrix.column("flows").to_pylist(), strict=False))
    unapproved = sum(
        f
        for s, f in zip(matrix.column("status").to_pylist(), matrix.column("flows").to_pylist(), strict=True)
        if s == "unapproved"
    )
    print(f"\nmatrix: {matrix.num_rows} rows; unapproved flows {unapproved:,}; statuses {sorted(status)}")
    m = statistics.median(results[1][1])
    rel = ratios["ringfence communication_matrix"]
    ok_abs, ok_rel = m < 3.0, rel <= 1.2
    print(
        f"target < 3 s: {'met' if ok_abs else 'MISSED'} ({m:.2f} s); "
        f"target <= 1.2x baseline: {'met' if ok_rel else 'MISSED'} ({rel:.2f}x)"
    )
    return 0 if ok_abs and ok_rel else 1


if __name__ == "__main__":
    sys.exit(main())
