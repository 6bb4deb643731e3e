"""Capture a lab's traffic: one inbound-only tcpdump per fabric port, merged by time into one pcap.

Why not capture on the bridges: a bridge device only sees frames that go up to its own stack
(routed or broadcast ones); unicast bridged between two ports of the same zone — worker to worker,
i.e. the whole collective — never passes it. Why not every port in both directions: a routed packet
would be recorded twice, leaving one port and entering another. Inbound on every fabric-side port
records each packet exactly once, where its sender handed it to the fabric.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

from ringfence.lab.status import CaptureResult
from ringfence.lab.topology import LabError

_PCAP_HEADER = 24
_DROPPED = re.compile(rb"(\d+) packets? dropped by kernel")


def count_packets(path: Path) -> int:
    """Records in a classic pcap file (walks the record headers only)."""
    data = path.read_bytes()
    if len(data) < _PCAP_HEADER:
        raise LabError(f"{path}: not a pcap file (too short)")
    magic = data[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        fmt = "<I"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        fmt = ">I"
    else:
        raise LabError(f"{path}: not a classic pcap file (magic {magic.hex()})")
    n, off = 0, _PCAP_HEADER
    while off + 16 <= len(data):
        (caplen,) = struct.unpack_from(fmt, data, off + 8)
        off += 16 + caplen
        n += 1
    return n


def _dropped(log: Path) -> int:
    try:
        return sum(int(m) for m in _DROPPED.findall(log.read_bytes()))
    except OSError:
        return 0


def run_capture(
    ports: Sequence[str],
    seconds: float,
    out: Path,
    *,
    snaplen: int,
    work_dir: Path,
    log_dir: Path,
    spawn: Callable[[str, list[str]], int],
    stop: Callable[[set[int]], None],
) -> CaptureResult:
    """Run the per-port captures for ``seconds`` and merge them into ``out`` (written atomically)."""
    if seconds <= 0:
        raise LabError(f"capture length must be positive, not {seconds}")
    if snaplen < 0:
        raise LabError(f"snaplen must be 0 (whole packets) or positive, not {snaplen}")
    run_dir = work_dir / uuid.uuid4().hex[:8]
    run_dir.mkdir(parents=True, mode=0o700)
    files = {port: run_dir / f"{port}.pcap" for port in ports}
    labels = {port: f"capture-{run_dir.name}-{port}" for port in ports}
    pids: set[int] = set()
    try:
        for port in ports:
            # -Z root: Debian's tcpdump drops to user tcpdump otherwise, leaving its file owned by that user
            argv = ["tcpdump", "-i", port, "-Q", "in", "-n", "-U", "-Z", "root", "-s", str(snaplen),
                    "-w", str(files[port])]
            pids.add(spawn(labels[port], argv))
        _wait_started(files, log_dir, labels, timeout=15.0)
        time.sleep(seconds)
    finally:
        stop(pids)
    dropped = sum(_dropped(log_dir / f"{labels[p]}.log") for p in ports)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
        proc = subprocess.run(["mergecap", "-F", "pcap", "-w", str(tmp), *map(str, files.values())],
                              capture_output=True, text=True, timeout=120, check=False)
        if proc.returncode != 0:
            tmp.unlink(missing_ok=True)
            raise LabError(f"mergecap failed: {proc.stderr.strip()}")
        os.replace(tmp, out)
    except OSError as exc:
        raise LabError(f"cannot write capture {out}: {exc.strerror or exc}") from exc
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    return CaptureResult(out, float(seconds), tuple(ports), count_packets(out), dropped, snaplen)


def _wait_started(files: dict[str, Path], log_dir: Path, labels: dict[str, str], timeout: float) -> None:
    # tcpdump writes the pcap header as soon as the capture is active: that is our "listening" signal
    deadline = time.monotonic() + timeout
    waiting = dict(files)
    while waiting and time.monotonic() < deadline:
        waiting = {p: f for p, f in waiting.items() if not (f.exists() and f.stat().st_size >= _PCAP_HEADER)}
        if waiting:
            time.sleep(0.05)
    if waiting:
        port = next(iter(waiting))
        log = log_dir / f"{labels[port]}.log"
        tail = log.read_text(errors="replace")[-500:] if log.exists() else "(no log)"
        raise LabError(f"tcpdump on {', '.join(waiting)} did not start within {timeout:.0f}s: {tail}")


__all__ = ["count_packets", "run_capture"]
