"""Key-hygiene patterns over a capture's RDMA facts (ReDMArk, USENIX Security 2021, Table 1 and section 4).

Everything here works on the per-connection and per-key rows the reader gathered (a handful per host), never on
packets. Which host a value belongs to follows the protocol: a RETH's rkey and a BTH's destination QP name
memory and a queue pair of the packet's *receiver*; a request's PSN is chosen by its *sender*.

The bounds are chosen so that keys, QPNs and PSNs drawn from a CSPRNG essentially never trip them (the tests draw
1,000 random connections and expect no finding), while every published driver pattern does:

- V1: the rkeys of one host in the order they first appear: the estimate is the smaller of the most common
  step's min-entropy (only where a step repeats), log2 of the spread of the steps, and 8 + log2 of the spread of
  the steps of the key without its low byte (rxe's LFSR byte on a +0x100 counter). At most RKEY_BITS bits with at
  least three keys is a finding. Random 32-bit keys give about 31.
- V2: one rkey of one host used by two connections on memory that does not overlap.
- V3: distinct keys' regions of one host less than ADJACENT_BYTES apart for at least half of the neighbours.
- V4: a host's QPNs (QP0, QP1 and the multicast QP excluded) less than QPN_STRIDE apart for at least half of the
  neighbours, with two or more QPNs.
- V6: a first request PSN shared by three or more connections, or by all of them when there are two or more.
- V8: at least half of a pair's sampled payload heads below the plaintext entropy bound.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any, Final

from ringfence.observe.schema import RdmaFacts
from ringfence.rdma.interface import REMEDIATION, VULN_NAMES, RdmaFinding, Vuln

#: At most this many bits of estimated rkey min-entropy is a finding (a 32-bit key has 32).
RKEY_BITS: Final = 16.0
#: Fewest distinct rkeys per host whose sequence is judged.
MIN_KEYS: Final = 3
#: Regions whose base addresses are this close are adjacent.
ADJACENT_BYTES: Final = 1 << 20
#: QPNs this close are a sequence.
QPN_STRIDE: Final = 64
_SPECIAL_QPS: Final = frozenset({0, 1, 0xFFFFFF})
_UD: Final = 3  # the UD transport (opcode >> 5): datagrams, no connection PSN
_EXAMPLES: Final = 6


def _finding(vuln: Vuln, src: Iterable[str], dst: str, pattern: str, source: str, examples: Iterable[str] = (),
             bits: float | None = None) -> RdmaFinding:  # fmt: skip
    return RdmaFinding(
        id=vuln,
        name=VULN_NAMES[vuln],
        src=", ".join(sorted(set(src))),
        dst=dst,
        pattern=pattern,
        min_entropy_bits=None if bits is None else round(bits, 2),
        examples=tuple(examples)[:_EXAMPLES],
        source=source,
        remediation=REMEDIATION[vuln],
    )


def _signed(x: int) -> int:
    """A 32-bit step as a signed number (a key that wrapped, or rxe's LFSR byte, steps back a little)."""
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x >= 1 << 31 else x


def rkey_entropy(keys: list[int]) -> tuple[float, str]:
    """(estimated min-entropy in bits, the pattern in words) of a host's rkeys in the order they appeared."""
    steps = [_signed(b - a) for a, b in zip(keys, keys[1:], strict=False)]
    high = [_signed((b >> 8) - (a >> 8)) for a, b in zip(keys, keys[1:], strict=False)]
    common, count = Counter(steps).most_common(1)[0]
    estimates = [math.log2(max(steps) - min(steps) + 1), 8 + math.log2(max(high) - min(high) + 1)]
    if count > 1:
        estimates.append(-math.log2(count / len(steps)))
    bits = min(estimates)
    if count == len(steps):
        words = f"every step is {common:+#x}"
    elif count > 1:
        words = (f"the step {common:+#x} in {count} of {len(steps)} steps, steps from {min(steps):+#x} "
                 f"to {max(steps):+#x}")
    elif max(high) - min(high) < 16:
        words = f"the key without its low byte steps by {min(high):+d}…{max(high):+d}; the low byte alone varies"
    else:
        words = f"steps from {min(steps):+#x} to {max(steps):+#x}"
    return bits, words


def _rows(table: Any) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = table.to_pylist()
    return rows


def _v1_v2_v3(facts: RdmaFacts, source: str) -> list[RdmaFinding]:
    out: list[RdmaFinding] = []
    by_host: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in sorted(_rows(facts.keys), key=lambda r: r["first_packet"]):
        by_host[row["dst"]].append(row)
    for host, rows in by_host.items():
        peers = [r["src"] for r in rows]
        order: dict[int, dict[str, Any]] = {}
        for r in rows:
            order.setdefault(r["rkey"], r)
        keys = list(order)
        if len(keys) >= MIN_KEYS:
            bits, words = rkey_entropy(keys)
            if bits <= RKEY_BITS:
                out.append(_finding(Vuln.V1, peers, host, f"{len(keys)} rkeys: {words}; estimated min-entropy "
                                    f"{bits:.1f} bits (at most {RKEY_BITS:.0f} is predictable)", source,
                                    (f"{k:#010x}" for k in keys), bits))  # fmt: skip
        out.extend(_reuse(host, rows, source))
        regions = sorted((r["va_min"], r["va_end"], k) for k, r in order.items())
        if len(regions) >= 2:
            gaps = [b[0] - a[0] for a, b in zip(regions, regions[1:], strict=False)]
            near = sum(1 for g in gaps if g <= ADJACENT_BYTES)
            if 2 * near >= len(gaps):
                out.append(_finding(Vuln.V3, peers, host, f"{near} of {len(gaps)} neighbouring memory regions start "
                                    f"within {ADJACENT_BYTES >> 10} KiB of each other", source,
                                    (f"{k:#010x}@{lo:#x}" for lo, _, k in regions)))  # fmt: skip
    return out


def _reuse(host: str, rows: list[dict[str, Any]], source: str) -> list[RdmaFinding]:
    """V2: one rkey on two connections whose accessed memory does not overlap."""
    out: list[RdmaFinding] = []
    by_key: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_key[r["rkey"]].append(r)
    for key, uses in by_key.items():
        apart = [(a, b) for i, a in enumerate(uses) for b in uses[i + 1 :]
                 if a["va_end"] <= b["va_min"] or b["va_end"] <= a["va_min"]]  # fmt: skip
        if apart:
            a, b = apart[0]
            out.append(_finding(Vuln.V2, [u["src"] for u in uses], host,
                                f"rkey {key:#010x} opens disjoint memory to {len(uses)} connections "
                                f"({a['va_min']:#x}… and {b['va_min']:#x}…)", source,
                                (f"QP {u['dest_qp']:#x} from {u['src']}" for u in uses)))  # fmt: skip
    return out


def _v4(facts: RdmaFacts, source: str) -> list[RdmaFinding]:
    out: list[RdmaFinding] = []
    qps: dict[str, dict[int, str]] = defaultdict(dict)
    for r in _rows(facts.conns):
        if r["dest_qp"] not in _SPECIAL_QPS:
            qps[r["dst"]].setdefault(r["dest_qp"], r["src"])
    for host, seen in qps.items():
        numbers = sorted(seen)
        if len(numbers) < 2:
            continue
        gaps = [b - a for a, b in zip(numbers, numbers[1:], strict=False)]
        near = sum(1 for g in gaps if g <= QPN_STRIDE)
        if 2 * near >= len(gaps):
            out.append(_finding(Vuln.V4, seen.values(), host, f"{len(numbers)} QPNs, {near} of {len(gaps)} "
                                f"neighbours at most {QPN_STRIDE} apart (largest step {max(gaps)})", source,
                                (f"{q:#08x}" for q in numbers)))  # fmt: skip
    return out


def _v6(facts: RdmaFacts, source: str) -> list[RdmaFinding]:
    conns = [r for r in _rows(facts.conns) if r["first_psn"] is not None and r["dest_qp"] not in _SPECIAL_QPS
             and r["first_opcode"] >> 5 != _UD]  # fmt: skip
    counts = Counter(r["first_psn"] for r in conns)
    out: list[RdmaFinding] = []
    for psn, n in counts.items():
        if n >= 3 or (n >= 2 and n == len(conns)):
            same = [r for r in conns if r["first_psn"] == psn]
            dsts = sorted({r["dst"] for r in same})
            out.append(_finding(Vuln.V6, (r["src"] for r in same), ", ".join(dsts),
                                f"{n} of {len(conns)} connections start at PSN {psn:#x}", source,
                                (f"{r['src']} → {r['dst']} QP {r['dest_qp']:#x}" for r in same)))  # fmt: skip
    return out


def _v8(facts: RdmaFacts, source: str) -> list[RdmaFinding]:
    return [
        _finding(Vuln.V8, [r["src"]], r["dst"],
                 f"{r['low_entropy']} of {r['samples']} sampled payload heads read as plaintext "
                 f"(mean {r['mean_entropy']:.2f} bits/byte); the RDMA headers and keys cross the "
                 "wire in the clear and the ICRC is a keyless checksum", source)
        for r in _rows(facts.payload)
        if r["samples"] and 2 * r["low_entropy"] >= r["samples"]
    ]  # fmt: skip


def analyse(facts: RdmaFacts, source: str) -> list[RdmaFinding]:
    """Every key-hygiene finding the facts of one capture show (empty when they show none)."""
    return [*_v1_v2_v3(facts, source), *_v4(facts, source), *_v6(facts, source), *_v8(facts, source)]


__all__ = ["ADJACENT_BYTES", "MIN_KEYS", "QPN_STRIDE", "RKEY_BITS", "analyse", "rkey_entropy"]
