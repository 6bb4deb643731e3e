"""One Markdown table from several ``run_fuzz.py`` results (a long campaign is run a target at a time).

    python benchmarks/fuzz/summarise.py out/fuzz-long/*/results.json

Each row is one target of one run: whether it reached the runs it was asked for, its inputs, edges,
crashes, hangs, slowest input, peak RSS, CPU and wall time, the load average at its start and end,
and the commit it fuzzed. A target in several files is listed once per file, in the order given.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def rows(paths: list[Path]) -> list[str]:
    """The table's lines: header, rule, one line per target per results file."""
    out = [
        "| target | reached | inputs | inputs / CPU s | edges | crashes | hangs | slowest input (CPU s) "
        "| peak RSS (MB) | CPU s | wall s | began (UTC) | load (start → end) | commit |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|",
    ]
    for path in paths:
        doc = json.loads(path.read_text())
        meta = doc["meta"]
        for r in doc["targets"]:
            asked = int(meta["runs_per_target"])
            reached = "**10^6**" if asked == 1_000_000 and r["inputs"] >= asked else f"no ({r['inputs'] / asked:.0%})"
            if r.get("stopped"):
                reached += f", stopped: {r['stopped']}"
            load = (f"{r['load_start'][0]} → {r['load_end'][0]}" if "load_start" in r
                    else f"? → {meta['load_average'][0]:.1f}")
            out.append(
                f"| {r['target']} | {reached} | {r['inputs']:,} | {r['inputs_per_cpu_s']:,} | {r['edges']} "
                f"| {r['crashes']} | {r['hangs']} | {r.get('slowest_input_cpu_s', '-')} | {r['peak_rss_mb']} "
                f"| {r['cpu_s']} | {r['wall_s']} | {str(r.get('began', meta['date']))[11:16]} | {load} "
                f"| {meta.get('commit', '?')} |"
            )
    return out


def main(argv: list[str] | None = None) -> int:
    """Print the table for the results files named."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", type=Path, nargs="+", help="results.json files of run_fuzz.py")
    print("\n".join(rows(ap.parse_args(argv).results)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
