"""OpenVPN, built to its wire format (ssl_pkt.h): hard resets in each control-channel layout open a flow, its
data packets are encrypted unless they hold a whole IP packet in clear (--cipher none)."""

from __future__ import annotations

import random
import struct

import pytest
from payload_build import Flow, verdict

RNG = random.Random(1194)
RESET_CLIENT, RESET_SERVER, CONTROL, ACK, DATA_V2 = 7, 8, 4, 5, 9
TS = 1_764_000_000  # a replay timestamp (2025)


def rand(n: int) -> bytes:
    return RNG.randbytes(n)


def reset(op: int, mode: str = "plain", hmac: int = 20, sid: bytes = b"S" * 8) -> bytes:
    acks = b"\x00" if op == RESET_CLIENT else b"\x01" + bytes(4) + b"P" * 8
    tail = acks + bytes(4)  # then message packet id 0
    if mode == "plain":
        return bytes([op << 3]) + sid + tail
    if mode == "tls-auth":
        return bytes([op << 3]) + sid + rand(hmac) + struct.pack(">II", 1, TS) + tail
    return bytes([op << 3]) + sid + struct.pack(">II", 1, TS) + rand(32) + rand(len(tail))  # tls-crypt


def data(body: bytes) -> bytes:
    return bytes([DATA_V2 << 3]) + b"\x00\x00\x07" + body


def ipv4(payload: bytes) -> bytes:
    return struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), 1, 0, 64, 17, 0, bytes(4), bytes(4)) + payload


@pytest.mark.parametrize(("mode", "hmac"), [("plain", 0), ("tls-auth", 20), ("tls-auth", 32), ("tls-crypt", 0)])
def test_openvpn_data_after_a_reset_is_encrypted(mode: str, hmac: int) -> None:
    flow = Flow(proto=17, sport=50000, dport=1194).fwd(reset(RESET_CLIENT, mode, hmac), data(rand(120)))
    flow.back(reset(RESET_SERVER, mode, hmac), data(rand(1300)))
    got = verdict(flow)
    assert got[:2] == ("encrypted", "openvpn") and "2 data packets" in got[2]
    assert {"plain": "without tls-auth", "tls-auth": "under tls-auth", "tls-crypt": "under tls-crypt"}[mode] in got[2]


def test_openvpn_over_tcp_and_on_another_port() -> None:
    def framed(b: bytes) -> bytes:
        return struct.pack(">H", len(b)) + b

    flow = Flow(sport=50000, dport=443).fwd(framed(reset(RESET_CLIENT)), framed(data(rand(200))))
    assert verdict(flow)[:2] == ("encrypted", "openvpn")


def test_openvpn_without_a_cipher_is_plaintext() -> None:
    ping = bytes.fromhex("2a187bf3641eb4cb07ed2d0a981fc748")  # the keepalive, after an HMAC-SHA1 and packet id
    for body in (ipv4(b"payload" * 5), struct.pack(">I", 9) + ipv4(rand(40)), b"\xfa" + ipv4(rand(40)),
                 rand(20) + struct.pack(">I", 3) + ping):  # fmt: skip
        flow = Flow(proto=17, sport=50000, dport=1194).fwd(reset(RESET_CLIENT), data(body))
        got = verdict(flow)
        assert got[:2] == ("plaintext", "openvpn") and "--cipher none" in got[2], body[:8]


def test_openvpn_resets_alone_are_a_handshake() -> None:
    control = bytes([CONTROL << 3]) + b"S" * 8 + b"\x00" + struct.pack(">I", 1) + b"\x16\x03\x01\x00\x50" + rand(40)
    flow = Flow(proto=17, sport=50000, dport=1194).fwd(reset(RESET_CLIENT), control).back(reset(RESET_SERVER))
    got = verdict(flow)
    assert got[:2] == ("handshake-only", "openvpn") and "1 control/ack packet" in got[2]


@pytest.mark.parametrize(
    "payload",
    [
        bytes([RESET_CLIENT << 3]) + b"S" * 8 + b"\x01" + bytes(4),  # a client's reset acknowledges nothing
        bytes([RESET_CLIENT << 3]) + b"S" * 8 + b"\x00" + struct.pack(">I", 5),  # its message packet id is 0
        bytes([RESET_CLIENT << 3]) + b"S" * 8 + struct.pack(">II", 1, 1_000_000) + rand(40),  # a 1970s timestamp
        bytes([RESET_CLIENT << 3]) + b"S" * 8 + struct.pack(">II", 70_000, TS) + rand(40),  # a late packet id
    ],
)
def test_openvpn_needs_a_reset_layout(payload: bytes) -> None:
    assert verdict(Flow(proto=17, sport=50000, dport=1194).fwd(payload, data(rand(100))))[1] != "openvpn"


def test_data_packets_without_a_reset_prove_nothing() -> None:
    assert verdict(Flow(proto=17, sport=50000, dport=1194).fwd(data(rand(100)), data(rand(200))))[1] != "openvpn"
