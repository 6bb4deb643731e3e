"""Scale of the nftables enforcement: render, load and connect through a policy of 100 … 10,000 nodes.

For each size (nodes, nodes/20 jobs): render the fabric table (hooked at ``input`` so one namespace
terminates the traffic), load it with ``nft -j -f`` into a throwaway namespace, and measure TCP
connect latency from a second throwaway namespace over a veth pair — through the loaded ruleset and
through an empty one, alternating rounds so drift on a shared machine hits both alike. The client and
server use the addresses of two ranks of the same job, so every SYN takes the real path: conntrack,
source-address verdict map, the job's group chain, accept.

Run as root: ``.venv/bin/python benchmarks/bench_nft_scale.py [--sizes 100,1000,10000] [--connects 1500]``.
Prints a Markdown table (the figures in BENCHMARKS.md / docs/enforcement.md) and, with ``--json``, raw data.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from typing import Any

from ringfence.enforce.nftables import render_fabric, ruleset_stats
from ringfence.enforce.nftrun import Throwaway, delete_table, load, throwaway_namespace
from ringfence.enforce.synth import synthetic_policy
from ringfence.policy.matrix import resolve

PORT = 20001  # inside the synthetic jobs' collective range
#: The smallest stateful table: conntrack plus one accept. Comparing against it separates the fixed cost
#: of connection tracking (paid by any stateful firewall) from the cost that grows with the policy.
STATEFUL_MINIMUM: dict[str, Any] = {
    "nftables": [
        {"add": {"table": {"family": "inet", "name": "ringfence"}}},
        {
            "add": {
                "chain": {
                    "family": "inet",
                    "table": "ringfence",
                    "name": "filter",
                    "type": "filter",
                    "hook": "input",
                    "prio": 0,
                    "policy": "accept",
                }
            }
        },
        {
            "add": {
                "rule": {
                    "family": "inet",
                    "table": "ringfence",
                    "chain": "filter",
                    "expr": [
                        {"match": {"op": "in", "left": {"ct": {"key": "state"}}, "right": ["established", "related"]}},
                        {"accept": None},
                    ],
                }
            }
        },
    ]
}

_CLIENT = r"""
import socket, sys, time, json
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
lat = []
for _ in range(n):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    t = time.perf_counter_ns(); s.connect((host, port)); lat.append(time.perf_counter_ns() - t); s.close()
print(json.dumps(lat))
"""

_SERVER = r"""
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(4096)
while True:
    c, _ = s.accept(); c.close()
"""


def _sh(*argv: str) -> None:
    subprocess.run(list(argv), check=True, capture_output=True, timeout=60)


def _connects(cli: Throwaway, host: str, n: int) -> list[int]:
    res = cli.executor.run(["python3", "-c", _CLIENT, host, str(PORT), str(n)], timeout=300)
    if res.returncode != 0:
        raise RuntimeError(res.stderr.decode())
    lat: list[int] = json.loads(res.stdout)
    return lat


def _pct(values: list[int], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] / 1000.0


def measure(nodes: int, connects: int, rounds: int) -> dict[str, Any]:
    """Render, load and time one size; returns the figures of one table row."""
    jobs = max(1, nodes // 20)
    t0 = time.perf_counter()
    policy = synthetic_policy(nodes, jobs)
    matrix = resolve(policy)
    doc = render_fabric(matrix, hook="input", bridge=False)
    render_s = time.perf_counter() - t0
    stats = ruleset_stats(doc)
    client_addr, server_addr = matrix.node_addresses["w0"][0], matrix.node_addresses["w1"][0]
    with throwaway_namespace("bc") as cli, throwaway_namespace("bs") as srv:
        veth = f"{cli.name[:8]}v"
        _sh("ip", "-n", cli.name, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", srv.name)
        for ns, dev, addr in ((cli, veth, client_addr), (srv, "eth0", server_addr)):
            _sh("ip", "-n", ns.name, "link", "set", "lo", "up")
            _sh("ip", "-n", ns.name, "addr", "add", f"{addr}/8", "dev", dev)
            _sh("ip", "-n", ns.name, "link", "set", dev, "up")
        server = srv.executor.spawn(["python3", "-c", _SERVER, server_addr, str(PORT)])
        try:
            time.sleep(0.5)
            _connects(cli, server_addr, 50)  # warm up ARP, caches
            t1 = time.perf_counter()
            load(srv.executor, doc)
            load_s = time.perf_counter() - t1
            empty: list[float] = []
            minimal: list[float] = []
            loaded: list[float] = []
            p99_e: list[float] = []
            p99_l: list[float] = []
            for _ in range(rounds):
                delete_table(srv.executor, "inet", "ringfence")
                lat = _connects(cli, server_addr, connects)
                empty.append(statistics.median(lat) / 1000.0)
                p99_e.append(_pct(lat, 0.99))
                load(srv.executor, STATEFUL_MINIMUM)
                minimal.append(statistics.median(_connects(cli, server_addr, connects)) / 1000.0)
                delete_table(srv.executor, "inet", "ringfence")
                load(srv.executor, doc)
                lat = _connects(cli, server_addr, connects)
                loaded.append(statistics.median(lat) / 1000.0)
                p99_l.append(_pct(lat, 0.99))
        finally:
            server.stop()
    e, mi, lo = statistics.median(empty), statistics.median(minimal), statistics.median(loaded)
    return {
        "nodes": nodes,
        "jobs": jobs,
        "flows": len(matrix.flows),
        "rules": stats["rules"],
        "chains": stats["chains"],
        "sets": stats["sets"],
        "elements": stats["elements"],
        "json_bytes": len(json.dumps(doc)),
        "render_s": round(render_s, 3),
        "load_s": round(load_s, 3),
        "connect_empty_us": round(e, 1),
        "connect_stateful_min_us": round(mi, 1),
        "connect_loaded_us": round(lo, 1),
        "connect_overhead_pct": round(100.0 * (lo - e) / e, 1),
        "overhead_vs_stateful_min_pct": round(100.0 * (lo - mi) / mi, 1),
        "p99_empty_us": round(statistics.median(p99_e), 1),
        "p99_loaded_us": round(statistics.median(p99_l), 1),
    }


def main(argv: list[str] | None = None) -> int:
    """Run the sizes given and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--sizes", default="100,1000,10000")
    ap.add_argument("--connects", type=int, default=1500)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rows = [measure(int(n), args.connects, args.rounds) for n in args.sizes.split(",")]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    cols = [
        "nodes",
        "jobs",
        "flows",
        "rules",
        "chains",
        "sets",
        "elements",
        "render_s",
        "load_s",
        "connect_empty_us",
        "connect_stateful_min_us",
        "connect_loaded_us",
        "connect_overhead_pct",
        "overhead_vs_stateful_min_pct",
        "p99_empty_us",
        "p99_loaded_us",
    ]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(str(r[c]) for c in cols) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
