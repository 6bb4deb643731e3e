"""Hostile inputs, whole commands: seconds and peak RSS of ``ringfence`` against two named alternatives.

Each case builds one hostile file from issue 11 in a temporary directory and runs the real CLI in a
child process (figures from ``wait4``). Alternatives, in the same run: ``cat FILE`` (the cost of the
bytes themselves) and the *floor* — the same verb on a small valid input (interpreter start-up and
imports, which dominate small hostile files). Medians of ``--repeats``.

    python benchmarks/bench_hostile.py --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "samples"
RINGFENCE = [str(Path(sys.executable).parent / "ringfence")]


def _zeek_header() -> bytes:
    text = (SHARED / "zeek" / "brimdata_zed_conn.log").read_bytes()
    return b"".join(ln + b"\n" for ln in text.split(b"\n") if ln.startswith(b"#"))


def _empty_lines(d: Path) -> tuple[Path, list[str]]:
    f = d / "empty.log"
    f.write_bytes(_zeek_header() + b"\n" * (50 << 20))
    return f, ["flows", str(f), "--format", "jsonl"]


def _zero_line(d: Path) -> tuple[Path, list[str]]:
    f = d / "zeros.log"
    f.write_bytes(_zeek_header())
    with f.open("r+b") as fh:
        fh.truncate(f.stat().st_size + (1 << 30))
    return f, ["flows", str(f), "--format", "jsonl"]


def _json_flood(d: Path) -> tuple[Path, list[str]]:
    good = json.dumps({"ts": 1.5e9, "uid": "C1", "id.orig_h": "10.0.0.1", "id.orig_p": 1, "id.resp_h": "10.0.0.2",
                       "id.resp_p": 80, "proto": "tcp"}).encode()
    f = d / "flood.json"
    f.write_bytes(good + b"\n" + b'{"id.orig_h": 1}\n' * ((10 << 20) // 17))
    return f, ["flows", str(f), "--format", "jsonl"]


def _alias_bomb(d: Path) -> tuple[Path, list[str]]:
    lines = ["l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]" for i in range(1, 10)]
    f = d / "bomb.yaml"
    f.write_text("\n".join(lines) + "\n")
    return f, ["policy", "check", str(f)]


def _templates(d: Path) -> tuple[Path, list[str]]:
    f = d / "many.ipfix"
    tpl = struct.pack(">HH", 0, 2) + struct.pack(">HHHH", 8, 4, 12, 4)
    with f.open("wb") as fh:
        for domain in range(15):
            for k in range(0, 4000, 100):
                body = b"".join(struct.pack(">H", 256 + i) + tpl[2:] for i in range(k, k + 100))
                sets = struct.pack(">HH", 2, 4 + len(body)) + body
                fh.write(struct.pack(">HHIII", 10, 16 + len(sets), 1_700_000_000, 0, domain) + sets)
    return f, ["flows", str(f), "--format", "jsonl"]


def _evidence(d: Path) -> tuple[Path, list[str]]:
    store = d / "ev"
    env = dict(os.environ, RINGFENCE_EVIDENCE_KEY=str(d / "key"))
    code = ("from ringfence.evidence import EvidenceStore\n"
            f"s = EvidenceStore.open({str(store)!r})\n"
            "s.append_many([__import__('ringfence.evidence.store', fromlist=['NewRecord']).NewRecord("
            "'note', 'bench', f'n{i}', {'i': i}) for i in range(219)])\n")
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
    log = store / "evidence.jsonl"
    with log.open("r+b") as fh:
        fh.truncate(log.stat().st_size + (1500 << 20))
    os.environ["RINGFENCE_EVIDENCE_KEY"] = str(d / "key")
    return log, ["evidence", "verify", "--store", str(store)]


def _floor_flows(d: Path) -> list[str]:
    return ["flows", str(SHARED / "zeek" / "brimdata_zed_conn.log"), "--format", "jsonl"]


def _floor_policy(d: Path) -> list[str]:
    return ["policy", "check", str(ROOT / "examples" / "lab-policy.yaml")]


def _floor_evidence(d: Path) -> list[str]:
    store = d / "small"
    code = (
        "from ringfence.evidence import EvidenceStore\n"
        f"EvidenceStore.open({str(store)!r}).append('note', 'b', 's')\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env=dict(os.environ))
    return ["evidence", "verify", "--store", str(store)]


FLOORS: dict[str, Callable[[Path], list[str]]] = {
    "flows": _floor_flows,
    "policy": _floor_policy,
    "evidence": _floor_evidence,
}

CASES: dict[str, Callable[[Path], tuple[Path, list[str]]]] = {
    "zeek: header + 50 MB of empty lines": _empty_lines,
    "zeek: one 1 GB line of zero bytes": _zero_line,
    "zeek JSON: 10 MB of wrong-typed lines": _json_flood,
    "policy: billion-laughs alias bomb": _alias_bomb,
    "ipfix: 60,000 templates": _templates,
    "evidence verify: +1.5 GB appended": _evidence,
}


def _measure(cmd: list[str]) -> tuple[float, float, int]:
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=dict(os.environ))
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    assert proc.stderr is not None
    proc.stderr.close()
    return elapsed, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)


def main() -> int:
    """Run every case and print a Markdown table."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    print("| input | ringfence s (median) | peak RSS MB | exit | `cat` s | floor s (same verb, small valid input) |"
          " ringfence − floor |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="rf-bench-hostile-") as tmp:
        for label, build in CASES.items():
            d = Path(tmp) / str(abs(hash(label)))
            d.mkdir()
            path, argv = build(d)
            ours = [_measure([*RINGFENCE, *argv]) for _ in range(args.repeats)]
            cat = [_measure(["cat", str(path)]) for _ in range(args.repeats)]
            floor_argv = FLOORS[argv[0]](d)
            floor = [_measure([*RINGFENCE, *floor_argv]) for _ in range(args.repeats)]
            t = statistics.median(o[0] for o in ours)
            c = statistics.median(o[0] for o in cat)
            f = statistics.median(o[0] for o in floor)
            rss = max(o[1] for o in ours)
            print(f"| {label} | {t:.2f} | {rss:.0f} | {ours[0][2]} | {c:.2f} | {f:.2f} | {t - f:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
