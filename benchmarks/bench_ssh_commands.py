"""SSH commands to one host: a connection per command against one shared connection (OpenSSH ControlMaster).

A drill or a rollout step over SSH sends hundreds of short commands to each host; this times what one
costs, both ways, interleaved round by round so both see the same load, through the inventory's own
executor (the lab's jump-host prefix included). Needs an inventory, e.g. from a lab:

    ringfence lab up --name rfbench --no-traffic --no-scheduler
    ringfence lab hosts --name rfbench -o /tmp/rfbench-hosts.yaml
    python benchmarks/bench_ssh_commands.py --hosts /tmp/rfbench-hosts.yaml --node worker-0 --rounds 7
    ringfence lab down --name rfbench

Each round: ``--commands`` sequential ``true`` commands with a fresh executor of each kind (the shared
one opens its connection in the round, so its first command's key exchange is counted), then the same
number at once (``--concurrent``), where a connection per command also meets sshd's MaxStartups.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ringfence.targets import ssh as ssh_mod
from ringfence.targets.hosts import load_hosts
from ringfence.targets.interface import TargetError


def _executor(hosts: Path, node: str, multiplex: bool) -> ssh_mod.SshExecutor:
    h = load_hosts(hosts).hosts[node]
    return ssh_mod.SshExecutor(h.ssh or h.address, user=h.user, key=Path(h.key), known_hosts=Path(h.known_hosts),
                               port=h.port, name=node, prefix=h.client_prefix, multiplex=multiplex)


def _round(hosts: Path, node: str, multiplex: bool, commands: int, concurrent: int) -> tuple[float, float, int]:
    ex = _executor(hosts, node, multiplex)
    t = time.perf_counter()
    for _ in range(commands):
        ex.run(["true"], timeout=60)
    sequential = (time.perf_counter() - t) / commands

    def one(_i: int) -> bool:
        try:
            return ex.run(["true"], timeout=60).returncode == 0
        except TargetError:
            return False

    t = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrent) as pool:
        failed = sum(1 for ok in pool.map(one, range(concurrent)) if not ok)
    burst = time.perf_counter() - t
    ssh_mod.close_masters()
    return sequential, burst, failed


def main(argv: list[str] | None = None) -> int:
    """Run the rounds and print a markdown table of medians."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=Path, required=True)
    ap.add_argument("--node", required=True)
    ap.add_argument("--commands", type=int, default=10)
    ap.add_argument("--concurrent", type=int, default=14)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args(argv)
    rows: dict[bool, list[tuple[float, float, int]]] = {True: [], False: []}
    load0 = os.getloadavg()
    for i in range(args.rounds):
        for multiplex in ((True, False) if i % 2 == 0 else (False, True)):
            rows[multiplex].append(_round(args.hosts, args.node, multiplex, args.commands, args.concurrent))
    load1 = os.getloadavg()
    print(f"\nSSH commands to {args.node}, {args.rounds} interleaved rounds, medians; load "
          f"{load0[0]:.1f} → {load1[0]:.1f}\n")
    print(f"| executor | a command, {args.commands} in a row | {args.concurrent} at once (wall) | failed at once "
          "(all rounds) |")
    print("|---|---:|---:|---:|")
    for multiplex, name in ((False, "a connection per command"), (True, "one shared connection")):
        seq = statistics.median(r[0] for r in rows[multiplex])
        burst = statistics.median(r[1] for r in rows[multiplex])
        failed = sum(r[2] for r in rows[multiplex])
        print(f"| {name} | {1000 * seq:.0f} ms | {burst:.2f} s | {failed} of {args.concurrent * args.rounds} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
