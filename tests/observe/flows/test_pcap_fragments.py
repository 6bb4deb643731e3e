"""IP fragments (v4 and v6) join their datagram's flow; hostile fragments are reported; memory stays bounded."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from test_pcap_synthetic import TS0, eth, five, ip4, ipv6, pcap, rows, udp, write

from ringfence.observe.flows._pcap_decode import decode
from ringfence.observe.flows._pcap_frags import FragmentJoiner
from ringfence.observe.flows.interface import ReadResult
from ringfence.observe.flows.pcap import PcapReader

A, B = "10.9.0.1", "10.9.0.2"
A6, B6 = "2001:db8::a", "2001:db8::b"


def frag4(src: str, dst: str, proto: int, data: bytes, *, ident: int, off: int, more: bool) -> bytes:
    flags = (off // 8) | (0x2000 if more else 0)
    head = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(data), ident, flags, 64, proto, 0, ip4(src), ip4(dst))
    return head + data


def frag6(src: str, dst: str, nh: int, data: bytes, *, ident: int, off: int, more: bool) -> bytes:
    return ipv6(src, dst, nh, data, [(44, struct.pack(">BHI", 0, off | int(more), ident))])


def split(datagram: bytes, size: int) -> list[tuple[int, bytes, bool]]:
    """(offset, data, more fragments) pieces of ``size`` bytes (a multiple of 8)."""
    return [(o, datagram[o : o + size], o + size < len(datagram)) for o in range(0, len(datagram), size)]


def frames(pkts: list[bytes], ts: list[int] | None = None) -> list[tuple[int, bytes]]:
    stamps = ts or [TS0 + 1000 * i for i in range(len(pkts))]
    return [(t, eth(p, 0x86DD if p[0] >> 4 == 6 else 0x0800)) for t, p in zip(stamps, pkts, strict=True)]


def read(tmp_path: Path, pkts: list[bytes], ts: list[int] | None = None, **kw: int) -> ReadResult:
    return PcapReader(**kw).read(write(tmp_path, pcap(frames(pkts, ts))))


def counts(result: ReadResult) -> dict[tuple[object, ...], tuple[object, object]]:
    return {five(r): (r["packets"], r["bytes"]) for r in rows(result.flows)}


def test_later_fragments_join_the_first_fragments_flow_v4_and_v6(tmp_path: Path) -> None:
    dgram = udp(7000, 9000, b"a" * 3000)
    v4 = [frag4(A, B, 17, d, ident=77, off=o, more=m) for o, d, m in split(dgram, 1480)]
    v6 = [frag6(A6, B6, 17, d, ident=0x80000001, off=o, more=m) for o, d, m in split(dgram, 1448)]
    result = read(tmp_path, v4 + v6)
    assert counts(result) == {
        (A, 7000, B, 9000, 17): (3, 3 * 20 + len(dgram)),
        (A6, 7000, B6, 9000, 17): (3, 3 * 48 + len(dgram)),
    }
    assert [r["payload_bytes"] for r in rows(result.flows)] == [3000, 3000]
    assert not result.warnings


def test_fragments_out_of_order_and_across_batches_still_join(tmp_path: Path) -> None:
    pieces = split(udp(7001, 9001, b"b" * 4000), 1480)
    pkts = [frag4(A, B, 17, d, ident=5, off=o, more=m) for o, d, m in reversed(pieces)]
    # a different datagram (other id) between, whose first fragment never comes
    pkts.insert(1, frag4(A, B, 17, b"z" * 16, ident=6, off=1480, more=False))
    for batch in (65536, 1):
        result = read(tmp_path, pkts, batch_packets=batch)
        assert counts(result) == {(A, 7001, B, 9001, 17): (3, 60 + 4008), (A, None, B, None, 17): (1, 36)}, batch
        (warning,) = result.warnings
        assert "1 later IP fragment(s) whose first fragment was not in the capture" in warning


def test_ike_auth_over_fragmented_nat_t_is_recognised_from_the_first_fragment(tmp_path: Path) -> None:
    body = b"\x5a" * 1900  # an encrypted SK payload
    ike = struct.pack(">8s8sBBBBII", b"\x11" * 8, b"\x22" * 8, 46, 0x20, 35, 0x08, 1, 28 + len(body)) + body
    dgram = udp(4500, 4500, b"\0\0\0\0" + ike)
    pkts = [frag4(A, B, 17, d, ident=2, off=o, more=m) for o, d, m in split(dgram, 1480)]
    (row,) = rows(read(tmp_path, pkts).flows)
    assert (row["sport"], row["dport"], row["packets"]) == (4500, 4500, 2)
    assert (row["protocol"], row["protection"]) == ("ike", "handshake-only"), row


def test_overlapping_and_negative_length_fragments_are_reported(tmp_path: Path) -> None:
    pieces = split(udp(7002, 9002, b"c" * 2000), 1000)
    pkts = [frag4(A, B, 17, d, ident=9, off=o, more=m) for o, d, m in pieces]
    pkts.append(frag4(A, B, 17, b"X" * 64, ident=9, off=504, more=True))  # rewrites bytes already received
    # IPv6 fragment header with a payload length of 0: its data length is negative
    bad6 = bytearray(frag6(A6, B6, 17, b"", ident=3, off=1280, more=False))
    struct.pack_into(">H", bad6, 4, 0)
    result = read(tmp_path, [*pkts, bytes(bad6)])
    assert counts(result)[(A, 7002, B, 9002, 17)][0] == 4
    text = "\n".join(result.warnings)
    assert "1 IP fragment(s) overlap an earlier fragment" in text
    assert "1 IP fragment(s) with a negative length" in text


def test_a_reused_ip_id_long_after_does_not_join_the_old_datagram(tmp_path: Path) -> None:
    first = frag4(A, B, 17, udp(7003, 9003, b"d" * 32)[:24], ident=4, off=0, more=True)
    late = frag4(A, B, 17, b"e" * 16, ident=4, off=24, more=False)
    result = read(tmp_path, [first, late], [TS0, TS0 + 61 * 10**9])
    assert set(counts(result)) == {(A, 7003, B, 9003, 17), (A, None, B, None, 17)}


def _decoded(pkts: list[bytes]) -> tuple[np.ndarray, object, np.ndarray]:
    raw = b"".join(eth(p) for p in pkts)
    buf = np.frombuffer(raw + b"\0" * 512, np.uint8)
    lens = [len(eth(p)) for p in pkts]
    pos = np.cumsum([0, *lens[:-1]]).astype(np.int64)
    end = pos + np.asarray(lens, np.int64)
    return buf, decode(buf, pos, end, end, np.ones(len(pkts), np.int64)), pos


def test_held_fragments_and_remembered_datagrams_are_bounded() -> None:
    joiner = FragmentJoiner(max_datagrams=8, max_held=8)
    later = [frag4(A, B, 17, b"f" * 16, ident=i, off=8, more=False) for i in range(20)]
    _, cols, pos = _decoded(later)
    ts = np.full(20, TS0, np.int64)
    joiner.join(cols, ts, np.arange(20, dtype=np.int64), pos)  # type: ignore[arg-type]
    assert len(joiner._datagrams) <= 8
    released = joiner.finish()
    assert released is not None and released.ts.shape[0] == 20  # none lost: all counted, without ports
    assert any("20 later IP fragment(s)" in w for w in joiner.warnings("x"))


@settings(max_examples=60, deadline=None)
@given(st.permutations(range(5)), st.sampled_from([1, 2, 65536]), st.booleans())
def test_any_order_joins_every_fragment(tmp_path_factory: object, order: list[int], batch: int, v6: bool) -> None:
    dgram = udp(7100, 9100, bytes(range(256)) * 14)
    make = frag6 if v6 else frag4
    src, dst = (A6, B6) if v6 else (A, B)
    pieces = [make(src, dst, 17, d, ident=42, off=o, more=m) for o, d, m in split(dgram, 728)]
    assert len(pieces) == 5
    path = Path(str(tmp_path_factory.mktemp("f"))) / "x.pcap"  # type: ignore[attr-defined]
    path.write_bytes(pcap(frames([pieces[i] for i in order])))
    result = PcapReader(batch_packets=batch).read(path)
    assert {five(r): r["packets"] for r in rows(result.flows)} == {(src, 7100, dst, 9100, 17): 5}


_PIECE = st.tuples(st.integers(0, 3), st.integers(0, 400).map(lambda x: x * 8), st.integers(0, 120),
                   st.booleans(), st.booleans())  # fmt: skip


@settings(max_examples=80, deadline=None)
@given(st.lists(_PIECE, min_size=1, max_size=40), st.sampled_from([1, 3, 65536]))
def test_hostile_fragment_mixes_count_every_packet_exactly_once(
    tmp_path_factory: object, pieces: list[tuple[int, int, int, bool, bool]], batch: int
) -> None:
    pkts = []
    for ident, off, size, more, v6 in pieces:
        data = udp(7200, 9200, b"h" * size) if off == 0 else b"h" * size
        make = frag6 if v6 else frag4
        pkts.append(make(A6 if v6 else A, B6 if v6 else B, 17, data, ident=ident, off=off, more=more))
    path = Path(str(tmp_path_factory.mktemp("h"))) / "x.pcap"  # type: ignore[attr-defined]
    path.write_bytes(pcap(frames(pkts)))
    result = PcapReader(batch_packets=batch).read(path)
    assert sum(result.flows.column("packets").to_pylist()) == len(pkts)  # none lost, none counted twice
    ported = {(r["src"], r["sport"]) for r in rows(result.flows) if r["sport"] is not None}
    assert ported <= {(A, 7200), (A6, 7200)}
