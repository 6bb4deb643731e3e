"""Builders of RDMA captures for the reader and key-hygiene tests: RoCEv2 over Ethernet, native InfiniBand, ERF.

Imported as a top-level module (``from rdma_kit import ...``), like ``flow_kit``. Headers follow the IBTA layout
(BTH 12 bytes, RETH 16, LRH 8, GRH 40); every packet ends with a 4-byte ICRC (zeros here: nothing checks it).
"""

from __future__ import annotations

import ipaddress
import os
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

ROCE_PORT = 4791
WRITE_ONLY = 0x0A
WRITE_FIRST = 0x06
READ_REQUEST = 0x0C
SEND_ONLY = 0x04
ACK = 0x11
TS0 = 1_700_000_000


def bth(opcode: int, pkey: int, qp: int, psn: int, pad: int = 0) -> bytes:
    """Base Transport Header: opcode, SE/M/PadCnt/TVer, P_Key, reserved + DestQP, AckReq/reserved + PSN."""
    return struct.pack(">BBHII", opcode, (pad & 3) << 4, pkey, qp & 0xFFFFFF, psn & 0xFFFFFF)


def reth(va: int, rkey: int, length: int) -> bytes:
    """RDMA Extended Transport Header: virtual address, R_Key, DMA length."""
    return struct.pack(">QII", va, rkey, length)


def roce_frame(src: str, dst: str, sport: int, transport: bytes, *, vlan: int | None = None) -> bytes:
    """Ethernet / IPv4 / UDP to 4791 carrying ``transport`` (BTH onwards) and an ICRC."""
    body = transport + bytes(4)
    udp = struct.pack(">HHHH", sport, ROCE_PORT, 8 + len(body), 0) + body
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 1, 0x4000, 64, 17, 0,
                     ipaddress.IPv4Address(src).packed, ipaddress.IPv4Address(dst).packed) + udp  # fmt: skip
    tag = struct.pack(">HH", 0x8100, vlan) if vlan is not None else b""
    return bytes.fromhex("020000000002" "020000000001") + tag + b"\x08\x00" + ip


def ib_frame(slid: int, dlid: int, transport: bytes, *, gids: tuple[str, str] | None = None) -> bytes:
    """Native InfiniBand: LRH (and a GRH when ``gids``), ``transport`` (BTH onwards), ICRC, VCRC."""
    grh = b""
    if gids is not None:
        grh = struct.pack(">IHBB16s16s", 6 << 28, len(transport) + 4, 0x1B, 1,
                          ipaddress.IPv6Address(gids[0]).packed, ipaddress.IPv6Address(gids[1]).packed)  # fmt: skip
    words = (8 + len(grh) + len(transport) + 4) // 4
    lrh = struct.pack(">BBHHH", 0x00, 3 if gids else 2, dlid, words & 0x7FF, slid)
    return lrh + grh + transport + bytes(4) + bytes(2)


def erf_record(frame: bytes, ts: int = 0) -> bytes:
    """An ERF type 21 (InfiniBand) record around ``frame``."""
    return struct.pack("<Q", ts << 32) + struct.pack(">BBHHH", 21, 0x04, 16 + len(frame), 0, len(frame)) + frame


def pcap(frames: Sequence[bytes], linktype: int = 1) -> bytes:
    """A classic little-endian microsecond pcap of ``frames``, one a millisecond."""
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, linktype)]
    for i, f in enumerate(frames):
        out.append(struct.pack("<IIII", TS0 + i // 1000, (i % 1000) * 1000, len(f), len(f)) + f)
    return b"".join(out)


def write(path: Path, frames: Sequence[bytes], linktype: int = 1) -> Path:
    """Write ``frames`` as a pcap at ``path``."""
    path.write_bytes(pcap(frames, linktype))
    return path


@dataclass(frozen=True)
class Conn:
    """One RDMA WRITE connection: the requester writes into one memory region of the responder."""

    src: str
    dst: str
    qpn: int  # the responder's QP (the BTH destination)
    psn: int  # the requester's starting PSN
    rkey: int
    va: int
    payload: bytes


def random_payload() -> bytes:
    """64 bytes from the CSPRNG: what an encrypted payload looks like."""
    return os.urandom(64)


def writes(conns: Sequence[Conn], *, writes_each: int = 2, pkey: int = 0x8001) -> list[bytes]:
    """RoCEv2 frames: each connection's WRITE Only requests (one MR, advancing VA and PSN), and an ACK for each."""
    frames: list[bytes] = []
    for i, c in enumerate(conns):
        sport = 49152 + (i % 16000)
        back = rand24()  # the requester's own QP, which the ACKs name
        for k in range(writes_each):
            t = bth(WRITE_ONLY, pkey, c.qpn, c.psn + k) + reth(c.va + 64 * k, c.rkey, len(c.payload)) + c.payload
            frames.append(roce_frame(c.src, c.dst, sport, t))
            frames.append(roce_frame(c.dst, c.src, sport, bth(ACK, pkey, back, c.psn + k) + bytes(4)))
    return frames


def rand24() -> int:
    return int.from_bytes(os.urandom(3), "big")


def rand32() -> int:
    return int.from_bytes(os.urandom(4), "big")


def rand_va() -> int:
    """A user-space address from the CSPRNG (47 bits, page aligned)."""
    return (int.from_bytes(os.urandom(6), "big") & ((1 << 47) - 1)) & ~0xFFF


Pattern = Callable[[int], int]


def conns(n: int, *, src: str = "10.1.0.1", dst: str = "10.1.0.2", rkeys: Pattern | None = None,
          qpns: Pattern | None = None, psns: Pattern | None = None, vas: Pattern | None = None,
          payload: Callable[[int], bytes] | None = None) -> list[Conn]:  # fmt: skip
    """``n`` connections from ``src`` to ``dst``; every field is from the CSPRNG unless a pattern is given."""
    return [
        Conn(src=src, dst=dst, qpn=(qpns or (lambda _: rand24()))(i), psn=(psns or (lambda _: rand24()))(i),
             rkey=(rkeys or (lambda _: rand32()))(i), va=(vas or (lambda _: rand_va()))(i),
             payload=(payload or (lambda _: random_payload()))(i))  # fmt: skip
        for i in range(n)
    ]


def lfsr8(seed: int, n: int) -> list[int]:
    """``n`` outputs of an 8-bit Fibonacci LFSR (taps 8, 6, 5, 4), as rxe keys its memory regions."""
    out, state = [], seed & 0xFF or 1
    for _ in range(n):
        bit = ((state >> 7) ^ (state >> 5) ^ (state >> 4) ^ (state >> 3)) & 1
        state = ((state << 1) | bit) & 0xFF
        out.append(state)
    return out


__all__ = [
    "ACK",
    "Conn",
    "READ_REQUEST",
    "SEND_ONLY",
    "WRITE_FIRST",
    "WRITE_ONLY",
    "bth",
    "conns",
    "erf_record",
    "ib_frame",
    "lfsr8",
    "pcap",
    "rand24",
    "rand32",
    "rand_va",
    "random_payload",
    "reth",
    "roce_frame",
    "write",
    "writes",
]
