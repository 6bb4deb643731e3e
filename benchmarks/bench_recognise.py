"""What the payload recognisers cost: this tree against a base commit, in the same run.

Usage: ``.venv/bin/python benchmarks/bench_recognise.py --base COMMIT [--size 1G] [--flows 100000] [--runs 3]``

For each of the two trees (``git archive BASE src`` unpacked into a temporary directory, and this
working tree), alternately, in fresh single-threaded subprocesses, the median of ``--runs`` runs of:

- the whole in-process read of the mixed benchmark capture (gen_capture.py ``mixed``, ``--size``),
  as ``bench_pcap.py`` measures it (wall and CPU time: on a shared machine CPU time is the steadier);
- ``classify_flows`` alone on that capture's flows and samples;
- ``classify_flows`` on ``--flows`` synthetic flows × 16 sampled heads (a quarter TLS, a quarter float32
  tensors, a quarter WireGuard, a quarter random: the worst case, every head analysed).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gen_capture import generate, parse_size  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ONE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
CHILD = r"""
import json, sys, time
from pathlib import Path
import numpy as np
import pyarrow as pa
pa.set_cpu_count(1)
pa.set_io_thread_count(1)
from ringfence.observe.flows.pcap import PcapReader
from ringfence.observe.payload import classify_flows
from ringfence.observe.samples import FlowKeys, PayloadSamples

path, n = Path(sys.argv[1]), int(sys.argv[2])
t0, c0 = time.perf_counter(), time.process_time()
PcapReader().read(path)
read, read_cpu = time.perf_counter() - t0, time.process_time() - c0
_, keys, samples, _ = PcapReader()._read(path, None)
t0 = time.process_time()
classify_flows(keys, samples)
capture_classify = time.process_time() - t0

rng = np.random.default_rng(0)
per = 16
m = n * per
head = rng.integers(0, 256, (m, 64), dtype=np.uint8)
q = n // 4
tls = np.arange(q * per)
head[tls, :5] = [23, 3, 3, 5, 0]
head[tls[::per], :11] = [22, 3, 1, 2, 0, 1, 0, 1, 252, 3, 3]
head[q * per : 2 * q * per] = rng.normal(0, 1, q * per * 16).astype(np.float32).view(np.uint8).reshape(-1, 64)
wg = np.arange(2 * q * per, 3 * q * per)
head[wg, :4] = [4, 0, 0, 0]
head[wg, 12:16] = 0
proto = np.full(n, 6, dtype=np.uint8)
proto[2 * q : 3 * q] = 17
bulk_keys = FlowKeys(
    ethertype=np.full(n, 0x0800, dtype=np.uint16), proto=proto,
    sport=rng.integers(1024, 65535, n).astype(np.int32), dport=np.full(n, 443, dtype=np.int32),
    payload_bytes=np.full(n, 1424 * per, dtype=np.int64), payload_packets=np.full(n, per, dtype=np.int64),
)
bulk = PayloadSamples(flow=np.repeat(np.arange(n, dtype=np.int64), per), forward=np.arange(m) % 2 == 0,
                      length=np.full(m, 1424, dtype=np.int32), head=head)
t0 = time.process_time()
classify_flows(bulk_keys, bulk)
bulk_classify = time.process_time() - t0
print(json.dumps({"read": read, "read_cpu": read_cpu, "bytes": path.stat().st_size, "capture_flows": keys.n,
                  "capture_samples": samples.m, "capture_classify": capture_classify, "bulk_classify": bulk_classify}))
"""


def _unpack(commit: str, into: Path) -> Path:
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "src"], check=True, capture_output=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    return into / "src"


def _child(src: Path, capture: Path, flows: int) -> dict[str, float]:
    env = {**os.environ, **ONE_THREAD, "PYTHONPATH": str(src)}
    out = subprocess.run([sys.executable, "-c", CHILD, str(capture), str(flows)], env=env, capture_output=True,
                         text=True, check=True, timeout=3600).stdout  # fmt: skip
    result: dict[str, float] = json.loads(out)
    return result


def main(argv: list[str] | None = None) -> int:
    """Run the comparison and print a markdown table."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--base", required=True, help="the commit to compare against")
    ap.add_argument("--size", default="1G")
    ap.add_argument("--flows", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "ringfence-bench")
    args = ap.parse_args(argv)
    args.dir.mkdir(parents=True, exist_ok=True)
    capture = args.dir / f"mixed-{args.size}.pcap"
    if not capture.exists():
        with capture.open("wb") as fh:
            generate(fh, parse_size(args.size), "mixed")
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"base": _unpack(args.base, Path(tmp)), "this tree": ROOT / "src"}
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
        for _ in range(args.runs):
            for name, src in trees.items():  # alternate, so machine load falls on both alike
                runs[name].append(_child(src, capture, args.flows))
    first = runs["this tree"][0]
    print(f"mixed capture {first['bytes'] / 1e9:.2f} GB, {int(first['capture_flows'])} flows, "
          f"{int(first['capture_samples'])} sampled heads; synthetic {args.flows} flows x 16 heads; "
          f"medians of {args.runs} (base {args.base[:10]})\n")  # fmt: skip
    print("| tree | read in-process: wall s (GB/s), CPU s | classify, capture (ms CPU) | classify, synthetic (s CPU) |")
    print("|---|---|---|---|")
    for name, rs in runs.items():
        read = statistics.median(r["read"] for r in rs)
        cpu = statistics.median(r["read_cpu"] for r in rs)
        cap = statistics.median(r["capture_classify"] for r in rs) * 1000
        bulk = statistics.median(r["bulk_classify"] for r in rs)
        print(f"| {name} | {read:.3f} ({first['bytes'] / read / 1e9:.2f}), {cpu:.3f} | {cap:.1f} | {bulk:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
