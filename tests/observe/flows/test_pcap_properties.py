"""Property tests: a truncated or corrupted capture gives flows, warnings or FlowSourceError — nothing else."""

from __future__ import annotations

import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_pcap_synthetic import (
    TS0,
    conversation,
    epb,
    eth,
    idb,
    ipv4,
    ipv6,
    many_flows,
    pcap,
    shb,
    tcp,
    udp,
)

from ringfence.observe.flows.interface import FlowSourceError
from ringfence.observe.flows.pcap import PcapReader
from ringfence.observe.schema import FLOW_SCHEMA

_MIXED = conversation(3) + [
    (TS0 + 10**6, eth(ipv4("10.0.0.1", "10.0.0.2", 17, udp(5, 4789, struct.pack(">II", 0x08 << 24, 5 << 8)
                                                           + eth(ipv4("1.1.1.1", "2.2.2.2", 6, tcp(1, 2, b"x"))))))),
    (TS0 + 2 * 10**6, eth(ipv6("2001:db8::1", "2001:db8::2", 6, tcp(7, 8, b"y"), [(0, b"\0" * 7)]), 0x86DD)),
    (TS0 + 3 * 10**6, eth(ipv4("10.0.0.3", "10.0.0.4", 6, tcp(9, 10)), vlans=[(0x88A8, 1), (0x8100, 2)])),
    (TS0 + 4 * 10**6, eth(b"\x2c\0\0\0\0\1" + b"z" * 40, 0x88E5)),
]  # fmt: skip
BASES = {
    "pcap": pcap(_MIXED),
    "pcap-be-nano": pcap(_MIXED, little=False, nano=True),
    "pcapng": shb() + idb(1) + idb(101, tsresol=9) + b"".join(epb(0, ts // 1000, f) for ts, f in _MIXED),
    "pcapng-be": shb(">") + idb(1, e=">") + b"".join(epb(0, ts // 1000, f, ">") for ts, f in _MIXED),
}
# Enough small records that the bulk (scanning) walk takes over from the exact loop after its first 1024.
SMALL = pcap(many_flows(1300))


def _read(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "x.pcap"
        path.write_bytes(data)
        try:
            result = PcapReader(chunk_bytes=4096, batch_packets=64).read(path)
        except FlowSourceError as exc:
            assert exc.where.startswith(str(path)) and "@" in exc.where
            return
        assert result.flows.schema == FLOW_SCHEMA
        assert all(w.startswith("x.pcap: ") for w in result.warnings)


@pytest.mark.timeout(120)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    base=st.sampled_from(sorted(BASES)),
    cut=st.floats(0, 1),
    flips=st.lists(st.tuples(st.floats(0, 1), st.integers(0, 255)), max_size=8),
)
def test_truncated_or_corrupted_small_captures(base: str, cut: float, flips: list[tuple[float, int]]) -> None:
    data = bytearray(BASES[base][: int(len(BASES[base]) * cut)])
    for where, value in flips:
        if data:
            data[min(len(data) - 1, int(len(data) * where))] = value
    _read(bytes(data))


@pytest.mark.timeout(120)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cut=st.floats(0.5, 1),
    flips=st.lists(st.tuples(st.floats(0, 1), st.integers(0, 255)), min_size=1, max_size=4),
)
def test_corruption_inside_the_bulk_walk(cut: float, flips: list[tuple[float, int]]) -> None:
    data = bytearray(SMALL[: int(len(SMALL) * cut)])
    for where, value in flips:
        data[min(len(data) - 1, int(len(data) * where))] = value
    _read(bytes(data))


@pytest.mark.parametrize("name", sorted(BASES))
def test_the_bases_read_cleanly(name: str) -> None:
    # The properties above start from captures that are themselves fine.
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "x.pcap"
        path.write_bytes(BASES[name])
        result = PcapReader().read(path)
    assert result.records == len(_MIXED) and result.flows.num_rows == 5 and not result.warnings
