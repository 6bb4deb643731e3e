"""Generate a synthetic training-cluster capture (classic pcap, Ethernet) of a given size, vectorised.

``mixed``: what a capture on an AI training fabric looks like by bytes — collective traffic (TCP jumbo
frames of bf16-looking tensors between ranks, and RoCEv2 UDP 4791 with a BTH), storage reads and checkpoint
writes (TCP to 2049 and TLS to 443 in 16 KiB TLS records), their ACKs, and small management packets (DNS,
HTTP on 8080, SSH). ``small``: only 64–128-byte packets, to measure packets per second.

Usage: ``python benchmarks/gen_capture.py OUT.pcap --size 1G [--kind mixed|small] [--seed 1]``. ``OUT`` may
be a FIFO (the reader can then consume captures larger than the disk).
"""

from __future__ import annotations

import argparse
import struct
import sys
from pathlib import Path
from typing import BinaryIO

import numpy as np
import numpy.typing as npt

# Packet classes: (name, proto, dport, frame bytes (min, max), weight by packet count in "mixed").
_CLASSES = [
    ("collective", 6, 29500, (9014, 9014), 26.0),
    ("roce", 17, 4791, (4158, 4158), 20.0),
    ("storage", 6, 2049, (9014, 9014), 10.0),
    ("tls", 6, 443, (1514, 9014), 8.0),
    ("ack", 6, 0, (66, 66), 30.0),  # ACKs of the TCP classes, reverse direction
    ("mgmt", 17, 53, (70, 300), 3.0),
    ("http", 6, 8080, (120, 900), 2.0),
    ("ssh", 6, 22, (90, 200), 1.0),
]
_SMALL = [("ack", 6, 0, (64, 64), 60.0), ("mgmt", 17, 53, (70, 128), 20.0), ("http", 6, 8080, (80, 128), 20.0)]
_FLOWS_PER_CLASS = 64


def parse_size(text: str) -> int:
    """``1G``, ``512M``, ``10k`` or plain bytes."""
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    t = text.strip().lower().rstrip("b")
    if t and t[-1] in units:
        return int(float(t[:-1]) * units[t[-1]])
    return int(t)


def _put16(out: npt.NDArray[np.uint8], pos: npt.NDArray[np.int64], v: npt.NDArray[np.int64]) -> None:
    out[pos] = (v >> 8) & 0xFF
    out[pos + 1] = v & 0xFF


def _put32(out: npt.NDArray[np.uint8], pos: npt.NDArray[np.int64], v: npt.NDArray[np.int64], little: bool) -> None:
    for k in range(4):
        shift = 8 * k if little else 8 * (3 - k)
        out[pos + k] = (v >> shift) & 0xFF


def _batch(rng: np.random.Generator, classes: list[tuple[str, int, int, tuple[int, int], float]], n: int,
           ts0: int, seq0: int) -> tuple[npt.NDArray[np.uint8], int]:  # fmt: skip
    """``n`` records as one byte array; returns it and the last timestamp (µs)."""
    weights = np.array([c[4] for c in classes])
    cls = rng.choice(len(classes), size=n, p=weights / weights.sum())
    lo = np.array([c[3][0] for c in classes])[cls]
    hi = np.array([c[3][1] for c in classes])[cls]
    frame = rng.integers(lo, hi + 1)
    flow = rng.integers(0, _FLOWS_PER_CLASS, n)
    proto = np.array([c[1] for c in classes])[cls]
    dport = np.array([c[2] for c in classes])[cls].astype(np.int64)
    is_ack = np.array([c[0] == "ack" for c in classes])[cls]
    # ACKs answer the TCP data classes: reuse their flows, reversed (responder → initiator).
    acked = np.array([i for i, c in enumerate(classes) if c[1] == 6 and c[0] != "ack"] or [0])
    ack_of = acked[rng.integers(0, acked.shape[0], n)]
    dport = np.where(is_ack, np.array([c[2] for c in classes])[ack_of], dport)
    cls_key = np.where(is_ack, ack_of, cls)
    client = (10 << 24) | (77 << 16) | (cls_key << 8) | (flow + 1)
    server = (10 << 24) | (78 << 16) | (cls_key << 8) | (flow % 8 + 1)
    sport = 40000 + cls_key * 100 + flow
    src = np.where(is_ack, server, client)
    dst = np.where(is_ack, client, server)
    sp = np.where(is_ack, dport, sport)
    dp = np.where(is_ack, sport, dport)

    rec = 16 + frame
    offs = np.concatenate(([0], np.cumsum(rec)[:-1])).astype(np.int64)
    total = int(rec.sum())
    out = np.frombuffer(rng.bytes(total), np.uint8).copy()  # payload bytes: random, headers overwritten below
    ts = ts0 + np.cumsum(rng.integers(1, 4, n))
    _put32(out, offs, ts // 1_000_000, True)
    _put32(out, offs + 4, ts % 1_000_000, True)
    _put32(out, offs + 8, frame, True)
    _put32(out, offs + 12, frame, True)
    eth = offs + 16
    for k, byte in enumerate(bytes.fromhex("02000000000202000000000108004500")):
        out[eth + k] = byte
    ip = eth + 14
    _put16(out, ip + 2, frame - 14)
    _put16(out, ip + 4, (seq0 + np.arange(n)) & 0xFFFF)
    _put16(out, ip + 6, np.full(n, 0x4000))
    out[ip + 8] = 64
    out[ip + 9] = proto
    _put16(out, ip + 10, np.zeros(n, np.int64))
    _put32(out, ip + 12, src, False)
    _put32(out, ip + 16, dst, False)
    l4 = ip + 20
    _put16(out, l4, sp)
    _put16(out, l4 + 2, dp)
    tcp = proto == 6
    t = l4[tcp]
    _put32(out, t + 4, rng.integers(0, 1 << 32, int(tcp.sum())), False)
    _put32(out, t + 8, rng.integers(0, 1 << 32, int(tcp.sum())), False)
    out[t + 12] = 0x50
    out[t + 13] = np.where(is_ack[tcp], 0x10, 0x18)
    _put16(out, t + 14, np.full(int(tcp.sum()), 512))
    _put16(out, t + 16, np.zeros(int(tcp.sum()), np.int64))
    _put16(out, t + 18, np.zeros(int(tcp.sum()), np.int64))
    udp = ~tcp
    u = l4[udp]
    _put16(out, u + 4, frame[udp] - 34)
    _put16(out, u + 6, np.zeros(int(udp.sum()), np.int64))
    names = np.array([c[0] for c in classes])[cls]
    roce = np.flatnonzero(names == "roce")
    if roce.shape[0]:  # InfiniBand BTH: RDMA WRITE middle, P_Key ffff, dest QP, PSN
        b = l4[roce] + 8
        out[b] = 0x07
        out[b + 1] = 0x40
        _put16(out, b + 2, np.full(roce.shape[0], 0xFFFF))
        _put32(out, b + 4, 0x000100 + flow[roce], False)
        _put32(out, b + 8, (seq0 + roce) & 0xFFFFFF, False)
    tls = np.flatnonzero(names == "tls")
    if tls.shape[0]:  # a TLS 1.2/1.3 application-data record header at the start of the segment
        b = l4[tls] + 20
        out[b] = 0x17
        out[b + 1] = 0x03
        out[b + 2] = 0x03
        _put16(out, b + 3, frame[tls] - 54 - 5)
    coll = np.flatnonzero(names == "collective")
    if coll.shape[0]:  # bf16 gradients: high bytes of small magnitudes (exponent near 0x3c)
        b = l4[coll] + 20
        for k in range(1, 64, 2):
            out[b + k] = 0x3C + (out[b + k] & 0x03)
    return out, int(ts[-1])


def generate(dest: BinaryIO, size: int, kind: str = "mixed", seed: int = 1) -> int:
    """Write a capture of about ``size`` bytes to ``dest``; returns the number of packets."""
    rng = np.random.default_rng(seed)
    classes = _CLASSES if kind == "mixed" else _SMALL
    dest.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1))
    written = 24
    ts = 1_760_000_000 * 1_000_000
    packets = 0
    mean = sum(c[4] * (c[3][0] + c[3][1]) / 2 for c in classes) / sum(c[4] for c in classes) + 16
    while written < size:
        n = max(1, min(int((size - written) / mean) + 1, int((32 << 20) / mean)))
        data, ts = _batch(rng, classes, n, ts, packets)
        dest.write(data.tobytes())
        written += data.shape[0]
        packets += n
    return packets


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("out", type=Path)
    ap.add_argument("--size", default="1G")
    ap.add_argument("--kind", choices=("mixed", "small"), default="mixed")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    with open(args.out, "wb") as f:
        packets = generate(f, parse_size(args.size), args.kind, args.seed)
    print(f"{args.out}: {packets} packets", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
