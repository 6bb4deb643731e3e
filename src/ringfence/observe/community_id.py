"""Community ID v1 flow hashes (corelight/community-id-spec), so flows from different sources join on one key.

Zeek, Suricata, Wireshark, Elastic and Arkime all emit the same identifier for the same conversation:
``"1:" + base64(sha1(seed · lower address · upper address · proto · 0 · lower port · upper port))``, with the
endpoints ordered so the numerically smaller (address, port) comes first, every field in network byte order. A
capture, a NetFlow export and a firewall log of one connection therefore agree on its id, which is what a trace
joins on (together with time, since ids repeat when ports are reused).

ICMP and ICMPv6 use the message type and a "counter-type" (or the code, for one-way messages) as ports, as Zeek
does. Where a record cannot give the spec's inputs — an ICMP flow whose type was not kept, a TCP/UDP/SCTP flow
whose ports were not readable, a link-layer flow between MAC addresses — the id is null rather than a value
that would collide with, or fail to match, what other monitors compute (the spec allows an empty id).
"""

from __future__ import annotations

import base64
import hashlib
import socket
from typing import Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from ringfence.errors import InputError

VERSION: Final = 1
ICMP: Final = 1
ICMPV6: Final = 58
#: Protocols whose ports are part of the hash (tcp, udp, sctp).
PORTED: Final = frozenset({6, 17, 132})

# Request ↔ reply pairs (Zeek's ICMP analyzer; pycommunityid's icmp.py / icmp6.py).
_ICMP_PAIRS: Final = {8: 0, 0: 8, 13: 14, 14: 13, 15: 16, 16: 15, 10: 9, 9: 10, 17: 18, 18: 17}
_ICMPV6_PAIRS: Final = {128: 129, 129: 128, 133: 134, 134: 133, 135: 136, 136: 135, 130: 131, 131: 130,
                        139: 140, 140: 139, 144: 145, 145: 144}  # fmt: skip


class CommunityIdError(InputError):
    """The inputs cannot be hashed: an unparsable address, a seed or port out of range (``where`` is
    ``community id``)."""


def icmp_ports(proto: int, icmp_type: int, icmp_code: int) -> tuple[int, int, bool]:
    """ICMP/ICMPv6 (type, code) → (source "port", destination "port", one-way?), as Zeek maps them."""
    pairs = _ICMP_PAIRS if proto == ICMP else _ICMPV6_PAIRS
    if icmp_type in pairs:
        return icmp_type, pairs[icmp_type], False
    return icmp_type, icmp_code, True


def _packed(address: str) -> bytes:
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            return socket.inet_pton(family, address)
        except OSError:
            continue
    raise CommunityIdError("community id", f"{address!r} is not an IP address")


def community_id(saddr: str, daddr: str, proto: int, sport: int | None = None, dport: int | None = None, *,
                 seed: int = 0, one_way: bool = False) -> str:  # fmt: skip
    """The v1 Community ID of one flow. ``sport``/``dport`` are ports (or ICMP port equivalents, see
    :func:`icmp_ports`); they are hashed only for TCP, UDP, SCTP, ICMP and ICMPv6, as the spec says."""
    if not 0 <= seed <= 0xFFFF:
        raise CommunityIdError("community id", f"seed {seed} is outside 0–65535")
    if not 0 <= proto <= 0xFF:
        raise CommunityIdError("community id", f"protocol {proto} is outside 0–255")
    src, dst = _packed(saddr), _packed(daddr)
    if len(src) != len(dst):
        raise CommunityIdError("community id", f"{saddr} and {daddr} are of different address families")
    with_ports = proto in PORTED or proto in (ICMP, ICMPV6)
    if with_ports:
        if sport is None or dport is None:
            raise CommunityIdError("community id", f"protocol {proto} needs both ports")
        if not (0 <= sport <= 0xFFFF and 0 <= dport <= 0xFFFF):
            raise CommunityIdError("community id", f"port {sport} or {dport} is outside 0–65535")
        if not one_way and (src, sport) > (dst, dport):
            src, dst, sport, dport = dst, src, dport, sport
    elif src > dst:
        src, dst = dst, src
    data = seed.to_bytes(2, "big") + src + dst + bytes((proto, 0))
    if with_ports:
        assert sport is not None and dport is not None
        data += sport.to_bytes(2, "big") + dport.to_bytes(2, "big")
    return f"{VERSION}:" + base64.b64encode(hashlib.sha1(data, usedforsecurity=False).digest()).decode("ascii")


def _v4_words(col: pa.ChunkedArray | pa.Array, rows: npt.NDArray[np.int64]) -> npt.NDArray[np.uint32]:
    """Dotted-quad strings of ``rows`` → 32-bit addresses, parsed in bulk (Arrow kernels, no per-row Python)."""
    octets = pc.list_flatten(pc.split_pattern(pc.take(col, pa.array(rows)), "."))
    values: npt.NDArray[np.uint32] = np.asarray(pc.cast(octets, pa.uint8()).to_numpy(zero_copy_only=False),
                                                np.uint32).reshape(-1, 4)
    words = (values[:, 0] << 24) | (values[:, 1] << 16) | (values[:, 2] << 8) | values[:, 3]
    return np.asarray(words, np.uint32)


def _hash_rows(records: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint8]:
    """SHA-1 of each row, as (n, 20) bytes. One C call per flow; no per-packet work exists here."""
    out = bytearray(records.shape[0] * 20)
    view = memoryview(out)
    raw = records.tobytes()
    width = records.shape[1]
    sha1 = hashlib.sha1
    for i in range(records.shape[0]):
        view[i * 20 : i * 20 + 20] = sha1(raw[i * width : (i + 1) * width], usedforsecurity=False).digest()
    return np.frombuffer(bytes(out), np.uint8).reshape(-1, 20)


def _render(digests: npt.NDArray[np.uint8]) -> npt.NDArray[np.str_]:
    """``"1:" + base64(digest)`` for every row, in one base64 call: each 20-byte digest padded to 21 bytes
    encodes to 28 characters whose last (from the zero pad) becomes base64's ``=``."""
    padded = np.zeros((digests.shape[0], 21), np.uint8)
    padded[:, :20] = digests
    text = np.frombuffer(base64.b64encode(padded.tobytes()), np.uint8).reshape(-1, 28).copy()
    text[:, 27] = ord("=")
    full = np.empty((digests.shape[0], 30), np.uint8)
    full[:, 0], full[:, 1], full[:, 2:] = ord("1"), ord(":"), text
    return full.view("S30").ravel().astype(np.str_)


def community_ids(flows: pa.Table, *, seed: int = 0) -> pa.Array:
    """One Community ID per row of a flow table (the one flow schema), null where the row cannot give the
    spec's inputs: ICMP flows (the table keeps no message type), ported protocols without both ports, and
    non-IP (MAC-address) flows. IPv4 rows are parsed and ordered in bulk; IPv6 rows address by address."""
    if not 0 <= seed <= 0xFFFF:
        raise CommunityIdError("community id", f"seed {seed} is outside 0–65535")
    n = flows.num_rows
    src, dst = flows.column("src"), flows.column("dst")
    proto = flows.column("proto").to_numpy(zero_copy_only=False).astype(np.int64)
    sport = pc.fill_null(flows.column("sport"), -1).to_numpy(zero_copy_only=False).astype(np.int64)
    dport = pc.fill_null(flows.column("dport"), -1).to_numpy(zero_copy_only=False).astype(np.int64)
    ported = np.isin(proto, list(PORTED))
    usable = ~np.isin(proto, [ICMP, ICMPV6]) & ~(ported & ((sport < 0) | (dport < 0)))
    quad = r"^[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$"
    v4 = usable & _mask(pc.match_substring_regex(src, quad)) & _mask(pc.match_substring_regex(dst, quad))
    out = np.full(n, None, object)
    seed_bytes = np.frombuffer(seed.to_bytes(2, "big"), np.uint8)
    rows4 = np.flatnonzero(v4)
    if rows4.shape[0]:
        a, b = _v4_words(src, rows4).astype(np.uint64), _v4_words(dst, rows4).astype(np.uint64)
        addr_a = np.stack([a >> 24 & 0xFF, a >> 16 & 0xFF, a >> 8 & 0xFF, a & 0xFF], 1).astype(np.uint8)
        addr_b = np.stack([b >> 24 & 0xFF, b >> 16 & 0xFF, b >> 8 & 0xFF, b & 0xFF], 1).astype(np.uint8)
        _emit(out, rows4, addr_a, addr_b, a, b, proto, sport, dport, ported, seed_bytes)
    rows6 = np.flatnonzero(usable & ~v4)
    keep, packed_a, packed_b = [], [], []
    for i, (x, y) in zip(rows6.tolist(), zip(pc.take(src, pa.array(rows6)).to_pylist(),
                                             pc.take(dst, pa.array(rows6)).to_pylist(), strict=True), strict=True):
        try:
            pa_, pb_ = socket.inet_pton(socket.AF_INET6, x), socket.inet_pton(socket.AF_INET6, y)
        except (OSError, TypeError):
            continue  # a link-layer flow between MAC addresses, or mixed families: not in the spec
        keep.append(i)
        packed_a.append(pa_)
        packed_b.append(pb_)
    if keep:
        rows = np.array(keep, np.int64)
        addr_a = np.frombuffer(b"".join(packed_a), np.uint8).reshape(-1, 16)
        addr_b = np.frombuffer(b"".join(packed_b), np.uint8).reshape(-1, 16)
        _emit(out, rows, addr_a, addr_b, None, None, proto, sport, dport, ported, seed_bytes)
    return pa.array(out.tolist(), pa.string())


def _mask(values: pa.ChunkedArray | pa.Array) -> npt.NDArray[np.bool_]:
    return np.asarray(pc.fill_null(values, False).to_numpy(zero_copy_only=False), np.bool_)


def _emit(out: npt.NDArray[np.object_], rows: npt.NDArray[np.int64], addr_a: npt.NDArray[np.uint8],
          addr_b: npt.NDArray[np.uint8], num_a: npt.NDArray[np.uint64] | None, num_b: npt.NDArray[np.uint64] | None,
          proto: npt.NDArray[np.int64], sport: npt.NDArray[np.int64], dport: npt.NDArray[np.int64],
          ported: npt.NDArray[np.bool_], seed: npt.NDArray[np.uint8]) -> None:  # fmt: skip
    """Order each row's endpoints as the spec does, build its hash input and write its id into ``out``."""
    width = addr_a.shape[1]
    if num_a is None or num_b is None:  # IPv6: compare the 16 bytes lexicographically (first differing byte)
        diff = addr_a != addr_b
        first = np.argmax(diff, axis=1)
        at = np.arange(rows.shape[0])
        a_less = diff.any(axis=1) & (addr_a[at, first] < addr_b[at, first])
        same = ~diff.any(axis=1)
    else:
        a_less, same = num_a < num_b, num_a == num_b
    p = ported[rows]
    sp, dp = sport[rows], dport[rows]
    keep = a_less | (same & (~p | (sp <= dp)))  # ported: (address, port) order; others: address order
    lo = np.where(keep[:, None], addr_a, addr_b)
    hi = np.where(keep[:, None], addr_b, addr_a)
    lo_port, hi_port = np.where(keep, sp, dp), np.where(keep, dp, sp)
    for with_ports in (True, False):
        sel = np.flatnonzero(p == with_ports)
        if not sel.shape[0]:
            continue
        cols = [np.broadcast_to(seed, (sel.shape[0], 2)), lo[sel], hi[sel],
                proto[rows][sel].astype(np.uint8)[:, None], np.zeros((sel.shape[0], 1), np.uint8)]  # fmt: skip
        if with_ports:
            ports = np.stack([lo_port[sel] >> 8, lo_port[sel] & 0xFF, hi_port[sel] >> 8, hi_port[sel] & 0xFF], 1)
            cols.append(ports.astype(np.uint8))
        records = np.ascontiguousarray(np.concatenate(cols, axis=1))
        assert records.shape[1] == 2 + 2 * width + 2 + (4 if with_ports else 0)
        out[rows[sel]] = _render(_hash_rows(records))


__all__ = ["CommunityIdError", "community_id", "community_ids", "icmp_ports"]
