"""Recognisers for the key-value stores and coordination services beside a training job: Redis (RESP and the
cluster bus), memcached (binary and text protocols), ZooKeeper and Cassandra's CQL native protocol.

Ray's metadata, feature stores and checkpoint indexes live in Redis or memcached; Kafka, HDFS HA and many
schedulers keep their leader election in ZooKeeper. None of these encrypts without TLS (where the TLS rules
judge the flow); their authentication (Redis AUTH, memcached SASL PLAIN, ZooKeeper digest, Cassandra's
PasswordAuthenticator) sends the password itself in clear.
"""

from __future__ import annotations

from typing import Final

import numpy as np

from ringfence.observe.recognise._bytes import (
    HEAD,
    I64,
    U8,
    Bool,
    Labeller,
    Packets,
    at,
    be16,
    be32,
    codes,
    is_digit,
    match_at,
    narrow,
    on_ports,
    prefix,
    printable,
    table,
    take,
)
from ringfence.observe.recognise.labels import Label

_TCP: Final = 6
_UDP: Final = 17
_CR: Final = 0x0D
_LF: Final = 0x0A
_SPACE: Final = 0x20

# --- Redis ---------------------------------------------------------------------------------------------------
#: RESP reply types followed by a number and CRLF (RESP2 and RESP3): integer, bulk string, array, map, set, push,
#: attribute, bulk error, verbatim string, big number.
_RESP_NUMBER: Final = b":$*%~>|!=("
#: RESP reply types followed by a line of text: simple string, simple error, double.
_RESP_LINE: Final = b"+-,"
_REDIS_COMMAND_MAX: Final = 32  # the longest command name is under 32 letters
_REDIS_CLUSTER: Final = b"RCmb"  # clusterMsg.sig
_REDIS_CLUSTER_MAX: Final = 1 << 24
_REDIS_CLUSTER_TYPES: Final = 10  # CLUSTERMSG_TYPE_PING (0) … the newest message types

# --- memcached -----------------------------------------------------------------------------------------------
_MC_REQUEST: Final = 0x80
_MC_RESPONSE: Final = 0x81
_MC_HEADER: Final = 24
#: Opcodes memcached implements (protocol_binary.h): get … gatkq (0x00-0x1E) and the SASL trio.
_MC_OPCODES: Final = table([*range(0x1F), 0x20, 0x21, 0x22])
_MC_EXTRAS: Final = table((0, 4, 8, 20))
#: Response statuses (protocol_binary.h): success … locked, auth error/continue, unknown command … busy.
_MC_STATUS: Final = (*range(0x0A), 0x20, 0x21, 0x81, 0x82, 0x83, 0x84, 0x85, 0x86)
_MC_SASL_AUTH: Final = (0x21, 0x22)  # SASL auth, SASL step: the mechanism's data
_MC_KEY_MAX: Final = 250
_MC_BODY_MAX: Final = 1 << 30
#: Text protocol lines whose every field is checked (protocol.txt): a retrieved value, and storage commands.
_MC_TEXT: Final = (
    (b"VALUE ", ("KNN", "KNNN")),
    (b"set ", ("KNNN", "KNNNK")),
    (b"add ", ("KNNN", "KNNNK")),
    (b"replace ", ("KNNN", "KNNNK")),
    (b"append ", ("KNNN", "KNNNK")),
    (b"prepend ", ("KNNN", "KNNNK")),
    (b"cas ", ("KNNNN", "KNNNNK")),
)
#: The first two bytes of each fully checked text line, for a cheap gate: (first byte, second byte) → candidate.
_MC_PAIRS: Final = np.zeros((256, 256), dtype=np.bool_)
for _word, _ in _MC_TEXT:
    _MC_PAIRS[_word[0], _word[1]] = True
MEMCACHED_PORT: Final = 11211
_MC_UDP_FRAME: Final = 8
#: Reply lines a memcached server sends (protocol.txt), seen over UDP after the frame header.
_MC_UDP_REPLIES: Final = (b"END\r\n", b"STAT ", b"STORED\r\n", b"NOT_FOUND\r\n", b"VERSION ", b"ERROR", b"EN\r\n",
                          b"HD", b"VA ")  # fmt: skip
#: Commands recognised by their word alone on memcached's port: retrieval, deletion, arithmetic, meta commands.
_MC_PORT_WORDS: Final = (b"get ", b"gets ", b"gat ", b"gats ", b"delete ", b"incr ", b"decr ", b"touch ",
                         b"stats\r\n", b"stats ", b"version\r\n", b"mg ", b"ms ", b"md ", b"ma ",
                         b"mn\r\n")  # fmt: skip

# --- ZooKeeper -----------------------------------------------------------------------------------------------
ZOOKEEPER_PORT: Final = 2181
_ZK_PING: Final = bytes.fromhex("00000008fffffffe0000000b")  # len 8, xid -2 (PING_XID), type 11 (ping)
_ZK_PING_REPLY: Final = bytes.fromhex("00000010fffffffe")  # len 16, xid -2, then zxid and err 0
_ZK_AUTH: Final = bytes.fromhex("fffffffc00000064")  # xid -4 (AUTHPACKET_XID), type 100 (auth)
_ZK_MESSAGE_MAX: Final = 1 << 24  # jute.maxbuffer is 1 MB by default; a server may raise it
#: The four-letter admin words (ZooKeeper Administrator's Guide), each a whole 4-byte payload.
_ZK_WORDS: Final = (b"ruok", b"stat", b"srvr", b"mntr", b"conf", b"cons", b"crst", b"dump", b"envi", b"reqs",
                    b"wchs", b"wchc", b"wchp", b"dirs", b"isro", b"srst", b"gtmk", b"stmk")  # fmt: skip

# --- Cassandra -----------------------------------------------------------------------------------------------
_CQL_HEADER: Final = 9
_CQL_VERSIONS: Final = (3, 4, 5)  # protocol v3-v5: a 9-byte header; the response sets the high bit
#: Request opcodes: STARTUP, OPTIONS, QUERY, PREPARE, EXECUTE, REGISTER, BATCH, AUTH_RESPONSE.
_CQL_REQUESTS: Final = [0x01, 0x05, 0x07, 0x09, 0x0A, 0x0B, 0x0D, 0x0F]
#: Response opcodes: ERROR, READY, AUTHENTICATE, SUPPORTED, RESULT, EVENT, AUTH_CHALLENGE, AUTH_SUCCESS.
_CQL_RESPONSES: Final = [0x00, 0x02, 0x03, 0x06, 0x08, 0x0C, 0x0E, 0x10]
_CQL_FIRST: Final = table([*_CQL_VERSIONS, *(0x80 | v for v in _CQL_VERSIONS)])
#: (direction bit, opcode) → an opcode of that direction.
_CQL_OPS: Final = np.stack([table(_CQL_REQUESTS), table(_CQL_RESPONSES)])
_CQL_AUTH_RESPONSE: Final = 0x0F
_CQL_FRAME_MAX: Final = 256 << 20  # native_transport_max_frame_size ceiling


def number_end(s: U8, start: I64, most: int) -> I64:
    """Per row: where the CR of a CRLF that ends 1..``most`` ASCII digits starting at ``start`` lies (-1: none)."""
    end = np.full(s.shape[0], -1, dtype=np.int64)
    alive = np.ones(s.shape[0], dtype=np.bool_)
    for k in range(most + 1):
        b = at(s, start + k)
        found = alive & (k > 0) & (b == _CR) & (at(s, start + k + 1) == _LF)
        end[found] = start[found] + k
        alive &= is_digit(b)
    return end


def digits_value(s: U8, start: I64, end: I64, most: int) -> I64:
    """Per row: the decimal number written in bytes ``start`` to ``end`` (at most ``most`` digits)."""
    value = np.zeros(s.shape[0], dtype=np.int64)
    for k in range(most):
        inside = start + k < end
        value = np.where(inside, value * 10 + at(s, start + k) - 0x30, value)
    return value


def fields(s: U8, start: int, pattern: str) -> Bool:
    """Rows whose bytes from ``start`` are space-separated fields as ``pattern`` spells them ('K': a key, printable
    without spaces; 'N': ASCII digits), then CRLF, all inside the head."""
    n = s.shape[0]
    numeric = np.array([kind == "N" for kind in pattern])
    last = len(pattern) - 1
    field = np.zeros(n, dtype=np.int64)
    begun = np.zeros(n, dtype=np.bool_)
    ok = np.ones(n, dtype=np.bool_)
    done = np.zeros(n, dtype=np.bool_)
    for j in range(start, HEAD - 1):
        b = s[:, j]
        active = ok & ~done
        if not active.any():
            break
        char = np.where(numeric[field], is_digit(b), (b > _SPACE) & (b < 0x7F))
        ends = active & begun & (field == last) & (b == _CR) & (s[:, j + 1] == _LF)
        step = active & begun & (field < last) & (b == _SPACE)
        more = active & char
        ok &= ~active | ends | step | more
        done |= ends
        field += step
        begun = np.where(step, False, begun | more)
    return done


def _resp_reply(s: U8) -> Bool:
    """Rows that begin a RESP2/RESP3 reply: a numeric type and its number's CRLF, a line type and printable
    text to its CRLF (or the head's end), RESP3's null or boolean."""
    first = s[:, 0]
    zeros = np.zeros(s.shape[0], dtype=np.int64)
    numeric = np.isin(first, np.frombuffer(_RESP_NUMBER, np.uint8))
    signed = np.where(s[:, 1] == 0x2D, 2, 1).astype(np.int64)  # '-1' nulls and negative integers
    ok = numeric & (number_end(s, zeros + signed, 20) > 0)
    line = np.isin(first, np.frombuffer(_RESP_LINE, np.uint8))
    text = printable(s) & (s != _CR) & (s != _LF)
    col = np.arange(HEAD)
    cr = np.where((s == _CR) & (np.roll(s, -1, axis=1) == _LF) & (col < HEAD - 1), col, HEAD)
    stop = np.where(cr[:, 1:].min(axis=1) < HEAD, cr[:, 1:].min(axis=1), HEAD)
    in_line = (col[None, :] >= 1) & (col[None, :] < stop[:, None])
    ok |= line & (stop > 1) & np.all(text | ~in_line, axis=1)
    ok |= (first == 0x5F) & (s[:, 1] == _CR) & (s[:, 2] == _LF)  # _ null
    ok |= (first == 0x23) & np.isin(s[:, 1], (0x74, 0x66)) & (s[:, 2] == _CR) & (s[:, 3] == _LF)  # #t / #f
    return np.asarray(ok)


def redis(p: Packets, out: Labeller) -> None:
    """Redis: a RESP command (``*<n>\\r\\n$<len>\\r\\n<name>\\r\\n``: an array of bulk strings whose first is a
    command name of letters; AUTH, or HELLO with AUTH, carries the password); in a flow with one, the replies
    (RESP2/RESP3 types, numbers and lines checked to their CRLF); and the cluster bus's ``RCmb`` messages."""
    c = p.cols
    idx, cc = narrow(p, out, c[0] == 0x2A)
    idx, s, _, v = take(p, idx[(p.proto[idx] == _TCP) & is_digit(cc[1]) & (cc[1] != 0x30) & (p.length[idx] >= 14)])
    if idx.size:
        n_end = number_end(s, np.ones(idx.size, np.int64), 6)
        bulk = n_end + 2
        ok = (n_end > 0) & (at(s, bulk) == 0x24)
        l_end = number_end(s, bulk + 1, 2)
        ok &= l_end > 0
        name_len = digits_value(s, bulk + 1, l_end, 2)
        ok &= (name_len >= 1) & (name_len <= _REDIS_COMMAND_MAX)
        name = l_end + 2
        letters = np.ones(idx.size, dtype=np.bool_)
        for k in range(_REDIS_COMMAND_MAX):
            b = at(s, name + k) | 0x20
            letters &= (k >= name_len) | ((b >= 0x61) & (b <= 0x7A) & (name + k < v))
        end = name + name_len
        ok &= letters & (at(s, end) == _CR) & (at(s, end + 1) == _LF) & (end + 2 <= v)
        auth = (name_len == 4) & match_at(s, name, b"auth", fold=True)
        hello = (name_len == 5) & match_at(s, name, b"hello", fold=True) & _contains_word(s, b"auth", end)
        out.assign(idx, np.select([ok & (auth | hello), ok], [Label.REDIS_AUTH, Label.REDIS], 0).astype(np.int64))
        flows = p.flow[idx[ok]]
        if flows.size:
            rows = np.flatnonzero(out.free & (p.proto == _TCP) & np.isin(p.flow, flows))
            out.assign(rows, codes(_resp_reply(p.head[rows]), Label.REDIS_REPLY))
    sig = _REDIS_CLUSTER
    idx, cc = narrow(p, out, c[0] == sig[0])
    bus = (cc[1] == sig[1]) & (cc[2] == sig[2]) & (cc[3] == sig[3]) & (cc[8] == 0) & (cc[9] == 1)  # clusterMsg.ver 1
    idx, s, _, _ = take(p, idx[bus & (p.proto[idx] == _TCP) & (p.length[idx] >= 14)])
    if idx.size:
        size = be32(s, 4)
        ok = (size >= 14) & (size <= _REDIS_CLUSTER_MAX) & (be16(s, 12) <= _REDIS_CLUSTER_TYPES)
        out.assign(idx, codes(ok, Label.REDIS_CLUSTER))


def _contains_word(s: U8, word: bytes, start: I64) -> Bool:
    """Rows where ``word`` (case-insensitive) appears at or after ``start`` inside the head."""
    found = np.zeros(s.shape[0], dtype=np.bool_)
    low = s | 0x20
    for j in range(HEAD - len(word) + 1):
        here = np.all(low[:, j : j + len(word)] == np.frombuffer(word, np.uint8), axis=1)
        found |= here & (j >= start)
    return found


def memcached(p: Packets, out: Labeller) -> None:
    """memcached's binary protocol (a 24-byte header: magic 0x80/0x81, an implemented opcode, key length <= 250,
    extras 0/4/8/20, data type 0, a defined status in responses, a body that holds key and extras) and its text
    protocol (a VALUE line or a storage command, every field checked; on port 11211 the other commands by their
    word). SASL auth/step messages are labelled apart: PLAIN, memcached's usual mechanism, sends the password."""
    c = p.cols
    idx, cc = narrow(p, out, (c[0] & 0xFE) == _MC_REQUEST)  # 0x80 or 0x81
    keep = (p.proto[idx] == _TCP) & _MC_OPCODES[cc[1]] & (cc[5] == 0) & _MC_EXTRAS[cc[4]]
    idx, s, length, _ = take(p, idx[keep & (p.length[idx] >= _MC_HEADER)])
    if idx.size:
        key, extras, body = be16(s, 2), s[:, 4].astype(np.int64), be32(s, 8)
        ok = (key <= _MC_KEY_MAX) & (body >= key + extras) & (body <= _MC_BODY_MAX)
        response = s[:, 0] == _MC_RESPONSE
        ok &= ~response | np.isin(be16(s, 6), _MC_STATUS)
        # One message fills the packet, or its body runs on past it (a large value), or another follows.
        nxt = body + _MC_HEADER
        ok &= (nxt >= length) | ((nxt < HEAD) & (at(s, nxt) == s[:, 0]) & (at(s, nxt + 5) == 0))
        sasl = np.isin(s[:, 1], _MC_SASL_AUTH) & ~response
        out.assign(idx, np.select([ok & sasl, ok], [Label.MEMCACHED_SASL, Label.MEMCACHED], 0).astype(np.int64))
    port = p.port(MEMCACHED_PORT)
    _memcached_udp(p, out, port)
    idx, cc = narrow(p, out, _MC_PAIRS[c[0], c[1]] | (port & (c[0] >= 0x61)))
    on_port = port[idx]
    keep = (p.proto[idx] == _TCP) & (p.length[idx] >= 6)
    idx, s, _, _ = take(p, idx[keep])
    on_port = on_port[keep]
    if idx.size == 0:
        return
    ok = np.zeros(idx.size, dtype=np.bool_)
    for word, patterns in _MC_TEXT:
        rows = prefix(s, 0, word)
        if rows.any():
            sub = s[rows]
            ok[rows] = np.any([fields(sub, len(word), pattern) for pattern in patterns], axis=0)
    if on_port.any():
        for word in _MC_PORT_WORDS:
            ok |= on_port & prefix(s, 0, word)
    out.assign(idx, codes(ok, Label.MEMCACHED_TEXT))


def _memcached_udp(p: Packets, out: Labeller, port: Bool) -> None:
    """memcached over UDP on its port (protocol.txt "UDP protocol"): an 8-byte frame header (request id, sequence
    number below the datagram count, reserved zero), then a text command or reply line, or a binary header.
    ``port``: the rows whose flow is on memcached's port."""
    idx, cc = narrow(p, out, port)
    frame = (p.proto[idx] == _UDP) & (cc[6] == 0) & (cc[7] == 0) & (p.length[idx] >= _MC_UDP_FRAME + 3)
    idx, s, _, _ = take(p, idx[frame])
    if idx.size == 0:
        return
    total = be16(s, 4)
    ok = (total >= 1) & (be16(s, 2) < total)
    line = np.zeros(idx.size, dtype=np.bool_)
    for word in (*_MC_PORT_WORDS, *(w for w, _ in _MC_TEXT), *_MC_UDP_REPLIES):
        line |= prefix(s, _MC_UDP_FRAME, word)
    binary = np.isin(s[:, _MC_UDP_FRAME], (_MC_REQUEST, _MC_RESPONSE)) & _MC_OPCODES[s[:, _MC_UDP_FRAME + 1]]
    out.assign(idx, codes(ok & (line | binary), Label.MEMCACHED_UDP))


def zookeeper(p: Packets, out: Labeller) -> None:
    """ZooKeeper's client protocol (jute records behind a 4-byte length): a ConnectRequest (length 44/45 filling
    the packet, protocol version 0, a positive timeout, a 16-byte session password) or ConnectResponse (36/37),
    a ping or its reply, an AuthPacket (xid -4, type 100: the digest scheme sends ``user:password``); in a flow
    with one of those, every message whose length is in bounds; on port 2181 a four-letter admin word."""
    c = p.cols
    zero, cz = narrow(p, out, (c[0] == 0) & (c[1] == 0))  # a length under 64 kB
    on_tcp = p.proto[zero] == _TCP
    fixed = on_tcp & (cz[2] == 0) & np.isin(cz[3], (0x08, 0x10, 0x24, 0x25, 0x2C, 0x2D)) & (p.length[zero] >= 12)
    idx, s, length, v = take(p, zero[fixed])
    proven = np.zeros(0, dtype=np.int64)
    if idx.size:
        size = be32(s, 0)
        whole = size + 4 == length
        request = whole & np.isin(size, (44, 45)) & (be32(s, 4) == 0) & (be32(s, 16) > 0) & (be32(s, 16) < 1 << 31)
        request &= (be32(s, 28) == 16) & ((size == 44) | (at(s, np.full(idx.size, 48)) <= 1))
        reply = whole & np.isin(size, (36, 37)) & (be32(s, 4) == 0) & (be32(s, 8) < 1 << 31) & (be32(s, 20) == 16)
        reply &= (size == 36) | (at(s, np.full(idx.size, 40)) <= 1)
        ping = (length == 12) & prefix(s, 0, _ZK_PING)
        pong = (length == 20) & prefix(s, 0, _ZK_PING_REPLY) & (be32(s, 16) == 0)
        ok = request | reply | ping | pong
        out.assign(idx, codes(ok, Label.ZOOKEEPER))
        proven = p.flow[idx[ok]]
    auth = on_tcp & (cz[4] == 0xFF) & (cz[5] == 0xFF) & (cz[6] == 0xFF) & (cz[7] == 0xFC) & (cz[11] == 0x64)
    idx, s, length, v = take(p, zero[auth & (p.length[zero] >= 24)])
    if idx.size:
        size, scheme = be32(s, 0), be32(s, 16)
        # xid, type, auth type, the scheme's length and bytes, the credential's length: 20 bytes and the scheme
        ok = prefix(s, 4, _ZK_AUTH) & (size + 4 == length) & (size >= 20 + scheme)
        ok &= (be32(s, 12) == 0) & (scheme >= 1) & (scheme <= 32)
        col = np.arange(HEAD)
        name = (col[None, :] >= 20) & (col[None, :] < np.minimum(20 + scheme, v)[:, None])
        ok &= np.all((printable(s) & (s > _SPACE)) | ~name, axis=1)
        digest = (scheme == 6) & prefix(s, 20, b"digest")
        out.assign(idx, np.select([ok & digest, ok], [Label.ZK_DIGEST, Label.ZK_AUTH], 0).astype(np.int64))
        proven = np.concatenate([proven, p.flow[idx[ok]]])
    if proven.size:
        rows = np.flatnonzero(out.free & (p.proto == _TCP) & np.isin(p.flow, proven) & (p.length >= 8))
        s = p.head[rows]
        size = be32(s, 0)
        out.assign(rows, codes((size >= 4) & (size <= _ZK_MESSAGE_MAX), Label.ZK_MESSAGE))
    idx, _ = narrow(p, out, p.length == 4)
    idx, s, _, _ = take(p, idx[(p.proto[idx] == _TCP) & on_ports(p, idx, (ZOOKEEPER_PORT,))])
    if idx.size:
        ok = np.any([prefix(s, 0, word) for word in _ZK_WORDS], axis=0)
        out.assign(idx, codes(ok, Label.ZK_WORD))


def cassandra(p: Packets, out: Labeller) -> None:
    """Cassandra's CQL native protocol v3-v5 (native_protocol_v4.spec §2): version 3-5 (0x83-0x85 from the
    server), flags within the five defined, a stream, an opcode of the frame's direction, a body length under
    256 MB — and that body ending the packet exactly or the next frame's header following it, so the ~15 bits of
    fixed fields are not all the evidence. AUTH_RESPONSE frames are labelled apart (PasswordAuthenticator's SASL
    PLAIN token holds the password)."""
    idx, cc = narrow(p, out, _CQL_FIRST[p.cols[0]])
    keep = (p.proto[idx] == _TCP) & (cc[1] < 0x20) & (cc[5] < 0x10) & _CQL_OPS[cc[0] >> 7, cc[4]]
    idx, s, length, v = take(p, idx[keep & (p.length[idx] >= _CQL_HEADER)])
    if idx.size == 0:
        return
    body = be32(s, 5)
    nxt = _CQL_HEADER + body
    exact = nxt == length
    following = (nxt + _CQL_HEADER <= v) & (at(s, nxt) == s[:, 0]) & (at(s, nxt + 1) < 0x20) & (at(s, nxt + 5) == 0)
    ok = (body <= _CQL_FRAME_MAX) & (exact | following)
    auth = s[:, 4] == _CQL_AUTH_RESPONSE
    out.assign(idx, np.select([ok & auth, ok], [Label.CQL_AUTH, Label.CQL], 0).astype(np.int64))


__all__ = [
    "MEMCACHED_PORT",
    "ZOOKEEPER_PORT",
    "cassandra",
    "digits_value",
    "fields",
    "memcached",
    "number_end",
    "redis",
    "zookeeper",
]
