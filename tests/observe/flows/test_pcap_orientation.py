"""Who started a conversation, when the capture began after its SYN."""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path

from ringfence.observe.flows._pcap_flows import MID_STREAM_NOTE
from ringfence.observe.flows.pcap import PcapReader


def _frame(src: str, dst: str, sport: int, dport: int, flags: int, payload: bytes) -> bytes:
    ip_src, ip_dst = (bytes(int(x) for x in a.split(".")) for a in (src, dst))
    tcp = struct.pack("!HHIIBBHHH", sport, dport, 1, 1, 5 << 4, flags, 65535, 0, 0) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 1, 0, 64, 6, 0, ip_src, ip_dst) + tcp
    return b"\x02" * 6 + b"\x04" * 6 + b"\x08\x00" + ip


def _pcap(path: Path, frames: list[bytes]) -> Path:
    out = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)
    for i, f in enumerate(frames):
        out += struct.pack("<IIII", 1_700_000_000, i, len(f), len(f)) + f
    path.write_bytes(out)
    return path


def test_mid_connection_capture_orients_from_the_ephemeral_port(tmp_path: Path) -> None:
    # The first packet seen is the server's reply (port 8000, not a well-known or listed port), then the
    # client's next request from its OS-picked port 58618: the client is the initiator.
    frames = [
        _frame("10.77.3.10", "10.77.1.50", 8000, 58618, 0x18, b"HTTP/1.1 200 OK\r\n\r\n"),
        _frame("10.77.1.50", "10.77.3.10", 58618, 8000, 0x18, b"POST /metrics HTTP/1.1\r\n\r\n"),
    ]
    flows = PcapReader().read(_pcap(tmp_path / "mid.pcap", frames)).flows.to_pylist()
    assert len(flows) == 1
    assert (flows[0]["src"], flows[0]["sport"], flows[0]["dst"], flows[0]["dport"]) == (
        "10.77.1.50", 58618, "10.77.3.10", 8000,
    )
    assert flows[0]["packets_fwd"] == 1


def test_two_ephemeral_ports_fall_back_to_the_first_sender(tmp_path: Path) -> None:
    frames = [
        _frame("10.77.1.11", "10.77.1.10", 41000, 45000, 0x18, b"x" * 8),
        _frame("10.77.1.10", "10.77.1.11", 45000, 41000, 0x18, b"y" * 8),
    ]
    flows = PcapReader().read(_pcap(tmp_path / "two.pcap", frames)).flows.to_pylist()
    assert (flows[0]["src"], flows[0]["sport"]) == ("10.77.1.11", 41000)


def _ciphertext(n: int, seed: int) -> bytes:
    out = b""
    while len(out) < n:
        out += hashlib.sha256(f"{seed}:{len(out)}".encode()).digest()
    return out[:n]


def test_joined_after_the_handshake_is_unknown_and_says_so(tmp_path: Path) -> None:
    # An SSH session whose banner and key exchange happened before the capture: only ciphertext is seen.
    frames = [
        _frame("10.77.5.10", "10.77.3.10", 38692, 22, 0x18, _ciphertext(96, 1)),
        _frame("10.77.3.10", "10.77.5.10", 22, 38692, 0x18, _ciphertext(160, 2)),
        _frame("10.77.5.10", "10.77.3.10", 38692, 22, 0x18, _ciphertext(64, 3)),
    ]
    (flow,) = PcapReader().read(_pcap(tmp_path / "joined.pcap", frames)).flows.to_pylist()
    assert flow["protection"] == "unknown"
    assert MID_STREAM_NOTE in flow["reason"]


def test_a_connection_opened_in_the_capture_gets_no_mid_stream_note(tmp_path: Path) -> None:
    frames = [
        _frame("10.77.5.10", "10.77.3.10", 38692, 22, 0x02, b""),
        _frame("10.77.3.10", "10.77.5.10", 22, 38692, 0x12, b""),
        _frame("10.77.5.10", "10.77.3.10", 38692, 22, 0x18, _ciphertext(96, 1)),
        _frame("10.77.3.10", "10.77.5.10", 22, 38692, 0x18, _ciphertext(160, 2)),
    ]
    (flow,) = PcapReader().read(_pcap(tmp_path / "opened.pcap", frames)).flows.to_pylist()
    assert flow["protection"] == "unknown"
    assert MID_STREAM_NOTE not in flow["reason"]
