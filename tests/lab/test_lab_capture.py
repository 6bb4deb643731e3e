"""The as-found capture: one pcap, each packet once, TCP flows of all four classes."""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path

import pytest

from ringfence.lab import Lab
from ringfence.lab.capture import count_packets

pytestmark = [pytest.mark.privileged, pytest.mark.slow]

WORKERS = {"10.77.1.10", "10.77.1.11"}


def _rows(pcap: Path) -> list[list[str]]:
    out = subprocess.run(
        ["tshark", "-n", "-r", str(pcap), "-Y", "tcp", "-T", "fields", "-E", "separator=,",
         "-e", "ip.src", "-e", "ip.dst", "-e", "tcp.srcport", "-e", "tcp.dstport", "-e", "ip.id",
         "-e", "tcp.seq_raw", "-e", "tcp.ack_raw", "-e", "tcp.flags", "-e", "tcp.len"],
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout
    return [line.split(",") for line in out.splitlines() if line]


def _classify(src: str, dst: str, sport: int, dport: int) -> str:
    if src in WORKERS and dst in WORKERS:
        return "collective"
    ports = {sport, dport}
    if 8080 in ports:
        return "storage"
    if ports & {8000, 22}:
        return "management"
    if 9000 in ports:
        return "replication"
    return "unclassified"


def test_capture_holds_all_four_classes_once(lab_capture: Path) -> None:
    rows = _rows(lab_capture)
    assert count_packets(lab_capture) >= len(rows) > 100
    flows: dict[str, set[tuple[str, ...]]] = {}
    for src, dst, sport, dport, *_ in rows:
        key = tuple(sorted([f"{src}:{sport}", f"{dst}:{dport}"]))
        flows.setdefault(_classify(src, dst, int(sport), int(dport)), set()).add(key)
    counts = {cls: len(f) for cls, f in flows.items()}
    assert counts.get("collective", 0) >= 1, counts
    assert counts.get("storage", 0) >= 3, counts
    assert counts.get("management", 0) >= 3, counts
    assert counts.get("replication", 0) >= 1, counts
    assert counts.get("unclassified", 0) == 0, flows.get("unclassified")
    # the admin path and the lateral attempts are in there too
    pairs = {(r[0], r[1], r[3]) for r in rows}
    assert ("10.77.5.10", "10.77.3.10", "22") in pairs
    assert ("10.77.1.50", "10.77.3.10", "22") in pairs
    assert ("10.77.1.50", "10.77.2.10", "8080") in pairs
    assert ("10.77.2.10", "10.77.9.10", "9000") in pairs
    # every packet once: a routed packet captured on two ports would repeat its headers exactly
    dupes = [k for k, n in Counter(tuple(r) for r in rows).items() if n > 1]
    assert not dupes, dupes[:5]


def test_a_new_capture_is_written_atomically_and_counts_its_packets(lab: Lab, tmp_path: Path) -> None:
    out = tmp_path / "short.pcap"
    result = lab.capture(1.0, out, snaplen=96)
    assert result.path == out and result.snaplen == 96 and len(result.interfaces) == 8
    assert result.packets == count_packets(out) > 0
    assert [p.name for p in tmp_path.iterdir()] == ["short.pcap"]
    assert not list((lab.paths.directory / "capture").iterdir())  # per-port files are gone
    assert not [p for p in lab.status().nodes for q in p.processes if q.kind == "capture"]
