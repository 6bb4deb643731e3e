"""The pcap reader on captures built here, one feature at a time (formats, link types, encapsulations)."""

from __future__ import annotations

import ipaddress
import os
import struct
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from ringfence.observe.flows.interface import FlowSourceError
from ringfence.observe.flows.pcap import PcapReader
from ringfence.observe.samples import HEAD_BYTES, SAMPLES_PER_FLOW

TS0 = 1_700_000_000_123_456_000  # ns; a whole number of microseconds

# -- builders ---------------------------------------------------------------------------------------------


def ip4(a: str) -> bytes:
    return ipaddress.IPv4Address(a).packed


def ip6(a: str) -> bytes:
    return ipaddress.IPv6Address(a).packed


def tcp(sport: int, dport: int, payload: bytes = b"", flags: int = 0x18) -> bytes:
    return struct.pack(">HHIIBBHHH", sport, dport, 1, 1, 0x50, flags, 512, 0, 0) + payload


def udp(sport: int, dport: int, payload: bytes = b"") -> bytes:
    return struct.pack(">HHHH", sport, dport, 8 + len(payload), 0) + payload


def ipv4(src: str, dst: str, proto: int, l4: bytes, *, frag: int = 0, mf: bool = False, options: bytes = b"",
         total: int | None = None) -> bytes:  # fmt: skip
    ihl = 5 + len(options) // 4
    length = total if total is not None else ihl * 4 + len(l4)
    flags = (frag // 8) | (0x2000 if mf else 0)
    head = struct.pack(">BBHHHBBH4s4s", 0x40 | ihl, 0, length, 7, flags, 64, proto, 0, ip4(src), ip4(dst))
    return head + options + l4


def ipv6(src: str, dst: str, nh: int, l4: bytes, ext: Sequence[tuple[int, bytes]] = ()) -> bytes:
    """``ext``: (header type, header bytes without next-header) in order; the chain ends with ``nh``."""
    chain = b""
    types = [t for t, _ in ext] + [nh]
    for i, (_t, body) in enumerate(ext):
        chain += bytes([types[i + 1]]) + body
    first = types[0]
    return struct.pack(">IHBB16s16s", 6 << 28, len(chain) + len(l4), first, 64, ip6(src), ip6(dst)) + chain + l4


def eth(payload: bytes, etype: int = 0x0800, vlans: Sequence[tuple[int, int]] = ()) -> bytes:
    """``vlans``: (TPID, id) outermost first."""
    head = bytes.fromhex("020000000002020000000001")
    for tpid, vid in vlans:
        head += struct.pack(">HH", tpid, vid)
    return head + struct.pack(">H", etype) + payload


def pcap(packets: Sequence[tuple[int, bytes]], linktype: int = 1, *, little: bool = True, nano: bool = False,
         snap: int | None = None) -> bytes:  # fmt: skip
    e = "<" if little else ">"
    out = [struct.pack(e + "IHHiIII", 0xA1B23C4D if nano else 0xA1B2C3D4, 2, 4, 0, 0, 262144, linktype)]
    for ts, frame in packets:
        sec, frac = divmod(ts, 10**9)
        data = frame[:snap] if snap else frame
        out.append(struct.pack(e + "IIII", sec, frac if nano else frac // 1000, len(data), len(frame)) + data)
    return b"".join(out)


def block(btype: int, body: bytes, e: str = "<") -> bytes:
    body += b"\0" * (-len(body) % 4)
    return struct.pack(e + "II", btype, len(body) + 12) + body + struct.pack(e + "I", len(body) + 12)


def shb(e: str = "<") -> bytes:
    return block(0x0A0D0D0A, struct.pack(e + "IHHq", 0x1A2B3C4D, 1, 0, -1), e)


def idb(linktype: int, tsresol: int | None = None, e: str = "<") -> bytes:
    opts = b""
    if tsresol is not None:
        opts = struct.pack(e + "HH", 9, 1) + bytes([tsresol]) + b"\0\0\0" + struct.pack(e + "HH", 0, 0)
    return block(1, struct.pack(e + "HHI", linktype, 0, 0) + opts, e)


def epb(iface: int, ticks: int, frame: bytes, e: str = "<") -> bytes:
    return block(6, struct.pack(e + "IIIII", iface, ticks >> 32, ticks & 0xFFFFFFFF, len(frame), len(frame)) + frame, e)


def write(tmp_path: Path, data: bytes, name: str = "t.pcap") -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


def rows(table: pa.Table) -> list[dict[str, object]]:
    return table.drop_columns(["first_seen", "last_seen"]).to_pylist()


def five(row: dict[str, object]) -> tuple[object, ...]:
    return row["src"], row["sport"], row["dst"], row["dport"], row["proto"]


def conversation(n: int = 6) -> list[tuple[int, bytes]]:
    """A TCP conversation: SYN, SYN-ACK, then data both ways."""
    c, s = "10.0.0.1", "10.0.0.2"
    pkts = [ipv4(c, s, 6, tcp(40000, 443, flags=0x02)), ipv4(s, c, 6, tcp(443, 40000, flags=0x12))]
    for i in range(n):
        pkts.append(ipv4(c, s, 6, tcp(40000, 443, b"\x17\x03\x03" + bytes([i]) * 97)))
        pkts.append(ipv4(s, c, 6, tcp(443, 40000, b"\x17\x03\x03" + bytes([i]) * 497)))
    return [(TS0 + 1000 * i, eth(p)) for i, p in enumerate(pkts)]


# -- formats ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("little", [True, False])
@pytest.mark.parametrize("nano", [True, False])
def test_classic_pcap_in_both_byte_orders_and_resolutions(tmp_path: Path, little: bool, nano: bool) -> None:
    result = PcapReader().read(write(tmp_path, pcap(conversation(), little=little, nano=nano)))
    (row,) = rows(result.flows)
    assert five(row) == ("10.0.0.1", 40000, "10.0.0.2", 443, 6)
    assert (row["packets"], row["packets_fwd"]) == (14, 7)
    assert row["bytes"] == 2 * 40 + 6 * (140 + 540) and row["bytes_fwd"] == 40 + 6 * 140
    assert row["payload_bytes"] == 6 * (100 + 500)
    first = result.flows.column("first_seen").cast(pa.int64())[0].as_py()
    last = result.flows.column("last_seen").cast(pa.int64())[0].as_py()
    assert (first, last) == (TS0, TS0 + 13_000)
    assert result.records == 14 and not result.warnings


@pytest.mark.parametrize("e", ["<", ">"])
def test_pcapng_interfaces_resolutions_and_block_kinds(tmp_path: Path, e: str) -> None:
    frame = eth(ipv4("10.1.0.1", "10.1.0.2", 17, udp(5000, 53, b"q" * 20)))
    raw = ipv4("10.2.0.1", "10.2.0.2", 17, udp(6000, 53, b"r" * 20))
    data = (
        shb(e) + idb(1, e=e) + idb(101, tsresol=9, e=e)
        + block(0x0BAD, b"custom block, skipped", e)
        + epb(0, TS0 // 1000, frame, e)  # microseconds (the default)
        + epb(1, TS0 + 5, raw, e)  # nanoseconds on interface 1
        + block(3, struct.pack(e + "I", len(frame)) + frame, e)  # simple packet block: interface 0
        + block(2, struct.pack(e + "HHIIII", 0, 0, 0, 0, len(frame), len(frame)) + frame, e)  # obsolete PB
        + block(5, struct.pack(e + "III", 0, 0, 0), e)  # interface statistics, skipped
        + shb(e) + idb(101, tsresol=0x80 | 10, e=e)  # a second section: 2^-10 s ticks
        + epb(0, 3 * 1024 + 512, raw, e)
    )  # fmt: skip
    result = PcapReader().read(write(tmp_path, data, "t.pcapng"))
    got = {five(r): r["packets"] for r in rows(result.flows)}
    assert got == {("10.1.0.1", 5000, "10.1.0.2", 53, 17): 3, ("10.2.0.1", 6000, "10.2.0.2", 53, 17): 2}
    ts = dict(zip(result.flows.column("sport").to_pylist(), result.flows.column("first_seen").cast(pa.int64())
                  .to_pylist(), strict=True))  # fmt: skip
    assert ts[6000] == 3_500_000_000  # 3.5 s in 2^-10 s ticks; earlier than TS0 + 5
    assert ts[5000] == 0  # the obsolete packet block's zero timestamp is the earliest
    assert result.records == 5


def test_pcapng_from_a_pipe_matches_the_file(tmp_path: Path) -> None:
    data = shb() + idb(1) + b"".join(epb(0, ts // 1000, f) for ts, f in conversation(40))
    path = write(tmp_path, data, "t.pcapng")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=fifo.write_bytes, args=(data,))
    writer.start()
    try:
        piped = PcapReader(chunk_bytes=4096).read(fifo)
    finally:
        writer.join(timeout=10)
    assert rows(piped.flows)[0] | {"source": ""} == rows(PcapReader().read(path).flows)[0] | {"source": ""}


def test_a_pipe_read_in_handed_over_windows_matches_the_file(tmp_path: Path) -> None:
    # a pipe's one buffer is reused for the next read: nothing may still be decoding from it by then
    data = pcap(many_flows(3000, seed=9))
    path = write(tmp_path, data)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=fifo.write_bytes, args=(data,))
    writer.start()
    try:
        piped = PcapReader(chunk_bytes=4096, batch_packets=5)._read(fifo, None)
    finally:
        writer.join(timeout=10)
    whole = PcapReader()._read(path, None)
    assert piped[0].drop_columns(["source"]).equals(whole[0].drop_columns(["source"]))
    assert np.array_equal(piped[2].head, whole[2].head)


def test_empty_and_header_only_files(tmp_path: Path) -> None:
    empty = PcapReader().read(write(tmp_path, b""))
    assert empty.flows.num_rows == 0 and "empty" in empty.warnings[0]
    header_only = PcapReader().read(write(tmp_path, pcap([])))
    assert header_only.flows.num_rows == 0 and not header_only.warnings


def test_sniff() -> None:
    reader = PcapReader()
    assert reader.sniff(pcap([])[:24]) and reader.sniff(pcap([], little=False, nano=True))
    assert reader.sniff(shb()) and not reader.sniff(b"#separator\tzeek") and not reader.sniff(b"")


# -- link types and encapsulations ------------------------------------------------------------------------

PKT = ipv4("192.0.2.1", "192.0.2.2", 6, tcp(33000, 22, b"SSH-2.0-x\r\n"))


@pytest.mark.parametrize(
    ("linktype", "frame"),
    [
        (1, eth(PKT)),
        (1, eth(PKT, vlans=[(0x88A8, 200), (0x8100, 2001)])),
        (113, struct.pack(">HHH8sH", 0, 1, 6, b"\0" * 8, 0x0800) + PKT),  # Linux cooked
        (276, struct.pack(">HHIHBB8s", 0x0800, 0, 2, 1, 0, 6, b"\0" * 8) + PKT),  # Linux cooked v2
        (101, PKT), (12, PKT), (14, PKT), (228, PKT),
        (0, struct.pack("<I", 2) + PKT), (0, struct.pack(">I", 2) + PKT), (108, struct.pack(">I", 2) + PKT),
        (242, b"\0" * 40 + struct.pack(">HH", 0x0800, 0) + PKT),  # IP over InfiniBand
        (1, eth(struct.pack(">II", (100 << 12) | 64, (200 << 12) | 0x100 | 64) + PKT, 0x8847)),  # MPLS stack
        (9, b"\xff\x03\x00\x21" + PKT), (9, b"\x00\x21" + PKT), (9, b"\x21" + PKT),  # PPP; ACFC; PFC
        (9, b"\xff\x03\x02\x81" + struct.pack(">I", (100 << 12) | 0x100 | 64) + PKT),  # PPP carrying MPLS
        (204, b"\x01\xff\x03\x00\x21" + PKT),  # PPP with direction
        (50, b"\xff\x03\x00\x21" + PKT), (50, b"\x0f\x00\x08\x00" + PKT),  # PPP in HDLC framing; Cisco HDLC
        (104, b"\x0f\x00\x08\x00" + PKT),  # Cisco HDLC
        (51, struct.pack(">BBHHH", 0x11, 0, 0x17, len(PKT) + 2, 0x21) + PKT),  # PPPoE without Ethernet
        (1, eth(struct.pack(">BBHHH", 0x11, 0, 0x17, len(PKT) + 2, 0x21) + PKT, 0x8864)),  # PPPoE session
        (1, eth(struct.pack(">HBBI", 0x0002, 1, 1, (0x309 << 8) | 7) + PKT, 0x894F)),  # NSH, MD type 2, no context
        (1, eth(struct.pack(">HBBI16s", 0x0006, 1, 3, (5 << 8) | 255, b"\0" * 16) + eth(PKT), 0x894F)),  # NSH/Eth
    ],
)  # fmt: skip
def test_link_types(tmp_path: Path, linktype: int, frame: bytes) -> None:
    (row,) = rows(PcapReader().read(write(tmp_path, pcap([(TS0, frame)], linktype))).flows)
    assert five(row) == ("192.0.2.1", 33000, "192.0.2.2", 22, 6)
    assert row["payload_bytes"] == 11
    if b"\x88\xa8" in frame[:20]:
        assert row["vlan"] == 2001
    if linktype == 1 and b"\x88\x47" in frame[:14]:
        assert row["outer"] == "mpls label 100"
    if linktype == 1 and frame[12:14] == b"\x89\x4f":
        assert row["outer"] in ("nsh spi 0x309 si 7", "nsh spi 0x5 si 255")


def test_ppp_control_protocols_make_no_flow_and_byte_stuffing_is_reported(tmp_path: Path) -> None:
    lcp = b"\xff\x03\xc0\x21\x09\x01\x00\x08\x00\x00\x00\x00"  # LCP echo-request: not IP, no flow
    stuffed = b"\xff\x03\x7e\x21" + PKT[:8] + b"\x7d\x5e" + PKT[9:]  # still HDLC-framed, with an escape
    ip = b"\xff\x03\x00\x21" + PKT  # one packet that does decode, so the others are warnings, not an error
    result = PcapReader().read(write(tmp_path, pcap([(TS0, lcp), (TS0 + 1, stuffed), (TS0 + 2, ip)], 50)))
    assert result.flows.num_rows == 1
    assert any("byte-stuffed PPP frame" in w for w in result.warnings), result.warnings


def test_truncated_nsh_is_reported_not_guessed(tmp_path: Path) -> None:
    frame = eth(struct.pack(">HBBI", 0x0006, 1, 1, (0x309 << 8) | 7) + PKT[:4], 0x894F)  # says 24 bytes, has 12
    result = PcapReader().read(write(tmp_path, pcap([(TS0, frame), (TS0 + 1, eth(PKT))])))
    assert result.flows.num_rows == 1
    assert any("PPPoE or NSH header truncated or invalid" in w for w in result.warnings), result.warnings


def test_ipv6_extension_headers_and_raw_ipv6(tmp_path: Path) -> None:
    hop = b"\0" + b"\x01\x04\0\0\0\0"  # hdr-ext-len 0 → 8 bytes with next header
    routing = b"\x02\0\0\0\0\0\0" + b"\0" * 16 * 1  # 24 bytes: type 0, one address
    routing = bytes([2]) + routing[1:]
    dest = b"\0" + b"\x01\x04\0\0\0\0"
    pkt = ipv6("2001:db8::1", "2001:db8::2", 6, tcp(40001, 8443, b"x" * 9), [(0, hop), (43, routing), (60, dest)])
    (row,) = rows(PcapReader().read(write(tmp_path, pcap([(TS0, pkt)], 229))).flows)
    assert five(row) == ("2001:db8::1", 40001, "2001:db8::2", 8443, 6)
    assert row["payload_bytes"] == 9 and row["bytes"] == len(pkt)


def test_ipv4_options_move_the_ports(tmp_path: Path) -> None:
    pkt = ipv4("10.3.0.1", "10.3.0.2", 6, tcp(1234, 2049, b"nfs"), options=b"\x01\x01\x01\x00")
    (row,) = rows(PcapReader().read(write(tmp_path, pcap([(TS0, eth(pkt))]))).flows)
    assert five(row) == ("10.3.0.1", 1234, "10.3.0.2", 2049, 6) and row["payload_bytes"] == 3


def test_vxlan_geneve_and_mpls_over_udp_report_inner_flows(tmp_path: Path) -> None:
    inner = eth(ipv4("172.16.0.1", "172.16.0.2", 6, tcp(45000, 443, b"\x16\x03\x01hello")))
    vx = ipv4("10.0.0.1", "10.0.0.2", 17, udp(51000, 4789, struct.pack(">II", 0x08 << 24, 42 << 8) + inner))
    inner_ip = ipv4("172.16.1.1", "172.16.1.2", 17, udp(7000, 53, b"dns?"))
    opts = struct.pack(">HBB", 0x0102, 0x80, 1) + b"\0" * 4  # one 8-byte option
    gv = ipv4("10.0.0.3", "10.0.0.4", 17, udp(51001, 6081, struct.pack(">BBHI", 2, 0, 0x0800, 7 << 8) + opts
                                                + inner_ip))  # fmt: skip
    inner_mp = ipv4("172.16.2.1", "172.16.2.2", 1, b"\x08\0\0\0\0\1\0\1ping")
    mp = ipv4("10.0.0.5", "10.0.0.6", 17, udp(51002, 6635, struct.pack(">I", (33 << 12) | 0x100 | 64) + inner_mp))
    back = ipv4("10.0.0.2", "10.0.0.1", 17, udp(51999, 4789, struct.pack(">II", 0x08 << 24, 42 << 8) + eth(
        ipv4("172.16.0.2", "172.16.0.1", 6, tcp(443, 45000, b"\x16\x03\x03world")))))  # fmt: skip
    result = PcapReader().read(write(tmp_path, pcap([(TS0 + i, eth(p)) for i, p in enumerate([vx, gv, mp, back])])))
    got = {five(r): (r["packets"], r["packets_fwd"], r["outer"]) for r in rows(result.flows)}
    assert got == {
        ("172.16.0.1", 45000, "172.16.0.2", 443, 6): (2, 1, "vxlan 10.0.0.1→10.0.0.2 vni 42"),
        ("172.16.1.1", 7000, "172.16.1.2", 53, 17): (1, 1, "geneve 10.0.0.3→10.0.0.4 vni 7"),
        ("172.16.2.1", None, "172.16.2.2", None, 1): (1, 1, "mpls-over-udp 10.0.0.5→10.0.0.6 label 33"),
    }


def test_macsec_frame_is_an_l2_flow_with_the_sectag_sampled(tmp_path: Path) -> None:
    sectag = bytes([0x2C, 0, 0, 0, 0, 7]) + b"\x11" * 8  # TCI/AN with E and C set, SL, PN, SCI
    frame = eth(sectag + b"\xaa" * 60 + b"\x55" * 16, 0x88E5)
    table, keys, samples, _ = PcapReader()._read(write(tmp_path, pcap([(TS0, frame)])), None)
    (row,) = rows(table)
    assert (row["src"], row["dst"], row["proto"]) == ("02:00:00:00:00:01", "02:00:00:00:00:02", 0)
    assert keys.ethertype.tolist() == [0x88E5] and keys.sport.tolist() == [-1]
    assert samples.head[0, :6].tobytes() == sectag[:6]


# -- flows: orientation, samples, chunking ----------------------------------------------------------------


def test_orientation_rules(tmp_path: Path) -> None:
    a, b = "10.5.0.1", "10.5.0.2"
    pkts = [
        # SYN rule beats order: the first packet seen is the SYN-ACK from the server.
        ipv4(b, a, 6, tcp(5555, 41000, flags=0x12)), ipv4(a, b, 6, tcp(41000, 5555, flags=0x02)),
        # port rule: a reply from the well-known side first
        ipv4(b, a, 17, udp(123, 50000, b"t")), ipv4(a, b, 17, udp(50000, 123, b"t")),
        # neither: the first packet's sender
        ipv4(b, a, 17, udp(45000, 46000, b"u")),
        # no ports: the first packet's sender
        ipv4(b, a, 50, b"\0\0\0\1" + b"e" * 20),
    ]  # fmt: skip
    got = {r["proto"] * 100000 + (r["dport"] or 0): five(r) for r in rows(PcapReader().read(write(
        tmp_path, pcap([(TS0 + i, eth(p)) for i, p in enumerate(pkts)]))).flows)}  # fmt: skip
    assert got[6 * 100000 + 5555] == (a, 41000, b, 5555, 6)
    assert got[17 * 100000 + 123] == (a, 50000, b, 123, 17)
    assert got[17 * 100000 + 46000] == (b, 45000, a, 46000, 17)
    assert got[50 * 100000] == (b, None, a, None, 50)


def test_payload_samples_are_the_first_packets_in_time_order(tmp_path: Path) -> None:
    pkts = conversation(20)
    table, keys, samples, _ = PcapReader(chunk_bytes=4096, batch_packets=5)._read(write(tmp_path, pcap(pkts)), None)
    assert samples.m == SAMPLES_PER_FLOW and set(samples.flow.tolist()) == {0}
    assert samples.forward.tolist() == [True, False] * (SAMPLES_PER_FLOW // 2)
    assert samples.length.tolist() == [100, 500] * (SAMPLES_PER_FLOW // 2)
    assert samples.head.shape == (SAMPLES_PER_FLOW, HEAD_BYTES)
    assert samples.head[2, :4].tobytes() == b"\x17\x03\x03\x01"
    assert keys.payload_packets.tolist() == [40] and keys.payload_bytes.tolist() == [20 * 600]
    short = PcapReader()._read(write(tmp_path, pcap(pkts, snap=14 + 40 + 10), "s.pcap"), None)[2]
    assert short.head[0, :10].tobytes() == b"\x17\x03\x03\x00" + b"\x00" * 6 and not short.head[:, 10:].any()


def many_flows(n: int, seed: int = 3) -> list[tuple[int, bytes]]:
    """Small packets of 50 flows in random order, with ts_sec crossing a 65536 s boundary mid-way."""
    rng = np.random.default_rng(seed)
    out = []
    t = (65536 * 26000 - 2) * 10**9
    for _ in range(n):
        f = int(rng.integers(0, 50))
        fwd = bool(rng.integers(0, 2))
        payload = bytes(rng.integers(0, 256, int(rng.integers(0, 60)), dtype=np.uint8))
        l4 = udp(20000 + f, 4791, payload) if fwd else udp(4791, 20000 + f, payload)
        src, dst = (f"10.8.{f}.1", "10.8.99.1") if fwd else ("10.8.99.1", f"10.8.{f}.1")
        t += int(rng.integers(1, 5_000_000))
        out.append((t - t % 1000, eth(ipv4(src, dst, 17, l4))))
    return out


def test_chunking_and_batching_do_not_change_the_result(tmp_path: Path) -> None:
    path = write(tmp_path, pcap(many_flows(3000)))
    whole = PcapReader()._read(path, None)
    pieces = PcapReader(chunk_bytes=4096, batch_packets=37)._read(path, None)
    assert whole[0].equals(pieces[0])
    assert np.array_equal(whole[2].head, pieces[2].head) and np.array_equal(whole[2].flow, pieces[2].flow)
    assert sum(whole[0].column("packets").to_pylist()) == 3000
    assert whole[0].num_rows == 50


def test_a_window_decoded_on_the_processing_thread_gives_the_one_thread_result(tmp_path: Path) -> None:
    # 40,000 packets: windows of two batches and more are handed to the processing thread while the next is
    # walked; one batch per window never is. The two must agree bit for bit, samples included, and the
    # thread must be gone when the read returns.
    path = write(tmp_path, pcap(many_flows(40_000, seed=5)))
    seen: set[str] = set()

    def progress(done: int, total: int) -> None:
        seen.update(t.name for t in threading.enumerate())

    handed = PcapReader()._read(path, progress)
    alone = PcapReader(batch_packets=1 << 20)._read(path, None)
    assert any(name.startswith("ringfence-decode") for name in seen), seen
    assert not any(t.name.startswith("ringfence-decode") for t in threading.enumerate())
    assert handed[0].equals(alone[0])
    assert np.array_equal(handed[2].head, alone[2].head) and np.array_equal(handed[2].flow, alone[2].flow)
    assert sum(handed[0].column("packets").to_pylist()) == 40_000 == handed[3].records


def test_corruption_after_handed_over_windows_counts_every_record_before_it(tmp_path: Path) -> None:
    # A stop is an error only if no record came before it: the window handed over just before (here the
    # first, of 8 batches) must be counted first, or good packets would be reported as an unreadable file.
    bad = struct.pack("<IIII", 1, 0, 1 << 30, 1 << 30)
    for n, chunk in ((40, 1 << 20), (3000, 4096)):
        result = PcapReader(chunk_bytes=chunk, batch_packets=5).read(write(tmp_path, pcap(many_flows(n)) + bad))
        assert result.records == n and sum(result.flows.column("packets").to_pylist()) == n
        assert any("stopped at byte" in w for w in result.warnings), result.warnings


def test_false_record_headers_inside_payloads_are_skipped(tmp_path: Path) -> None:
    # Payloads that look like record headers (same high timestamp bits) must not derail the bulk walk.
    pkts = many_flows(2000)
    fake = struct.pack("<IIII", pkts[0][0] // 10**9, 0, 20, 20)
    pkts = [(t, f + fake * 3) for t, f in pkts]
    table = PcapReader().read(write(tmp_path, pcap(pkts))).flows
    assert sum(table.column("packets").to_pylist()) == 2000 and table.num_rows == 50


def test_progress_is_reported(tmp_path: Path) -> None:
    path = write(tmp_path, pcap(many_flows(500)))
    seen: list[tuple[int, int]] = []
    PcapReader(chunk_bytes=8192).read(path, progress=lambda done, total: seen.append((done, total)))
    assert len(seen) > 2 and seen[-1] == (path.stat().st_size, path.stat().st_size)


# -- damaged files ----------------------------------------------------------------------------------------


def test_not_a_capture(tmp_path: Path) -> None:
    with pytest.raises(FlowSourceError, match=r"t.pcap@0: not a pcap or pcapng capture"):
        PcapReader().read(write(tmp_path, b"GET / HTTP/1.1\r\n\r\n" * 3))
    with pytest.raises(FlowSourceError, match="cannot read capture"):
        PcapReader().read(tmp_path / "missing.pcap")


def test_truncated_header_and_first_record_are_errors(tmp_path: Path) -> None:
    with pytest.raises(FlowSourceError, match="truncated pcap file header"):
        PcapReader().read(write(tmp_path, pcap([])[:20]))
    with pytest.raises(FlowSourceError, match=r"@24: the last 10 byte"):
        PcapReader().read(write(tmp_path, pcap(conversation())[:34]))
    bad = bytearray(pcap(conversation()))
    bad[32:36] = struct.pack("<I", 10**7)
    with pytest.raises(FlowSourceError, match=r"@24: record declares 10000000 captured bytes"):
        PcapReader().read(write(tmp_path, bytes(bad)))


def test_damage_after_readable_records_is_a_warning(tmp_path: Path) -> None:
    data = pcap(conversation())
    truncated = PcapReader().read(write(tmp_path, data[:-7]))
    assert sum(truncated.flows.column("packets").to_pylist()) == 13
    assert any(f"stopped at byte {len(data) - 570}: the last 563 byte(s) are not a complete record" in w
               for w in truncated.warnings), truncated.warnings  # fmt: skip
    garbage = PcapReader().read(write(tmp_path, data + b"\xff" * 40))
    assert sum(garbage.flows.column("packets").to_pylist()) == 14
    assert any(f"stopped at byte {len(data)}" in w for w in garbage.warnings), garbage.warnings


def test_pcapng_damage(tmp_path: Path) -> None:
    good = shb() + idb(1) + b"".join(epb(0, ts // 1000, f) for ts, f in conversation())
    bad_len = bytearray(good)
    bad_len[len(shb()) + 4] ^= 0x01  # the IDB's length is no longer a multiple of 4
    with pytest.raises(FlowSourceError, match=rf"t.pcapng@{len(shb())}: pcapng block length"):
        PcapReader().read(write(tmp_path, bytes(bad_len), "t.pcapng"))
    no_idb = shb() + epb(0, 1, eth(PKT))
    with pytest.raises(FlowSourceError, match="interface 0 of 0 defined"):
        PcapReader().read(write(tmp_path, no_idb, "t.pcapng"))
    tail = PcapReader().read(write(tmp_path, good + good[-100:-3], "t.pcapng"))
    assert any(f"stopped at byte {len(good)}" in w for w in tail.warnings)


def test_ipsec_ah_over_ipv4_and_ipv6_is_one_integrity_only_flow_each(tmp_path: Path) -> None:
    inner = tcp(40000, 80, b"GET / HTTP/1.1\r\n")
    ah = struct.pack(">BBHII", 6, 4, 0, 0x1000, 1) + bytes(12) + inner  # next header TCP, a 12-byte ICV
    frames = [(TS0, eth(ipv4("10.0.0.1", "10.0.0.2", 51, ah))),
              (TS0 + 1, eth(ipv6("2001:db8::1", "2001:db8::2", 51, ah), 0x86DD))]  # fmt: skip
    got = rows(PcapReader().read(write(tmp_path, pcap(frames))).flows)
    assert sorted((r["src"], r["proto"], r["protection"], r["protocol"]) for r in got) == [
        ("10.0.0.1", 51, "integrity-only", "ah"),
        ("2001:db8::1", 51, "integrity-only", "ah"),
    ]
