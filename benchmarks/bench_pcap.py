"""Benchmark the pcap reader against tshark; prints a markdown table.

Usage: ``.venv/bin/python benchmarks/bench_pcap.py --size 1G [--small-size 256M] [--runs 3] [--rss-size 10G]``

- a mixed training-cluster capture of ``--size`` (see gen_capture.py) and a small-packet capture of
  ``--small-size``, generated once into ``--dir`` and reused;
- three measurements per run, interleaved so that they share the machine's load: the *whole command* as a
  user runs it (``ringfence flows FILE --format jsonl`` in a new process, output to /dev/null: start-up,
  reading, classification and JSON output), the reader *in-process* (``PcapReader().read`` timed inside a
  child limited to one thread, imports excluded), and tshark ``-q -z conv,tcp -z conv,udp`` on the same file;
- one warm-up read first, so the file is in the page cache; medians of ``--runs`` runs, with peak RSS, and
  the ratios to tshark of the same run; the load average before and after is printed (a shared machine);
- peak RSS while streaming ``--rss-size`` bytes through a FIFO (no disk needed; 0 skips it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gen_capture import generate, parse_size  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ONE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OMP_THREAD_LIMIT": "1"}
CHILD = r"""
import json, resource, sys, time
from pathlib import Path
import pyarrow as pa
pa.set_cpu_count(1)
pa.set_io_thread_count(1)
from ringfence.observe.flows.pcap import PcapReader
t0 = time.perf_counter()
c0 = time.process_time()
r = PcapReader().read(Path(sys.argv[1]))
print(json.dumps({"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0, "packets": r.records,
                  "flows": r.flows.num_rows, "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""

# The command's own work (read, classify, JSON, write) without the interpreter's and the CLI's start-up.
CHILD_COMMAND = r"""
import json, sys, time
import pyarrow as pa
pa.set_cpu_count(1)
pa.set_io_thread_count(1)
from ringfence.cli import main
import ringfence.cli.flows_cmd, ringfence.observe.flows.registry  # what the verb imports, loaded up front
try:
    main(["--version"])  # builds the parser once: the CLI's start-up imports are not the command's work
except SystemExit:
    pass
t0 = time.perf_counter()
c0 = time.process_time()
code = main(["flows", sys.argv[1], "--format", "jsonl", "-o", sys.argv[2]])
print(json.dumps({"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0, "code": code}))
"""


def _command_in_process(path: Path) -> dict[str, float]:
    env = {**os.environ, **ONE_THREAD, "PYTHONPATH": str(ROOT / "src")}
    with tempfile.TemporaryDirectory() as d:
        out = subprocess.run([sys.executable, "-c", CHILD_COMMAND, str(path), str(Path(d) / "flows.jsonl")], env=env,
                             capture_output=True, text=True, check=True, timeout=3600).stdout  # fmt: skip
    result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return result


def _child(path: Path) -> dict[str, float]:
    env = {**os.environ, **ONE_THREAD, "PYTHONPATH": str(ROOT / "src")}
    out = subprocess.run([sys.executable, "-c", CHILD, str(path)], env=env, capture_output=True, text=True,
                         check=True, timeout=3600).stdout  # fmt: skip
    result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return result


def _command(path: Path) -> tuple[float, int]:
    """Wall time and peak RSS of ``ringfence flows PATH --format jsonl``, the console script of this Python."""
    script = Path(sys.executable).with_name("ringfence")
    argv = [str(script)] if script.exists() else [sys.executable, "-m", "ringfence"]
    env = {**os.environ, **ONE_THREAD}
    t0 = time.perf_counter()
    proc = subprocess.Popen([*argv, "flows", str(path), "--format", "jsonl"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)  # fmt: skip
    assert proc.stderr is not None
    err = proc.stderr.read()
    proc.stderr.close()
    _, status, usage = os.wait4(proc.pid, 0)  # reaped here, for this child's own peak RSS
    wall = time.perf_counter() - t0
    proc.returncode = code = os.waitstatus_to_exitcode(status)
    if code not in (0, 1):
        raise RuntimeError(f"ringfence flows failed ({code}): {err.decode(errors='replace')[-500:]}")
    return wall, usage.ru_maxrss * 1024


def _tshark(path: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run(["tshark", "-q", "-n", "-r", str(path), "-z", "conv,tcp", "-z", "conv,udp"],
                   capture_output=True, check=True, timeout=3600)  # fmt: skip
    return time.perf_counter() - t0


def _capture(directory: Path, size: int, kind: str) -> Path:
    path = directory / f"bench-{kind}-{size}.pcap"
    if not path.exists():
        tmp = path.with_suffix(".part")
        t0 = time.perf_counter()
        with open(tmp, "wb") as f:
            generate(f, size, kind)
        tmp.rename(path)
        print(f"generated {path} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return path


def _fifo_rss(size: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as d:
        fifo = Path(d) / "stream.pcap"
        os.mkfifo(fifo)

        def feed() -> None:
            with open(fifo, "wb") as f:
                generate(f, size, "mixed", seed=7)

        writer = threading.Thread(target=feed, daemon=True)
        writer.start()
        result = _child(fifo)
        writer.join()
        return result


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--size", default="1G")
    ap.add_argument("--small-size", default="256M")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--rss-size", default="10G")
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "ringfence-bench")
    ap.add_argument("--no-tshark", action="store_true")
    args = ap.parse_args(argv)
    args.dir.mkdir(parents=True, exist_ok=True)
    tshark = shutil.which("tshark") and not args.no_tshark

    lines = [
        "| capture | size | packets | flows | whole command (median) | GB/s | command without start-up | GB/s "
        "| reader in-process (median) | GB/s | Mpkt/s | reader CPU | peak RSS (reader) | tshark (median) "
        "| command vs tshark | reader vs tshark |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    load_before = os.getloadavg()
    for kind, size in (("mixed", parse_size(args.size)), ("small", parse_size(args.small_size))):
        if size <= 0:
            continue
        path = _capture(args.dir, size, kind)
        nbytes = path.stat().st_size
        _child(path)  # warm the page cache
        runs, commands, inner, tsharks = [], [], [], []
        for _ in range(args.runs):  # interleaved: each alternative sees the same load
            commands.append(_command(path)[0])
            inner.append(_command_in_process(path)["wall"])
            runs.append(_child(path))
            if tshark:
                tsharks.append(_tshark(path))
        wall = statistics.median(r["wall"] for r in runs)
        cpu = statistics.median(r["cpu"] for r in runs)  # on a loaded machine, what one core really spent
        cmd = statistics.median(commands)
        own = statistics.median(inner)
        rss = max(r["rss"] for r in runs)
        ts = statistics.median(tsharks) if tsharks else float("nan")
        lines.append(
            f"| {kind} | {nbytes / 1e9:.2f} GB | {int(runs[0]['packets'])} | {int(runs[0]['flows'])} | {cmd:.2f} s | "
            f"{nbytes / cmd / 1e9:.2f} | {own:.2f} s | {nbytes / own / 1e9:.2f} | "
            f"{wall:.2f} s | {nbytes / wall / 1e9:.2f} | "
            f"{runs[0]['packets'] / wall / 1e6:.2f} | {cpu:.2f} s "
            f"| {rss / 2**20:.0f} MiB | {ts:.2f} s | {ts / cmd:.1f}x | {ts / wall:.1f}x |"
        )
    rss_size = parse_size(args.rss_size)
    if rss_size > 0:
        r = _fifo_rss(rss_size)
        lines.append(
            f"| mixed via FIFO (RSS) | {rss_size / 1e9:.1f} GB | {int(r['packets'])} | {int(r['flows'])} "
            "| – | – | – | – | "
            f"{r['wall']:.1f} s (incl. generation) | – | – | – | {r['rss'] / 2**20:.0f} MiB | – | – | – |"
        )
    load_after = os.getloadavg()
    print(f"\nOne thread; median of {args.runs} interleaved runs after a warm-up read (page cache warm); "
          f"load average {load_before[0]:.1f} before, {load_after[0]:.1f} after; {os.cpu_count()} CPUs.\n")  # fmt: skip
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
