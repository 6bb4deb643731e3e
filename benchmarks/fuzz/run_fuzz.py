"""``make fuzz``: a coverage-guided campaign (atheris, i.e. libFuzzer) over every entry of tests/fuzz/fuzz_entries.

Each target runs in its own child process (its peak RSS is its own; libFuzzer runs once per process):
the ringfence modules are instrumented for edge coverage, libFuzzer mutates the corpus (seeds from
``../shared`` read in place, made seeds and the growing corpus under ``--corpus``, ignored by git)
and keeps what reaches new edges. A *crash* is an exception other than the parser's documented
error (RingfenceError); a *hang* an input that takes more than ``--hang-s`` of CPU; both are saved
under ``--out/<target>/`` with their traceback, counted, and the campaign goes on. libFuzzer's own
``-timeout`` and ``-rss_limit_mb`` stay as backstops for a hang that never returns or a balloon.

    python benchmarks/fuzz/run_fuzz.py --runs 1000000 --seconds 600          # every target
    python benchmarks/fuzz/run_fuzz.py --target ipfix --runs 1000000 --seconds 0
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import subprocess
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "fuzz"))

from fuzz_entries import (  # noqa: E402 - the kit lives with the tests
    FULL_EVERY,
    Entry,
    entries,
    remove_scratch,
    tokens_dictionary,
    written_seeds,
)

import ringfence  # noqa: E402 - after the path set-up, as the kit below

#: Kept per failure signature: a few reproducers, not thousands.
KEEP_PER_SIGNATURE = 3
#: libFuzzer's wall-clock backstop for an input that never returns (the CPU-time check catches the rest).
BACKSTOP_S = 60
#: libFuzzer's memory backstop: past this RSS the child is stopped and the input saved as ``oom-*``.
RSS_LIMIT_MB = 2048


def _signature(exc: BaseException) -> str:
    """Exception type and the innermost ringfence frame: one line per distinct bug, not per input."""
    # frames of the installed package itself, not of any path that merely contains "ringfence" (a
    # checkout named so holds the tests and this script too)
    package = str(Path(ringfence.__file__).resolve().parent) + "/"
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if str(Path(f.filename).resolve()).startswith(package)]
    where = (f"ringfence/{str(Path(frames[-1].filename).resolve())[len(package):]}:{frames[-1].lineno}"
             if frames else "?")
    return f"{type(exc).__name__} at {where}"


class Recorder:
    """Counts and saves this child's failures; ``counts.json`` is rewritten at each one (they are rare)."""

    def __init__(self, out: Path) -> None:
        self.out = out
        out.mkdir(parents=True, exist_ok=True)
        self.counts: dict[str, int] = {}
        self.crashes = self.hangs = 0
        self.slowest = self._written = 0.0
        self.inputs: dict[str, int] = {}
        self._last = time.monotonic()
        self._write()

    def tried(self, name: str) -> int:
        """Count one input of target ``name`` (counts.json at most once a second); its number."""
        n = self.inputs[name] = self.inputs.get(name, 0) + 1
        if time.monotonic() - self._last > 1.0:
            self._write()
        return n

    def flush(self) -> None:
        """Write counts.json now (at the end of a multiplexed run)."""
        self._write()

    def _write(self) -> None:
        self._last = time.monotonic()
        doc = {"crashes": self.crashes, "hangs": self.hangs, "signatures": self.counts,
               "slowest_input_cpu_s": round(self.slowest, 4), "inputs_by_target": self.inputs}
        (self.out / "counts.json").write_text(json.dumps(doc, indent=1) + "\n")

    def failure(self, kind: str, signature: str, data: bytes, detail: str) -> None:
        """Count one crash or hang; keep its input and detail for the first few of its signature."""
        if kind == "crash":
            self.crashes += 1
        else:
            self.hangs += 1
        key = f"{kind}: {signature}"
        self.counts[key] = self.counts.get(key, 0) + 1
        if self.counts[key] <= KEEP_PER_SIGNATURE:
            name = f"{kind}-{hashlib.sha1(data).hexdigest()[:16]}"
            (self.out / f"{name}.bin").write_bytes(data)
            (self.out / f"{name}.txt").write_text(f"{key}\n\n{detail}\n")
        self._write()

    def timed(self, cpu_s: float) -> None:
        """Note an input's CPU time: the slowest is reported, so a new maximum is written out once it is
        10 % over the last one written (a handful of writes a run: libFuzzer's exit skips Python's atexit)."""
        if cpu_s > self.slowest:
            self.slowest = cpu_s
            if cpu_s > 1.1 * self._written:
                self._written = cpu_s
                self._write()


#: The child name of the multiplexed run: every target in one process, the input's first byte picking one.
MUX = "all"


def _seed_list(entries: list[Entry], corpus: Path, name: str) -> Path:
    """The ``-seed_inputs`` list file: shared seeds in place, made ones (or, multiplexed, prefixed ones) written."""
    if len(entries) == 1:
        paths = written_seeds(entries[0], corpus / f"{name}.made")
    else:  # each seed behind the byte that selects its target: these are generated files, under the corpus
        made = corpus / f"{name}.made"
        made.mkdir(parents=True, exist_ok=True)
        paths = []
        for i, entry in enumerate(entries):
            for j, seed in enumerate(entry.seeds()):
                paths.append(made / f"{entry.name}-{j}")
                paths[-1].write_bytes(bytes([i]) + seed[: 1 << 16])
    listing = corpus / f"{name}.seeds"
    listing.write_text(",".join(str(p) for p in paths))
    return listing


def child(args: argparse.Namespace) -> int:
    """Fuzz one target (or, for :data:`MUX`, all of them) with atheris in this process; never returns."""
    import atheris

    with atheris.instrument_imports(include=["ringfence"]):
        from ringfence.errors import RingfenceError

        table = entries()
        chosen = list(table.values()) if args.child == MUX else [table[args.child]]
        for entry in chosen:  # import every module the targets use while instrumenting
            for call, seed in [(c, s) for c in (entry.one, entry.full) if c is not None for s in entry.seeds()[:3]]:
                try:
                    call(seed)
                except RingfenceError:
                    pass
    # verify_store's documented error is OSError; every other parser's is a RingfenceError.
    expected = {e.name: (RingfenceError, OSError) if e.name == "evidence-verify" else (RingfenceError,) for e in chosen}
    out = args.out / args.child
    rec = Recorder(out)
    corpus = args.corpus / args.child
    corpus.mkdir(parents=True, exist_ok=True)
    seed_list = _seed_list(chosen, args.corpus, args.child)
    dictionary = args.corpus / "tokens.dict"
    dictionary.write_text(tokens_dictionary())

    n_seeds = len(seed_list.read_text().split(","))
    began = [0.0]

    def one_input(data: bytes) -> None:
        if len(chosen) > 1:
            # Multiplexed, the budget is kept here: libFuzzer's exit skips Python, so the per-target
            # counts are written and the process ends from inside (libFuzzer's limits stay as backstops).
            # The clock starts once the seeds have run, so every target gets its seeds and then its share.
            total = sum(rec.inputs.values())
            if total == n_seeds:
                began[0] = time.monotonic()
            spent = args.seconds > 0 and total > n_seeds and time.monotonic() - began[0] > args.seconds
            if total >= args.runs or spent:
                rec.flush()
                print(f"budget spent: {sum(rec.inputs.values())} inputs", file=sys.stderr, flush=True)
                os._exit(0)
            if not data:
                return
            entry, data = chosen[data[0] % len(chosen)], data[1:]
        else:
            entry = chosen[0]
        tried = rec.tried(entry.name)
        start = time.process_time()
        try:
            entry.one(data)
            if entry.full is not None and tried % FULL_EVERY == 0:
                entry.full(data)
        except expected[entry.name]:
            pass
        except Exception as exc:  # the campaign looks for exactly these: any foreign exception is a crash
            where = f"{entry.name}: " if len(chosen) > 1 else ""
            rec.failure("crash", where + _signature(exc), data, "".join(traceback.format_exception(exc))[-4000:])
        spent = time.process_time() - start
        rec.timed(spent)
        if spent > args.hang_s:
            rec.failure("hang", f"{entry.name}: over {args.hang_s} s of CPU", data, f"{spent:.2f} s of CPU")

    flags = [sys.argv[0], str(corpus), f"-seed_inputs=@{seed_list}", f"-dict={dictionary}",
             f"-max_len={args.max_len}", f"-timeout={BACKSTOP_S}", f"-rss_limit_mb={RSS_LIMIT_MB}",
             f"-artifact_prefix={out}/", "-print_final_stats=1", f"-seed={args.seed}", f"-runs={args.runs}"]
    if args.seconds > 0:
        flags.append(f"-max_total_time={int(args.seconds) + (60 if len(chosen) > 1 else 0)}")
    atheris.Setup(flags, one_input)
    atheris.Fuzz()
    return 0


def _final_stats(log: str) -> dict[str, object]:
    """Inputs, coverage and libFuzzer's own peak RSS from the child's libFuzzer log."""
    stats = dict(re.findall(r"^stat::(\w+):\s+(\d+)", log, re.M))
    progress = re.findall(r"^#(\d+)\s+\w+\s+cov: (\d+) ft: (\d+) corp: (\d+)", log, re.M)
    last = progress[-1] if progress else ("0", "0", "0", "0")
    return {"inputs": int(stats.get("number_of_executed_units", 0)), "edges": int(last[1]), "features": int(last[2]),
            "corpus": int(last[3]), "libfuzzer_peak_rss_mb": int(stats.get("peak_rss_mb", 0)),
            "inputs_per_s": int(stats.get("average_exec_per_sec", 0)),
            "slowest_input_wall_s": int(stats.get("slowest_unit_time_sec", 0))}


def _load() -> list[float]:
    """The 1, 5 and 15 minute load averages, rounded."""
    return [round(x, 1) for x in os.getloadavg()]


def _commit() -> str:
    """The checkout's commit (``+dirty`` with uncommitted changes to src/): what the figures are of."""
    def git(*cmd: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", "-C", str(ROOT), *cmd], capture_output=True, text=True, check=False)

    head = git("rev-parse", "--short", "HEAD").stdout.strip() or "?"
    return head + ("+dirty" if git("diff", "--quiet", "HEAD", "--", "src").returncode else "")


def run_target(name: str, args: argparse.Namespace) -> dict[str, object]:
    """One child for ``name``; its row of results.json (peak RSS from the kernel's rusage of the child)."""
    cmd = [sys.executable, __file__, "--child", name, "--runs", str(args.runs), "--seconds", str(args.seconds),
           "--out", str(args.out), "--corpus", str(args.corpus), "--seed", str(args.seed), "--max-len",
           str(args.max_len), "--hang-s", str(args.hang_s)]
    log_path = args.out / f"{name}.log"
    args.out.mkdir(parents=True, exist_ok=True)
    # On a shared machine a rate means little without the load it ran under: kept per target.
    began, load_start = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), _load()
    start = time.monotonic()
    with log_path.open("w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ))
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    remove_scratch(proc.pid)
    wall = time.monotonic() - start
    text = log_path.read_text(errors="replace")
    row: dict[str, object] = {"target": name, "began": began, "load_start": load_start, "load_end": _load(),
                              **_final_stats(text), "wall_s": round(wall, 1),
                              "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
                              "peak_rss_mb": round(usage.ru_maxrss / 1024, 1), "exit": proc.returncode}
    counts_path = args.out / name / "counts.json"
    counts = json.loads(counts_path.read_text()) if counts_path.is_file() else {"crashes": 1, "hangs": 0}
    row.update(counts)
    if counts.get("inputs_by_target") and not row["inputs"]:  # a multiplexed run ends itself, before libFuzzer's stats
        row["inputs"] = sum(counts["inputs_by_target"].values())
    row["inputs_per_cpu_s"] = round(int(str(row["inputs"])) / max(usage.ru_utime + usage.ru_stime, 1e-3))
    if proc.returncode != 0:  # libFuzzer stopped it (a backstop: timeout, out of memory) or it died
        artifacts = sorted(p.name for p in (args.out / name).glob("*-*") if not p.name.endswith((".bin", ".txt")))
        row["stopped"] = (re.findall(r"==\d+== ERROR: (.*)", text) or text.strip().splitlines()[-1:] or ["died"])[0]
        row["artifacts"] = artifacts
        row["crashes"] = int(str(row.get("crashes", 0))) + 1
    return row


def main(argv: list[str] | None = None) -> int:
    """Run the targets one after another and write results.json and a Markdown table."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=1_000_000, help="inputs per target (default 1e6)")
    ap.add_argument("--seconds", type=float, default=0, help="time limit per target, 0 for none (default)")
    ap.add_argument("--target", action="append", help="only these targets (repeatable)")
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "fuzz", help="results and reproducers")
    ap.add_argument("--corpus", type=Path, default=ROOT / ".fuzz", help="the growing corpus (ignored by git)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-len", type=int, default=65536, help="largest input libFuzzer makes (bytes)")
    ap.add_argument("--hang-s", type=float, default=1.0, help="an input over this much CPU time is a hang")
    ap.add_argument("--jobs", type=int, default=1, help="targets run at once (default 1: one campaign process)")
    ap.add_argument("--mux", action="store_true",
                    help=f"every target in one process ({MUX!r}), the first byte picking one: one start-up, for CI")
    ap.add_argument("--list", action="store_true", help="print the target names and exit")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(args)
    if args.list:
        print("\n".join(entries()))
        return 0
    names = [MUX] if args.mux else args.target or list(entries())
    rows = []
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:  # threads only wait on the children
        for row in pool.map(lambda name: run_target(name, args), names):
            rows.append(row)
            print(json.dumps(row), flush=True)
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": platform.node(),
            "cpus": os.cpu_count(), "python": platform.python_version(), "load_average": os.getloadavg(),
            "commit": _commit(), "runs_per_target": args.runs, "seconds_per_target": args.seconds, "jobs": args.jobs,
            "command": " ".join(sys.argv)}
    (args.out / "results.json").write_text(json.dumps({"meta": meta, "targets": rows}, indent=1) + "\n")
    print("\n| target | inputs | inputs per CPU s | edges | crashes | hangs | slowest input (CPU s) | peak RSS (MB) "
          "| CPU (s) | wall (s) |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['target']} | {r['inputs']:,} | {r['inputs_per_cpu_s']:,} | {r['edges']} | {r['crashes']} | "
              f"{r['hangs']} | {r.get('slowest_input_cpu_s', '-')} | {r['peak_rss_mb']} | {r['cpu_s']} | "
              f"{r['wall_s']} |")
    return 1 if any(r["crashes"] or r["hangs"] for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
