"""GRE, enhanced GRE, ERSPAN, Cisco MetaData, L2TP and VXLAN-GPE opened to the flows they carry; tunnels cut
short keep their flow."""

from __future__ import annotations

import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_pcap_synthetic import TS0, eth, five, ipv4, ipv6, pcap, rows, tcp, udp, write

from ringfence.observe.flows.interface import ReadResult
from ringfence.observe.flows.pcap import PcapReader
from ringfence.observe.schema import FLOW_SCHEMA

OUT_A, OUT_B = "192.0.2.1", "192.0.2.2"
SSH = tcp(50000, 22, b"SSH-2.0-OpenSSH_9.6\r\n")


def gre(proto: int, payload: bytes, *, csum: bool = False, key: int | None = None, seq: int | None = None) -> bytes:
    """A GREv0 header (RFC 2784/2890) with the optional fields asked for, then the payload."""
    flags = (0x80 if csum else 0) | (0x20 if key is not None else 0) | (0x10 if seq is not None else 0)
    head = struct.pack(">BBH", flags, 0, proto)
    if csum:
        head += b"\x12\x34\x00\x00"
    if key is not None:
        head += struct.pack(">I", key)
    if seq is not None:
        head += struct.pack(">I", seq)
    return head + payload


def l2tp(payload: bytes, *, control: bool = False, length: bool = True, seq: bool = False, offset: int = -1,
         tunnel: int = 7, session: int = 9) -> bytes:  # fmt: skip
    """An L2TPv2 header (RFC 2661 §3.1) with the optional fields asked for, then the payload (UDP 1701)."""
    flags = (0x80 if control else 0) | (0x40 if length else 0) | (0x08 if seq else 0) | (0x02 if offset >= 0 else 0)
    size = 2 + 2 * length + 4 + 4 * seq + (2 + offset if offset >= 0 else 0) + len(payload)
    head = struct.pack(">BB", flags, 2) + (struct.pack(">H", size) if length else b"")
    head += struct.pack(">HH", tunnel, session) + (struct.pack(">HH", 1, 2) if seq else b"")
    if offset >= 0:
        head += struct.pack(">H", offset) + b"\0" * offset
    return udp(1701, 1701, head + payload)


def cmd(ethertype: int, sgt: int) -> bytes:
    """Cisco MetaData in an Ethernet frame: version 1, length 1, option 1 (the SGT), the tag, the ethertype."""
    return struct.pack(">BBHHH", 1, 1, 1, sgt, ethertype)


def read(tmp_path: Path, outer_packets: list[bytes], etype: int = 0x0800) -> ReadResult:
    frames = [(TS0 + i * 1000, eth(p, etype)) for i, p in enumerate(outer_packets)]
    return PcapReader().read(write(tmp_path, pcap(frames)))


def flows(result: ReadResult) -> dict[tuple[object, ...], tuple[object, object]]:
    return {five(r): (r["packets"], r["outer"]) for r in rows(result.flows)}


def test_grev0_with_checksum_key_and_sequence_carries_ipv4_and_ipv6(tmp_path: Path) -> None:
    v4 = ipv4(OUT_A, OUT_B, 47, gre(0x0800, ipv4("10.1.0.1", "10.1.0.2", 6, SSH), csum=True, key=0x28, seq=7))
    v6 = ipv4(OUT_A, OUT_B, 47, gre(0x86DD, ipv6("2001:db8::1", "2001:db8::2", 17, udp(5353, 53, b"q"))))
    got = flows(read(tmp_path, [v4, v6]))
    assert got == {
        ("10.1.0.1", 50000, "10.1.0.2", 22, 6): (1, f"gre {OUT_A}→{OUT_B} key 0x28"),
        ("2001:db8::1", 5353, "2001:db8::2", 53, 17): (1, f"gre {OUT_A}→{OUT_B}"),
    }


def test_gre_over_ipv6_carrying_mpls_ethernet_and_nsh(tmp_path: Path) -> None:
    icmp = ipv4("10.2.0.1", "10.2.0.2", 1, b"\x08\0\0\0\0\1\0\1ping")
    mpls = struct.pack(">I", (16 << 12) | 0x100 | 64) + icmp
    teb = eth(ipv4("10.3.0.1", "10.3.0.2", 17, udp(123, 123, b"\x23" + b"\0" * 47)))
    nsh = struct.pack(">BBBBI", 0, 2, 0xFF, 1, (0x309 << 8) | 7) + ipv4("10.4.0.1", "10.4.0.2", 6, SSH)
    outer = [ipv6("2001:db8::a", "2001:db8::b", 47, gre(t, p)) for t, p in ((0x8847, mpls), (0x6558, teb),
                                                                          (0x894F, nsh))]  # fmt: skip
    got = flows(read(tmp_path, outer, 0x86DD))
    assert got == {
        ("10.2.0.1", None, "10.2.0.2", None, 1): (1, "gre 2001:db8::a→2001:db8::b label 16"),
        ("10.3.0.1", 123, "10.3.0.2", 123, 17): (1, "gre 2001:db8::a→2001:db8::b"),
        ("10.4.0.1", 50000, "10.4.0.2", 22, 6): (1, "nsh spi 0x309 si 7"),
    }


def test_enhanced_gre_carries_ppp_and_its_control_traffic_keeps_the_gre_flow(tmp_path: Path) -> None:
    def v1(payload: bytes, call: int) -> bytes:  # RFC 2637: key present (payload length, call id), sequence
        return struct.pack(">BBHHHI", 0x30, 0x01, 0x880B, len(payload), call, 1) + payload

    ip_in_ppp = b"\xff\x03\x00\x21" + ipv4("10.5.0.1", "10.5.0.2", 17, udp(4000, 53, b"dns"))
    lcp = b"\xff\x03\xc0\x21\x01\x00\x00\x04"
    ack_only = struct.pack(">BBHHHI", 0x20, 0x81, 0x880B, 0, 9, 1)  # no sequence, an acknowledgement, no payload
    got = flows(read(tmp_path, [ipv4(OUT_A, OUT_B, 47, v1(ip_in_ppp, 9)), ipv4(OUT_A, OUT_B, 47, v1(lcp, 9)),
                                ipv4(OUT_B, OUT_A, 47, ack_only)]))  # fmt: skip
    assert got == {
        ("10.5.0.1", 4000, "10.5.0.2", 53, 17): (1, f"pptp-gre {OUT_A}→{OUT_B} call 9"),
        (OUT_A, None, OUT_B, None, 47): (2, None),
    }


def test_l2tp_data_messages_carry_ppp_and_control_messages_and_ppp_negotiation_keep_the_l2tp_flow(
    tmp_path: Path,
) -> None:
    dns = b"\xff\x03\x00\x21" + ipv4("10.5.1.1", "10.5.1.2", 17, udp(4000, 53, b"dns"))
    v6 = b"\x57" + ipv6("2001:db8::5", "2001:db8::6", 6, SSH)  # protocol field compressed, no address/control
    sccrq = struct.pack(">HHHH", 0x8008, 0, 0, 1)  # Message Type AVP (mandatory, 8 bytes): SCCRQ
    lcp = b"\xff\x03\xc0\x21\x01\x01\x00\x04"
    pkts = [
        ipv4(OUT_A, OUT_B, 17, l2tp(dns)),
        ipv4(OUT_A, OUT_B, 17, l2tp(v6, length=False, seq=True, offset=3)),
        ipv4(OUT_A, OUT_B, 17, l2tp(sccrq, control=True, seq=True, tunnel=0, session=0)),
        ipv4(OUT_A, OUT_B, 17, l2tp(lcp)),
        ipv4(OUT_A, OUT_B, 17, l2tp(dns)[:8] + b"\x40\x02\x00\x63" + l2tp(dns)[12:]),  # length ≠ the datagram's
    ]
    assert flows(read(tmp_path, pkts)) == {
        ("10.5.1.1", 4000, "10.5.1.2", 53, 17): (1, f"l2tp {OUT_A}→{OUT_B}"),
        ("2001:db8::5", 50000, "2001:db8::6", 22, 6): (1, f"l2tp {OUT_A}→{OUT_B}"),
        (OUT_A, 1701, OUT_B, 1701, 17): (3, None),
    }


def test_cisco_metadata_in_gre_and_in_ethernet_frames_is_stripped_to_the_packet_it_tags(tmp_path: Path) -> None:
    # In GRE the ethertype comes first (Wireshark's packet-cisco-metadata.c); in a frame it comes last.
    in_gre = struct.pack(">HBBHH", 0x0800, 1, 1, 1, 17) + ipv4("10.6.1.1", "10.6.1.2", 6, SSH)
    frames = [(TS0, eth(ipv4(OUT_A, OUT_B, 47, gre(0x8909, in_gre, key=0x28)))),
              (TS0 + 1, eth(cmd(0x0800, 17) + ipv4("10.6.2.1", "10.6.2.2", 6, SSH), 0x8909)),
              (TS0 + 2, eth(cmd(0x86DD, 17)[:4] + b"\0" * 4 + ipv6("2001:db8::1", "2001:db8::2", 6, SSH), 0x8909)),
              (TS0 + 3, eth(b"\x02" + cmd(0x0800, 17)[1:] + ipv4("10.6.3.1", "10.6.3.2", 6, SSH), 0x8909))]  # fmt: skip
    result = PcapReader().read(write(tmp_path, pcap(frames)))
    assert flows(result) == {
        ("10.6.1.1", 50000, "10.6.1.2", 22, 6): (1, f"gre {OUT_A}→{OUT_B} key 0x28"),
        ("10.6.2.1", 50000, "10.6.2.2", 22, 6): (1, None),
    }
    # a zero ethertype after the tag, and version 2: neither is IP, and the bad version is said
    assert [w for w in result.warnings if "Cisco MetaData" in w and "1 packet" in w]


def test_erspan_mirrors_are_the_flows_and_mirrored_non_ip_frames_make_none(tmp_path: Path) -> None:
    mirrored = eth(ipv4("10.6.0.1", "10.6.0.2", 6, SSH))
    type2 = struct.pack(">HHI", (1 << 12) | 101, (6 << 13) | 5, 540773)  # version 1, vlan 101, cos 6, session 5
    type3 = struct.pack(">HHIHH", (2 << 12), 3, 0, 0, 0)  # version 2, session 3, frame type 0 (Ethernet)
    stp = bytes.fromhex("0180c2000000020000000001") + b"\x00\x26" + b"\x42\x42\x03" + b"\0" * 35
    pkts = [
        ipv4(OUT_A, OUT_B, 47, gre(0x88BE, type2 + mirrored, seq=1)),
        ipv4(OUT_A, OUT_B, 47, gre(0x22EB, type3 + mirrored)),
        ipv4(OUT_A, OUT_B, 47, gre(0x88BE, mirrored)),  # type I: no sequence, no ERSPAN header
        ipv4(OUT_A, OUT_B, 47, gre(0x88BE, type2 + stp, seq=2)),
    ]
    result = read(tmp_path, pkts)
    got = sorted((five(r), r["packets"], r["outer"]) for r in rows(result.flows))
    ssh = ("10.6.0.1", 50000, "10.6.0.2", 22, 6)
    assert got == [(ssh, 1, f"erspan {OUT_A}→{OUT_B}"), (ssh, 1, f"erspan {OUT_A}→{OUT_B} session 3"),
                   (ssh, 1, f"erspan {OUT_A}→{OUT_B} session 5")]  # fmt: skip
    assert [w for w in result.warnings if "not IP made no flow (ethertype 0x0026×1)" in w]


def test_vxlan_gpe_next_protocols(tmp_path: Path) -> None:
    def gpe(nxt: int, payload: bytes, vni: int) -> bytes:
        return udp(40000, 4790, struct.pack(">BBBBI", 0x0C, 0, 0, nxt, vni << 8) + payload)

    pkts = [
        ipv4(OUT_A, OUT_B, 17, gpe(1, ipv4("10.7.0.1", "10.7.0.2", 6, SSH), 11)),
        ipv4(OUT_A, OUT_B, 17, gpe(2, ipv6("2001:db8::7", "2001:db8::8", 17, udp(40001, 53, b"x")), 12)),
        ipv4(OUT_A, OUT_B, 17, gpe(3, eth(ipv4("10.7.1.1", "10.7.1.2", 17, udp(40002, 53, b"y"))), 13)),
    ]
    assert flows(read(tmp_path, pkts)) == {
        ("10.7.0.1", 50000, "10.7.0.2", 22, 6): (1, f"vxlan-gpe {OUT_A}→{OUT_B} vni 11"),
        ("2001:db8::7", 40001, "2001:db8::8", 53, 17): (1, f"vxlan-gpe {OUT_A}→{OUT_B} vni 12"),
        ("10.7.1.1", 40002, "10.7.1.2", 53, 17): (1, f"vxlan-gpe {OUT_A}→{OUT_B} vni 13"),
    }


def test_a_tunnel_cut_short_inside_its_inner_headers_keeps_the_outer_flow_with_a_warning(tmp_path: Path) -> None:
    inner = ipv4("10.8.0.1", "10.8.0.2", 6, SSH)
    vx = ipv4(OUT_A, OUT_B, 17, udp(40000, 4789, struct.pack(">II", 0x08 << 24, 5 << 8) + eth(inner)[:20]))
    gr = ipv4(OUT_A, OUT_B, 47, gre(0x0800, inner[:12], key=1))
    routed = ipv4(OUT_A, OUT_B, 47, b"\x40\x00\x08\x00" + b"\0" * 8 + inner)  # RFC 1701 routing: not followed
    result = read(tmp_path, [vx, gr, routed])
    assert flows(result) == {(OUT_A, 40000, OUT_B, 4789, 17): (1, None), (OUT_A, None, OUT_B, None, 47): (2, None)}
    (warning,) = [w for w in result.warnings if "tunnel packet" in w]
    assert "3 tunnel packet(s)" in warning and "first at byte 24" in warning


def test_fragmented_tunnel_packets_are_not_opened(tmp_path: Path) -> None:
    payload = gre(0x0800, ipv4("10.9.0.1", "10.9.0.2", 6, SSH))
    first = ipv4(OUT_A, OUT_B, 47, payload[:24], mf=True)
    assert flows(read(tmp_path, [first])) == {(OUT_A, None, OUT_B, None, 47): (1, None)}


def _tunnel_frames() -> list[bytes]:
    inner = ipv4("10.9.9.1", "10.9.9.2", 6, SSH)
    type2 = struct.pack(">HHI", (1 << 12) | 7, 5, 1)
    type3 = struct.pack(">HHIHH", 2 << 12, 3, 0, 0, 1)  # with the optional 8-byte subheader flag
    frames = [
        ipv4(OUT_A, OUT_B, 47, gre(0x0800, inner, csum=True, key=1, seq=2)),
        ipv4(OUT_A, OUT_B, 47, struct.pack(">BBHHHI", 0x30, 0x81, 0x880B, 8, 3, 1) + b"\0" * 4 + b"\x21" + inner),
        ipv4(OUT_A, OUT_B, 47, gre(0x88BE, type2 + eth(inner), seq=1)),
        ipv4(OUT_A, OUT_B, 47, gre(0x22EB, type3 + b"\0" * 8 + eth(inner))),
        ipv4(OUT_A, OUT_B, 47, gre(0x883E, b"\0\0\0\0" + inner)),
        ipv4(
            OUT_A,
            OUT_B,
            17,
            udp(
                1,
                4790,
                struct.pack(">BBBBI", 0x0C, 0, 0, 4, 1 << 8) + struct.pack(">BBBBI", 0, 2, 0xFF, 1, 0x30907) + inner,
            ),
        ),
        ipv6("2001:db8::a", "2001:db8::b", 47, gre(0x6558, eth(inner))),
        ipv4(OUT_A, OUT_B, 47, gre(0x8909, struct.pack(">HBBHH", 0x0800, 1, 1, 1, 5) + inner, key=1)),
        ipv4(OUT_A, OUT_B, 17, l2tp(b"\xff\x03\x00\x21" + inner, seq=True)),
    ]
    return frames  # fmt: skip


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(which=st.integers(0, 8), cut=st.integers(0, 200),
       flips=st.lists(st.tuples(st.integers(14, 200), st.integers(0, 255)), max_size=6))  # fmt: skip
def test_corrupted_tunnel_frames_never_crash_or_count_twice(which: int, cut: int, flips: list[tuple[int, int]]) -> None:
    frame = bytearray(eth(_tunnel_frames()[which], 0x86DD if which == 6 else 0x0800))
    for at, value in flips:
        if at < len(frame):
            frame[at] = value
    data = pcap([(TS0, bytes(frame[: max(14, len(frame) - cut)])), (TS0 + 1, eth(ipv4(OUT_A, OUT_B, 6, SSH)))])
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "x.pcap"
        path.write_bytes(data)
        result = PcapReader().read(path)  # one good packet: never "nothing decodable"
    assert result.flows.schema == FLOW_SCHEMA
    packets = result.flows.column("packets").to_pylist()
    assert sum(packets) <= 2 and all(p >= 1 for p in packets)
    fwd = result.flows.column("packets_fwd").to_pylist()
    assert all(0 <= f <= p for f, p in zip(fwd, packets, strict=True))


@pytest.mark.parametrize("which", range(9))
def test_every_tunnel_of_the_corruption_base_opens_to_its_inner_flow(tmp_path: Path, which: int) -> None:
    result = read(tmp_path, [_tunnel_frames()[which]], 0x86DD if which == 6 else 0x0800)
    assert [five(r) for r in rows(result.flows)] == [("10.9.9.1", 50000, "10.9.9.2", 22, 6)]
    assert not result.warnings
