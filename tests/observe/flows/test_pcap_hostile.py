"""Hostile and careless captures (issue 11's pcap causes): a clear error or warning, never a traceback or a hang."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
from test_pcap_synthetic import PKT, TS0, block, conversation, eth, ipv6, pcap, rows, shb, tcp, write

from ringfence.cli import main
from ringfence.observe.flows.interface import FlowSourceError
from ringfence.observe.flows.pcap import PcapReader

PCAP_HEADER = pcap([])


def test_idb_option_declaring_more_bytes_than_the_block_holds(tmp_path: Path) -> None:
    # if_tsresol (9) declaring 0xFFFF bytes, and none: once an IndexError traceback.
    body = struct.pack("<HHI", 1, 0, 0) + struct.pack("<HH", 9, 0xFFFF)
    data = shb() + block(1, body)
    with pytest.raises(FlowSourceError, match=r"t.pcapng@\d+: bad interface description block: option 9 declares"):
        PcapReader().read(write(tmp_path, data, "t.pcapng"))


def test_a_zero_filled_capture_is_refused_at_once(tmp_path: Path) -> None:
    path = tmp_path / "zeros.pcap"
    path.write_bytes(PCAP_HEADER)
    os.truncate(path, 64 << 20)  # sparse: 64 MB of zeros after the header
    with pytest.raises(FlowSourceError, match=r"zeros.pcap@24: record header is all zeros: the file is zero-filled"):
        PcapReader().read(path)


def test_zeros_after_real_packets_stop_the_read_with_a_warning(tmp_path: Path) -> None:
    good = pcap(conversation())
    path = write(tmp_path, good)
    os.truncate(path, len(good) + (8 << 20))
    result = PcapReader().read(path)
    assert result.flows.num_rows == 1 and result.records == len(conversation())
    assert any(f"stopped at byte {len(good)}: record header is all zeros" in w for w in result.warnings)


def test_ringfence_flows_on_1_gb_of_zeros_after_a_pcap_header(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "big.pcap"
    path.write_bytes(PCAP_HEADER)
    os.truncate(path, 1 << 30)
    assert main(["flows", "--format", "jsonl", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "big.pcap@24" in captured.err and "zero-filled" in captured.err and "Traceback" not in captured.err


@pytest.mark.parametrize("small_packets", [True, False])
def test_timestamps_of_zero_read_like_any_other(tmp_path: Path, small_packets: bool) -> None:
    # ts_sec = 0 makes every zero byte look like the start of a record header to the bulk scan.
    n = 1200
    payload = b"\0" * (8 if small_packets else 900)
    frames = [eth(ipv6("2001:db8::1", "2001:db8::2", 6, tcp(40000 + i % 7, 443, payload)), 0x86DD) for i in range(n)]
    at_zero = PcapReader().read(write(tmp_path, pcap([(i * 1000, f) for i, f in enumerate(frames)]), "z.pcap"))
    normal = PcapReader().read(write(tmp_path, pcap([(TS0 + i * 1000, f) for i, f in enumerate(frames)]), "n.pcap"))
    assert at_zero.records == normal.records == n
    strip = ["first_seen", "last_seen", "source"]
    assert at_zero.flows.drop_columns(strip).equals(normal.flows.drop_columns(strip))


def test_more_ipv6_extension_headers_than_followed_make_no_flow_with_a_wrong_protocol(tmp_path: Path) -> None:
    ext = [(60, b"\0" * 7)] * 10  # ten destination-options headers, then TCP
    deep = eth(ipv6("2001:db8::1", "2001:db8::2", 6, tcp(40000, 443, b"x"), ext), 0x86DD)
    result = PcapReader().read(write(tmp_path, pcap([(TS0, deep), (TS0 + 1, eth(PKT))])))
    assert [r["proto"] for r in rows(result.flows)] == [6]  # only PKT: no flow with protocol 0 or 60
    assert any("1 packet(s) not decoded: more IPv6 extension headers than the decoder follows (8)" in w
               for w in result.warnings)  # fmt: skip


def test_a_capture_of_only_undecodable_packets_is_an_input_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = [(TS0 + i, eth(b"\x45" + b"\0" * 10)) for i in range(5)]  # IPv4 headers cut at 11 bytes
    path = write(tmp_path, pcap(bad))
    with pytest.raises(FlowSourceError, match=r"t.pcap@24: none of its 5 packet\(s\) could be decoded into a flow: "
                                              r"5 × IPv4 header truncated"):  # fmt: skip
        PcapReader().read(path)
    assert main(["flows", str(path)]) == 2
    assert "none of its 5 packet(s) could be decoded" in capsys.readouterr().err
    # Only frames that are not IP (ARP): nothing is wrong with them, so that is an empty result with a warning.
    arp = write(tmp_path, pcap([(TS0, eth(b"\0" * 28, 0x0806))]), "arp.pcap")
    result = PcapReader().read(arp)
    assert result.flows.num_rows == 0 and any("not IP made no flow" in w for w in result.warnings)
