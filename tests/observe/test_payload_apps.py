"""Consoles and application databases, built to their specifications: Telnet, VNC (RFB) and MongoDB."""

from __future__ import annotations

import random
import struct

import pytest
from payload_build import Flow, verdict

RNG = random.Random(1204)


def rand(n: int) -> bytes:
    return RNG.randbytes(n)


DO_TTYPE, WILL_ECHO, SB_TTYPE = b"\xff\xfd\x18", b"\xff\xfb\x01", b"\xff\xfa\x18\x00xterm\xff\xf0"


def test_telnet_negotiation_is_plaintext_on_its_port_and_whole_negotiations_anywhere() -> None:
    got = verdict(Flow(sport=40000, dport=23).back(DO_TTYPE).fwd(SB_TTYPE))
    assert got[:2] == ("plaintext", "telnet") and "2 option negotiations" in got[2]
    got = verdict(Flow(sport=40000, dport=2323).back(DO_TTYPE + WILL_ECHO + b"\xff\xfd\x1f"))
    assert got[:2] == ("plaintext", "telnet")


@pytest.mark.parametrize(
    ("port", "payload"),
    [
        (2323, DO_TTYPE),  # one negotiation off TCP 23 is not enough
        (2323, DO_TTYPE + WILL_ECHO + b"x"),  # something else follows
        (23, b"\xff\xfd\x99"),  # not a registered option
        (23, b"\xff\xfa\x18\x00xterm\xff"),  # a subnegotiation that does not end
    ],
)
def test_telnet_needs_its_commands(port: int, payload: bytes) -> None:
    assert verdict(Flow(sport=40000, dport=port).fwd(payload))[1] != "telnet"


BANNER = b"RFB 003.008\n"


def test_vnc_without_tls_is_plaintext_and_its_des_challenge_is_not_taken_for_ciphertext() -> None:
    flow = Flow(sport=40000, dport=5900).back(BANNER, b"\x01\x02", rand(16), b"\0\0\0\0").fwd(BANNER, b"\x02", rand(16))
    got = verdict(flow)
    assert got[:2] == ("plaintext", "vnc") and "2 challenge/response packets" in got[2]
    # RealVNC's RA2: the key exchange after the banner is high-entropy data no rule reads
    got = verdict(Flow(sport=40000, dport=5900).back(BANNER, b"\x01\x06", rand(300)).fwd(BANNER, b"\x06"))
    assert got[:2] == ("unknown", "vnc") and "RA2" in got[2]


def test_vnc_over_vencrypt_is_judged_by_its_tls() -> None:
    hello = bytes([22, 3, 1, 0, 60, 1, 0, 0, 56, 3, 3]) + rand(54)
    got = verdict(Flow(sport=40000, dport=5900).back(BANNER, b"\x01\x13").fwd(BANNER, b"\x13", hello))
    assert got[1] != "vnc"


@pytest.mark.parametrize("payload", [b"RFB 003.008 ", b"RFB 0a3.008\n", b"RFB 003.008\n\n", b"rfb 003.008\n"])
def test_vnc_needs_its_exact_banner(payload: bytes) -> None:
    assert verdict(Flow(sport=40000, dport=5900).fwd(payload))[1] != "vnc"


def mongo(op: int, body: bytes, size: int | None = None) -> bytes:
    return struct.pack("<iiii", 16 + len(body) if size is None else size, 7, 0, op) + body


HELLO = mongo(2013, struct.pack("<I", 0) + b"\x00" + struct.pack("<i", 22) + b"\x10hello\x00\x01\x00\x00\x00" + b"\0")


def test_mongodb_is_plaintext() -> None:
    query = mongo(2004, struct.pack("<i", 0) + b"admin.$cmd\x00" + struct.pack("<ii", 0, -1) + rand(20))
    compressed = mongo(2012, struct.pack("<iiB", 2013, 200, 2) + rand(40))
    got = verdict(Flow(sport=40000, dport=27017).fwd(HELLO, query, compressed))
    assert got[:2] == ("plaintext", "mongodb") and "3 messages" in got[2] and "not encryption" in got[2]


@pytest.mark.parametrize(
    "payload",
    [
        mongo(2003, rand(20)),  # not an opcode
        mongo(2013, struct.pack("<I", 4) + b"\x00" + rand(10)),  # an undefined OP_MSG flag bit
        mongo(2013, struct.pack("<I", 0) + b"\x02" + rand(10)),  # no section kind 2
        mongo(2012, struct.pack("<iiB", 2013, 200, 9) + rand(10)),  # no compressor 9
        mongo(2004, rand(30), size=49_000_000),  # larger than maxMessageSizeBytes
    ],
)
def test_mongodb_needs_its_exact_header(payload: bytes) -> None:
    assert verdict(Flow(sport=40000, dport=27017).fwd(payload))[1] != "mongodb"
