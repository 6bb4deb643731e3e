"""Key-value stores and coordination services, built to their specifications: Redis (RESP2/RESP3 and the cluster
bus), memcached (protocol_binary.h and protocol.txt), ZooKeeper (zookeeper.jute) and Cassandra's CQL native
protocol (native_protocol_v4.spec). Each is plaintext; the authentication that sends a password is named."""

from __future__ import annotations

import random
import struct

import numpy as np
import pytest
from payload_build import Flow, verdict

from ringfence.observe.recognise.framing_datastores import digits_value, fields, number_end

RNG = random.Random(1204)


def rand(n: int) -> bytes:
    return RNG.randbytes(n)


def resp(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def head(*rows: bytes) -> np.ndarray:
    out = np.zeros((len(rows), 64), dtype=np.uint8)
    for i, row in enumerate(rows):
        out[i, : len(row[:64])] = np.frombuffer(row[:64], np.uint8)
    return out


def test_the_line_helpers_read_numbers_and_fields_to_their_crlf() -> None:
    s = head(b"*12\r\n", b"*1234567\r\n", b"*12\n", b"*\r\n")
    assert number_end(s, np.ones(4, np.int64), 6).tolist() == [3, -1, -1, -1]
    assert digits_value(s, np.ones(4, np.int64), np.full(4, 3), 2).tolist()[0] == 12
    s = head(b"VALUE k 0 5\r\n", b"VALUE k 0 5 \r\n", b"VALUE k x 5\r\n", b"VALUE k 0\r\n", b"VALUE  k 0 5\r\n")
    assert fields(s, 6, "KNN").tolist() == [True, False, False, False, False]


def test_redis_commands_and_replies_are_plaintext_and_auth_is_named() -> None:
    got = verdict(Flow(dport=6390).fwd(resp(b"SET", b"k", rand(40))).back(b"+OK\r\n"))
    assert got[:2] == ("plaintext", "redis") and "1 RESP command and 1 reply" in got[2] and "no AUTH" in got[2]
    # a value of random bytes (a pickled object) is still Redis in clear, not unrecognised ciphertext
    value = rand(1200)
    got = verdict(Flow(dport=6379).fwd(resp(b"get", b"obj")).back(b"$1200\r\n" + value[:1000], value[1000:]))
    assert got[:2] == ("plaintext", "redis")
    got = verdict(Flow(dport=6379).fwd(resp(b"AUTH", b"s3cret"), resp(b"PING")).back(b"+OK\r\n", b"+PONG\r\n"))
    assert got[:2] == ("plaintext", "redis") and "1 AUTH sends the password" in got[2]
    got = verdict(Flow(dport=6379).fwd(resp(b"HELLO", b"3", b"AUTH", b"default", b"pw")).back(b"%7\r\n"))
    assert "AUTH sends the password" in got[2]


@pytest.mark.parametrize(
    "payload",
    [
        b"*1\r\n$4\r\nPIN\r\n",  # the name is shorter than its length
        b"*1\r\n$4\r\nP1NG\r\n",  # a name is letters
        b"*0\r\n$4\r\nPING\r\n",  # an array of no elements names no command
        b"*1\r\n+4\r\nPING\r\n",  # a command is a bulk string
        b"*1\r\n$40\r\nPING\r\n" + b"x" * 36 + b"\r\n",  # no command name is 40 letters
    ],
)
def test_redis_needs_a_whole_command(payload: bytes) -> None:
    assert verdict(Flow(dport=6379).fwd(payload).back(b"+OK\r\n"))[1] != "redis"


def test_a_redis_reply_alone_proves_nothing() -> None:
    assert verdict(Flow(dport=6379).back(b"$5\r\nhello\r\n", b":1\r\n"))[1] != "redis"


def test_the_redis_cluster_bus_is_plaintext() -> None:
    msg = b"RCmb" + struct.pack(">IHHH", 2256, 1, 6379, 0) + rand(60)
    got = verdict(Flow(sport=40000, dport=16379).fwd(msg).back(msg))
    assert got[:2] == ("plaintext", "redis") and "Cluster bus: 2 messages" in got[2] and "slot maps" in got[2]
    assert verdict(Flow(dport=16379).fwd(b"RCmb" + struct.pack(">IHHH", 2256, 2, 6379, 0) + rand(60)))[1] != "redis"


def mc(magic: int, opcode: int, key: bytes = b"", extras: bytes = b"", value: bytes = b"", status: int = 0,
       body: int | None = None) -> bytes:  # fmt: skip
    total = len(key) + len(extras) + len(value) if body is None else body
    header = struct.pack(">BBHBBHIIQ", magic, opcode, len(key), len(extras), 0, status, total, 0x1234, 0)
    return header + extras + key + value


def test_memcached_binary_is_plaintext_and_sasl_is_named() -> None:
    get = mc(0x80, 0x00, b"model:7")
    hit = mc(0x81, 0x00, extras=b"\0\0\0\0", value=rand(30))
    got = verdict(Flow(dport=11211).fwd(get).back(hit))
    assert got[:2] == ("plaintext", "memcached") and "2 binary protocol messages" in got[2]
    # a large value's first segment: its body runs past the packet
    big = mc(0x81, 0x00, extras=b"\0\0\0\0", value=rand(1000), body=200_000)
    assert verdict(Flow(dport=11300).fwd(get).back(big))[:2] == ("plaintext", "memcached")
    sasl = mc(0x80, 0x21, b"PLAIN", value=b"\0user\0password")
    got = verdict(Flow(dport=11211).fwd(sasl).back(mc(0x81, 0x21, status=0)))
    assert got[:2] == ("plaintext", "memcached") and "1 SASL auth message" in got[2]


@pytest.mark.parametrize(
    "payload",
    [
        mc(0x80, 0x50, b"k"),  # no such opcode
        mc(0x81, 0x00, status=0x40),  # no such status
        struct.pack(">BBHBBHIIQ", 0x80, 0, 300, 0, 0, 0, 300, 0, 0) + b"k" * 300,  # a key over 250 bytes
        struct.pack(">BBHBBHIIQ", 0x80, 0, 2, 0, 0, 0, 1, 0, 0) + b"kk",  # the body does not hold the key
        mc(0x80, 0x00, b"k") + b"trailing",  # bytes after the message that are not another
    ],
)
def test_memcached_binary_needs_its_header(payload: bytes) -> None:
    assert verdict(Flow(dport=11300).fwd(payload))[1] != "memcached"


def test_memcached_text_lines_are_checked_field_by_field() -> None:
    got = verdict(Flow(dport=11300).fwd(b"set w:1 0 3600 4000\r\n" + rand(40)).back(b"STORED\r\n"))
    assert got[:2] == ("plaintext", "memcached") and "text protocol" in got[2]
    got = verdict(Flow(dport=11300).back(b"VALUE w:1 0 4000\r\n" + rand(40)))
    assert got[:2] == ("plaintext", "memcached")
    assert verdict(Flow(dport=11211).fwd(b"get w:1\r\n"))[1] == "memcached"
    assert verdict(Flow(dport=11300).fwd(b"get w:1\r\n"))[1] != "memcached"  # the bare word only on its port
    for bad in (b"set w:1 0 x 4000\r\n", b"set w:1 0 3600\r\n", b"VALUE w:1 0 4000 1 2\r\n", b"set  w 0 0 1\r\n"):
        assert verdict(Flow(dport=11300).fwd(bad + rand(40)))[1] != "memcached", bad


def test_memcached_over_udp_names_its_reflection_risk() -> None:
    frame = struct.pack(">HHHH", 7, 0, 1, 0)
    got = verdict(Flow(proto=17, sport=40000, dport=11211).fwd(frame + b"stats\r\n").back(frame + b"STAT pid 1\r\n"))
    assert got[:2] == ("plaintext", "memcached") and "2 UDP datagrams" in got[2] and "CVE-2018-1000115" in got[2]
    for bad in (struct.pack(">HHHH", 7, 1, 1, 0), struct.pack(">HHHH", 7, 0, 1, 9)):  # past the count; reserved
        assert verdict(Flow(proto=17, sport=40000, dport=11211).fwd(bad + b"stats\r\n"))[1] != "memcached"
    assert verdict(Flow(proto=17, sport=40000, dport=11311).fwd(frame + b"stats\r\n"))[1] != "memcached"


def zk_connect(size: int = 45, passwd: int = 16) -> bytes:
    body = struct.pack(">iqiqi", 0, 0x100000012, 30000, 0, passwd) + rand(passwd) + (b"\0" if size == 45 else b"")
    return struct.pack(">i", size) + body


def zk_connected() -> bytes:
    return struct.pack(">iiiqi", 37, 0, 30000, 0x1000001ABCDEF, 16) + rand(16) + b"\0"


def test_zookeeper_sessions_are_plaintext_and_digest_auth_is_named() -> None:
    get = struct.pack(">iii", 18, 1, 4) + struct.pack(">i", 5) + b"/jobs" + b"\x01"
    reply = struct.pack(">iiqi", 200, 1, 0x100000013, 0) + rand(40)
    got = verdict(Flow(dport=2181).fwd(zk_connect(), get).back(zk_connected(), reply))
    assert got[:2] == ("plaintext", "zookeeper") and "2 session connect/pings, 2 messages" in got[2]
    ping = bytes.fromhex("00000008fffffffe0000000b")
    assert verdict(Flow(dport=2182).fwd(ping))[:2] == ("plaintext", "zookeeper")
    auth = struct.pack(">iiii", -4, 100, 0, 6) + b"digest" + struct.pack(">i", 9) + b"bob:s3cr3"
    got = verdict(Flow(dport=2181).fwd(zk_connect(44), struct.pack(">i", len(auth)) + auth))
    assert got[:2] == ("plaintext", "zookeeper") and "1 digest AuthPacket sends user:password" in got[2]
    assert verdict(Flow(dport=2181).fwd(b"ruok").back(b"imok"))[:2] == ("plaintext", "zookeeper")


@pytest.mark.parametrize(
    "payload",
    [
        zk_connect(45, passwd=15)[:-1] + b"\0\0",  # a session password is 16 bytes
        zk_connect(46) + b"\0",  # the length is 44 or 45
        zk_connect()[:-1] + b"\x02",  # readOnly is a boolean
        struct.pack(">i", 45) + struct.pack(">i", 1) + zk_connect()[8:],  # protocol version 0
        bytes.fromhex("00000008fffffffe0000000c"),  # a ping is type 11
    ],
)
def test_zookeeper_needs_its_records(payload: bytes) -> None:
    assert verdict(Flow(dport=2181).fwd(payload, struct.pack(">iii", 8, 1, 11)))[1] != "zookeeper"


def cql(version: int, opcode: int, body: bytes, flags: int = 0, stream: int = 1) -> bytes:
    return struct.pack(">BBhBi", version, flags, stream, opcode, len(body)) + body


STARTUP = cql(4, 0x01, struct.pack(">H", 1) + struct.pack(">H", 11) + b"CQL_VERSION" + struct.pack(">H", 5) + b"3.0.0")


def test_cassandra_is_plaintext_and_its_password_authenticator_is_named() -> None:
    authenticate = cql(0x84, 0x03, struct.pack(">H", 47) + b"org.apache.cassandra.auth.PasswordAuthenticator")
    token = b"\0cassandra\0cassandra"
    response = cql(4, 0x0F, struct.pack(">i", len(token)) + token)
    got = verdict(Flow(dport=9042).fwd(STARTUP, response).back(authenticate, cql(0x84, 0x10, b"\xff\xff\xff\xff")))
    assert got[:2] == ("plaintext", "cassandra") and "4 frames" in got[2] and "1 AUTH_RESPONSE" in got[2]
    # two frames in one segment: the second header follows the first body
    query = cql(4, 0x07, struct.pack(">i", 8) + b"SELECT 1" + b"\0\x01\0", stream=2)
    assert verdict(Flow(dport=9142).fwd(query + query[:12]))[:2] == ("plaintext", "cassandra")


@pytest.mark.parametrize(
    "payload",
    [
        cql(4, 0x08, b"\0\0\0\1"),  # RESULT is a response opcode: a request cannot carry it
        cql(0x84, 0x07, b"\0\0\0\1"),  # … and QUERY a request's
        cql(6, 0x05, b""),  # no protocol v6
        cql(4, 0x05, b"", flags=0x20),  # undefined flag
        STARTUP + b"\1",  # the body does not end the packet and no header follows
    ],
)
def test_cassandra_needs_a_consistent_header(payload: bytes) -> None:
    assert verdict(Flow(dport=9042).fwd(payload))[1] != "cassandra"


def test_tls_on_the_stores_ports_is_judged_by_tls() -> None:
    hello = bytes([22, 3, 1, 0, 60, 1, 0, 0, 56, 3, 3]) + rand(54)
    for port in (6379, 11211, 2181, 9042):
        assert verdict(Flow(dport=port).fwd(hello))[1] == "tls"
