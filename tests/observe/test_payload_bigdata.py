"""Hadoop IPC, HDFS data transfer and Spark's transport, built to their wire formats (RpcHeader.proto,
datatransfer.proto, network-common's MessageEncoder): messages in clear are plaintext, a wrapping or key exchange
alone is named and not taken for more than it proves."""

from __future__ import annotations

import random
import struct

import pytest
from payload_build import Flow, verdict

RNG = random.Random(8020)


def rand(n: int) -> bytes:
    return RNG.randbytes(n)


def varint(n: int) -> bytes:
    out = b""
    while True:
        byte, n = n & 0x7F, n >> 7
        out += bytes([byte | (0x80 if n else 0)])
        if not n:
            return out


def hrpc(auth: int = 0) -> bytes:
    return b"hrpc" + bytes([9, 0, auth])


def rpc(call_id: int, body: bytes) -> bytes:
    zigzag = (call_id << 1) ^ (call_id >> 31)
    header = b"\x08\x02\x10\x00\x18" + varint(zigzag & 0xFFFFFFFF) + b"\x22\x10" + rand(16) + b"\x28\x00"
    message = varint(len(header)) + header + varint(len(body)) + body
    return struct.pack(">I", len(message)) + message


GET_INFO = b"\x0a\x0bgetFileInfo\x12\x2eorg.apache.hadoop.hdfs.protocol.ClientProtocol\x18\x01"


def sasl(state: int, token: bytes = b"") -> bytes:
    proto = b"\x10" + bytes([state]) + (b"\x1a" + varint(len(token)) + token if token else b"")
    return rpc(-33, proto)


def test_hadoop_ipc_simple_auth_and_calls_in_clear_are_plaintext() -> None:
    got = verdict(Flow(dport=8020).fwd(hrpc(0), rpc(-3, b"\x12\x06\x0a\x04root"), rpc(0, GET_INFO)))
    assert got[:2] == ("plaintext", "hadoop-rpc") and "SIMPLE authentication" in got[2] and "2 calls" in got[2]
    # mid-connection (no header sampled), the clientId field proves a call
    assert verdict(Flow(dport=8020).fwd(rpc(5, GET_INFO)))[:2] == ("plaintext", "hadoop-rpc")


def test_hadoop_ipc_over_sasl() -> None:
    negotiate, initiate = sasl(1), sasl(2, rand(40))
    got = verdict(Flow(dport=8020).fwd(hrpc(0xDF), negotiate, initiate, rpc(0, GET_INFO)))
    assert got[:2] == ("plaintext", "hadoop-rpc") and "hadoop.rpc.protection=authentication" in got[2]
    got = verdict(Flow(dport=8020).fwd(hrpc(0xDF), negotiate, sasl(5, rand(300)), sasl(5, rand(200))))
    assert got[:2] == ("unknown", "hadoop-rpc") and "2 wrapped calls" in got[2] and "integrity or privacy" in got[2]
    assert verdict(Flow(dport=8020).fwd(hrpc(0xDF), negotiate))[:2] == ("handshake-only", "hadoop-rpc")


@pytest.mark.parametrize(
    "payload",
    [
        b"hrpc" + bytes([7, 0, 0]),  # Hadoop 1's version
        b"hrpc" + bytes([9, 0, 0x50]),  # no such auth protocol
        rpc(5, GET_INFO).replace(b"\x22\x10", b"\x22\x11", 1),  # clientId is 16 bytes (no header in this flow)
        rpc(5, GET_INFO)[:5] + b"\x08\x07" + rpc(5, GET_INFO)[7:],  # no rpcKind 7
    ],
)
def test_hadoop_ipc_needs_its_header(payload: bytes) -> None:
    assert verdict(Flow(dport=8020).fwd(payload))[1] != "hadoop-rpc"


def dt_op(op: int, body: bytes) -> bytes:
    proto = b"\x0a" + varint(len(body)) + body
    return struct.pack(">HB", 28, op) + varint(len(proto)) + proto


def block_packet(data: bytes, seq: int = 1) -> bytes:
    header = (
        b"\x09"
        + struct.pack("<q", 0)
        + b"\x11"
        + struct.pack("<q", seq)
        + b"\x18\x00\x25"
        + struct.pack("<i", len(data))
    )
    return struct.pack(">IH", 4 + len(data), len(header)) + header + data


def test_hdfs_block_transfer_in_clear_is_plaintext() -> None:
    read = dt_op(81, b"\x0a\x20" + rand(32) + b"\x12\x06client")
    got = verdict(Flow(dport=9866).fwd(read).back(block_packet(rand(1200)), block_packet(rand(900), 2)))
    assert got[:2] == ("plaintext", "hdfs") and "1 op" in got[2] and "2 block data packets" in got[2]


def test_hdfs_sasl_data_transfer_alone_is_not_proven() -> None:
    handshake = bytes.fromhex("deadbeef") + varint(10) + b"\x08\x00\x12\x06" + rand(6)
    got = verdict(Flow(dport=9866).fwd(handshake, rand(600)).back(rand(800)))
    assert got[:2] == ("unknown", "hdfs") and "not visible" in got[2]
    got = verdict(Flow(dport=9866).fwd(handshake, dt_op(80, rand(30))))
    assert got[:2] == ("plaintext", "hdfs") and "after SASL" in got[2]


@pytest.mark.parametrize(
    "payload",
    [
        struct.pack(">HB", 27, 81) + b"\x05\x0a\x03abc",  # another protocol version
        struct.pack(">HB", 28, 79) + b"\x05\x0a\x03abc",  # no op 79
        struct.pack(">HB", 28, 81) + b"\x05\x12\x03abc",  # the op's proto starts with its header
        struct.pack(">HB", 28, 81) + b"\x40\x0a\x03abc",  # a proto longer than the packet
    ],
)
def test_hdfs_needs_its_op_layout(payload: bytes) -> None:
    assert verdict(Flow(dport=9866).fwd(payload))[1] != "hdfs"


def frame(kind: int, header: bytes, body: bytes = b"") -> bytes:
    return struct.pack(">QB", 9 + len(header) + len(body), kind) + header + body


def rpc_request(body: bytes, request_id: int = 1) -> bytes:
    return frame(3, struct.pack(">qi", request_id, len(body)), body)


def test_spark_frames_in_clear_are_plaintext() -> None:
    one_way = frame(9, struct.pack(">i", 40), rand(40))
    chunk = frame(0, struct.pack(">qi", 7, 0))
    stream = frame(7, struct.pack(">i", 12) + b"/jars/app.ja" + struct.pack(">q", 5000)) + rand(1000)  # data follows
    got = verdict(Flow(dport=7077).fwd(rpc_request(rand(60)), one_way, chunk).back(stream))
    assert got[:2] == ("plaintext", "spark") and "4 frames" in got[2]
    sasl = rpc_request(b"\xea" + struct.pack(">i", 3) + b"app" + rand(30))
    got = verdict(Flow(dport=7337).fwd(sasl, rpc_request(rand(30), 2)))
    assert got[:2] == ("plaintext", "spark") and "SASL authentication without SASL encryption" in got[2]


def test_a_sasl_reply_proves_nothing_in_clear() -> None:
    sasl = rpc_request(b"\xea" + struct.pack(">i", 3) + b"app" + rand(30))
    challenge = frame(4, struct.pack(">qi", 1, 40), rand(40))
    got = verdict(Flow(dport=7337).fwd(sasl, rand(700)).back(challenge, rand(600)))
    assert got[:2] == ("unknown", "spark") and "enableSaslEncryption" in got[2]


def test_spark_network_crypto_is_encrypted_after_its_key_exchange() -> None:
    auth = rpc_request(b"\xfb" + struct.pack(">i", 3) + b"app" + struct.pack(">i", 16) + rand(16) + rand(48))
    reply = frame(4, struct.pack(">qi", 1, 80), rand(80))
    got = verdict(Flow(dport=7077).fwd(auth, rand(1400), rand(900)).back(reply, rand(1400)))
    assert got[:2] == ("encrypted", "spark") and "TransportCipher" in got[2]
    assert verdict(Flow(dport=7077).fwd(auth))[:2] == ("handshake-only", "spark")


@pytest.mark.parametrize(
    "payload",
    [
        struct.pack(">QBqi", 81, 3, 1, 61) + rand(60),  # an RpcRequest's frame is 21 + its body size
        struct.pack(">QB", 30, 13) + rand(21),  # no message type 13
        struct.pack(">QBqi", 40, 3, 1, 5) + rand(19),  # … exactly
        struct.pack(">QBi", 40, 7, 12) + rand(31),  # a StreamResponse's frame is 21 + its stream id
        struct.pack(">QB", 29, 2) + rand(10),  # a type without a size field must fill the packet exactly
    ],
)
def test_spark_needs_consistent_frames(payload: bytes) -> None:
    assert verdict(Flow(dport=7077).fwd(payload))[1] != "spark"
