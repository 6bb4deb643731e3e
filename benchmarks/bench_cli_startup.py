"""CLI start-up: ``ringfence --version`` and ``ringfence VERB --help`` as whole processes vs ``python -c pass``.

    .venv/bin/python benchmarks/bench_cli_startup.py               # 15 repeats, interleaved
    .venv/bin/python benchmarks/bench_cli_startup.py --repeats 30

Each arm is a fresh interpreter started the way a user starts it (the console script for ringfence,
the same interpreter for the baseline), so the figures include Python's own start-up. Arms are
interleaved per repeat (pass, --version, assess --help, …) so that load from other processes hits
them alike; each cell is the median wall time over the repeats. The target (issue 12) is ≤ 0.3 s
for ``--version``; the "over python" column is what ringfence itself costs. Prints a markdown table
with machine, load and date, ready for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

TARGET_S = 0.3


def _ringfence() -> list[str]:
    # The console script next to this interpreter (a venv's bin/), else ``python -m ringfence.cli``.
    script = Path(sys.executable).with_name("ringfence")
    if script.exists():
        return [str(script)]
    found = shutil.which("ringfence")
    return [found] if found else [sys.executable, "-m", "ringfence.cli"]


def _arms() -> dict[str, list[str]]:
    rf = _ringfence()
    return {
        "python -c pass": [sys.executable, "-c", "pass"],
        "ringfence --version": [*rf, "--version"],
        "ringfence assess --help": [*rf, "assess", "--help"],
        "ringfence flows --help": [*rf, "flows", "--help"],
        "ringfence bench allreduce --help": [*rf, "bench", "allreduce", "--help"],
        "ringfence encrypt enable --help": [*rf, "encrypt", "enable", "--help"],
    }


def _time(argv: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.decode(errors='replace')}")
    return took


def main(argv: list[str] | None = None) -> int:
    """Run the interleaved repeats and print the table; exit 1 if ``--version`` misses the target."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=15)
    args = p.parse_args(argv)
    arms = _arms()
    for cmd in arms.values():  # warm the page cache once; not counted
        _time(cmd)
    load0 = os.getloadavg()[0]
    times: dict[str, list[float]] = {name: [] for name in arms}
    for _ in range(args.repeats):
        for name, cmd in arms.items():
            times[name].append(_time(cmd))
    load1 = os.getloadavg()[0]
    base = statistics.median(times["python -c pass"])
    print(f"CLI start-up, {platform.node()} ({os.cpu_count()} cores, Python {platform.python_version()}), "
          f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, median of {args.repeats} interleaved repeats, "
          f"load average {load0:.1f} → {load1:.1f}\n")
    print("| command | median | min | over `python -c pass` | target |")
    print("|---|---:|---:|---:|---|")
    for name, ts in times.items():
        med = statistics.median(ts)
        target = f"≤ {TARGET_S} s" if name == "ringfence --version" else ""
        over = "—" if name == "python -c pass" else f"+{(med - base) * 1000:.0f} ms ({med / base:.1f}×)"
        print(f"| `{name}` | {med * 1000:.0f} ms | {min(ts) * 1000:.0f} ms | {over} | {target} |")
    version = statistics.median(times["ringfence --version"])
    return 0 if version <= TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
