"""``make fuzz``: run every fuzz target of tests/fuzz for a fixed budget and report honestly.

Each target runs in its own process (so its peak RSS is its own), feeding mutated seeds to the
parser until ``--inputs`` inputs or ``--seconds`` seconds, whichever comes first. Crashes and hangs
are saved under ``--out`` as reproducers (``<target>-<n>.bin``) with a line in ``results.json``.

    python benchmarks/fuzz/run_fuzz.py --seconds 60 --out out/fuzz
    python benchmarks/fuzz/run_fuzz.py --target zeek --inputs 1000000
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "fuzz"))

from fuzz_kit import mutate, run_one, targets  # noqa: E402 - the kit lives with the tests it serves


def fuzz_one(name: str, seconds: float, inputs: int, out: Path, seed: int) -> dict[str, object]:
    """Fuzz one target in this process; the result row for results.json."""
    target = targets()[name]
    rng = random.Random(seed)
    tried = crashes = hangs = 0
    slowest = 0.0
    kinds: dict[str, int] = {}
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"rf-fuzz-{name}-") as tmp:
        work = Path(tmp)
        while tried < inputs and time.monotonic() - start < seconds:
            base = rng.choice(target.seeds)
            data = mutate(rng, base, target.seeds) if rng.random() > 0.02 else base
            outcome = run_one(target, data, work)
            tried += 1
            slowest = max(slowest, outcome.seconds)
            if outcome.kind != "ok":
                if outcome.kind == "crash":
                    crashes += 1
                else:
                    hangs += 1
                key = outcome.detail.split(":")[0]
                kinds[key] = kinds.get(key, 0) + 1
                if kinds[key] <= 3:  # a few reproducers per kind of failure, not thousands
                    (out / f"{name}-{crashes + hangs}.bin").write_bytes(data)
                    with (out / f"{name}-{crashes + hangs}.txt").open("w") as fh:
                        fh.write(f"{outcome.kind}: {outcome.detail}\n")
    return {
        "target": name,
        "inputs": tried,
        "seconds": round(time.monotonic() - start, 1),
        "crashes": crashes,
        "hangs": hangs,
        "failure_kinds": kinds,
        "slowest_input_s": round(slowest, 3),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "seeds": len(target.seeds),
    }


def main() -> int:
    """Run the targets (each in a child process) and write results.json and a Markdown table."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=60.0, help="budget per target (default 60)")
    ap.add_argument("--inputs", type=int, default=1_000_000, help="inputs per target at most (default 1e6)")
    ap.add_argument("--target", action="append", help="only these targets (repeatable)")
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "fuzz")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.child:
        print(json.dumps(fuzz_one(args.child, args.seconds, args.inputs, args.out, args.seed)))
        return 0
    names = args.target or sorted(targets())
    rows = []
    for name in names:
        cmd = [sys.executable, __file__, "--child", name, "--seconds", str(args.seconds), "--inputs", str(args.inputs),
               "--out", str(args.out), "--seed", str(args.seed)]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ), check=False)
        if proc.returncode != 0:
            row = {"target": name, "error": proc.stderr.strip().splitlines()[-1:] or ["died"], "crashes": 1, "hangs": 0}
        else:
            row = json.loads(proc.stdout.strip().splitlines()[-1])
        rows.append(row)
        print(json.dumps(row), flush=True)
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": platform.node(),
            "cpus": os.cpu_count(), "python": platform.python_version(), "seconds_per_target": args.seconds}
    (args.out / "results.json").write_text(json.dumps({"meta": meta, "targets": rows}, indent=1) + "\n")
    print("\n| target | inputs | crashes | hangs | slowest input (s) | peak RSS (MB) |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['target']} | {r.get('inputs', '-')} | {r['crashes']} | {r['hangs']} | "
              f"{r.get('slowest_input_s', '-')} | {r.get('peak_rss_mb', '-')} |")
    return 1 if any(r["crashes"] or r["hangs"] for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
