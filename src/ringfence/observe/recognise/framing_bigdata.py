"""Recognisers for the data-processing plane beside a training job: Hadoop IPC (HDFS NameNode, YARN), HDFS's
DataTransferProtocol (the DataNodes' block reads and writes) and Spark's RPC and block transfer (``network-common``).

Each has a cleartext mode and one or more protected ones, and the protection is chosen by configuration, not
negotiated in clear: what the packets prove is whether readable messages cross (plaintext), or whether only an
authentication/wrapping exchange is seen (the protection it set up is named, not assumed).
"""

from __future__ import annotations

from typing import Final

import numpy as np

from ringfence.observe.recognise._bytes import (
    I64,
    U8,
    Bool,
    Labeller,
    Packets,
    at,
    be16,
    be32,
    be32_at,
    codes,
    narrow,
    prefix,
    table,
    take,
)
from ringfence.observe.recognise.labels import Label

_TCP: Final = 6

# --- Hadoop IPC (RpcHeader.proto, Server.java) ----------------------------------------------------------------
_HRPC: Final = b"hrpc"
_HRPC_VERSION: Final = 9  # Hadoop 2 and 3
_AUTH_NONE: Final = 0x00
_AUTH_SASL: Final = 0xDF  # -33
_SASL_CALL: Final = 0x41  # callId -33, zigzag-encoded (sint32)
_SASL_WRAP: Final = 5  # RpcSaslProto.SaslState.WRAP
#: RpcRequestHeaderProto's first fields: rpcKind (tag 0x08: builtin, writable, protobuf), rpcOp (tag 0x10: final
#: packet, continuation, close), then callId (tag 0x18).
_RPC_KINDS: Final = 2
_RPC_OPS: Final = 2

# --- HDFS DataTransferProtocol (DataTransferProtocol.java, datatransfer.proto) ---------------------------------
_DT_VERSION: Final = 28  # DATA_TRANSFER_VERSION since Hadoop 2
#: Op codes: WRITE_BLOCK 80 … BLOCK_GROUP_CHECKSUM 90, CUSTOM 127.
_DT_OPS: Final = table([*range(80, 91), 127])
_DT_SASL_MAGIC: Final = bytes.fromhex("deadbeef")  # SASL_TRANSFER_MAGIC_NUMBER: SASL data-transfer protection

# --- Spark network-common (MessageEncoder, Message.Type) -------------------------------------------------------
_SPARK_TYPES: Final = 12  # ChunkFetchRequest 0 … MergedBlockMetaSuccess 12
_SPARK_FRAME_MAX: Final = 1 << 31
_RPC_REQUEST: Final = 3
_RPC_RESPONSE: Final = 4
_ONE_WAY: Final = 9
_CHUNK_REQUEST: Final = 0
_STREAM_RESPONSE: Final = 7
_STREAM_ID_MAX: Final = 40  # a stream id the head holds with the byte count after it
_SPARK_AUTH_TAG: Final = 0xFB  # crypto.AuthMessage: spark.network.crypto.enabled
_SPARK_SASL_TAG: Final = 0xEA  # sasl.SaslMessage: spark.authenticate over SASL DIGEST-MD5
_APP_ID_MAX: Final = 40  # an app id the head holds with the field after it
_SALT_MAX: Final = 32
_KEY_FLOW: Final = 1 << 33  # body keys: flow, then the direction bit, then a 32-bit size


def _request_header(s: U8, start: int) -> tuple[Bool, I64]:
    """(rows with an RpcRequestHeaderProto behind its varint length at ``start``, its callId's first byte)."""
    ok = (at(s, np.full(s.shape[0], start)) < 0x80) & (s[:, start + 1] == 0x08) & (s[:, start + 2] <= _RPC_KINDS)
    ok &= (s[:, start + 3] == 0x10) & (s[:, start + 4] <= _RPC_OPS) & (s[:, start + 5] == 0x18)
    return np.asarray(ok), s[:, start + 6].astype(np.int64)


def hadoop_rpc(p: Packets, out: Labeller) -> None:
    """Hadoop IPC: the connection header ``hrpc``, version 9, a service class and the auth protocol (0: SIMPLE, the
    user name asserted; 0xDF: SASL, Kerberos or a delegation token); in a flow with one, or anywhere with the
    clientId field (tag 0x22, 16 bytes) after the callId, RPC requests behind a 4-byte length: an
    RpcRequestHeaderProto of a defined kind and op. callId -33 is SASL: its RpcSaslProto's state WRAP is a call
    wrapped by the negotiated security layer (integrity or privacy); any other callId is a call in clear."""
    c = p.cols
    idx, cc = narrow(p, out, (c[0] == 0x68) & (c[1] == 0x72))
    keep = (p.proto[idx] == _TCP) & (cc[2] == 0x70) & (cc[3] == 0x63) & (cc[4] == _HRPC_VERSION)
    idx, s, _, _ = take(p, idx[keep & np.isin(cc[6], (_AUTH_NONE, _AUTH_SASL)) & (p.length[idx] >= 7)])
    out.assign(idx, np.where(s[:, 6] == _AUTH_SASL, Label.HRPC_SASL, Label.HRPC_SIMPLE).astype(np.int64))
    proven = p.flow[idx]
    idx, cc = narrow(p, out, (c[0] == 0) & (c[5] == 0x08) & (c[7] == 0x10) & (c[9] == 0x18))
    idx, s, length, _ = take(p, idx[(p.proto[idx] == _TCP) & (p.length[idx] >= 12)])
    if idx.size == 0:
        return
    header, call = _request_header(s, 4)
    size, header_len = be32(s, 0), s[:, 4].astype(np.int64)
    header &= (size + 4 >= length) & (size >= header_len + 1) & (header_len >= 4)
    # the callId varint (1 to 5 bytes), then clientId: tag 0x22, length 16
    after = np.full(idx.size, -1, dtype=np.int64)
    for k in range(5):
        ends = (after < 0) & (at(s, np.full(idx.size, 10 + k)) < 0x80)
        after[ends] = 11 + k
    client = (at(s, after) == 0x22) & (at(s, after + 1) == 16)
    header &= np.isin(p.flow[idx], proven) | client
    sasl = header & (call == _SASL_CALL)
    # RpcSaslProto after the header: its varint length (1 or 2 bytes), then (version, tag 0x08, optional) the
    # state (tag 0x10)
    body = 5 + header_len
    fields = np.where(at(s, body) < 0x80, body + 1, body + 2)
    state_at = np.where(at(s, fields) == 0x08, fields + 2, fields)
    wrap = sasl & (at(s, state_at) == 0x10) & (at(s, state_at + 1) == _SASL_WRAP)
    found = np.select([wrap, sasl, header], [Label.HRPC_WRAP, Label.HRPC_SASL_MSG, Label.HRPC_CALL], 0)
    out.assign(idx, found.astype(np.int64))


def hdfs_data(p: Packets, out: Labeller) -> None:
    """HDFS DataTransferProtocol: an op (version 28, an op code 80-90 or 127, then a varint-delimited proto whose
    first field is its header, tag 0x0A, filling the packet or more) or the SASL data-transfer handshake (magic
    0xDEADBEEF, then a DataTransferEncryptorMessageProto starting with its status, tag 0x08); in a flow with an
    op, the block data packets (a 4-byte payload length, a 2-byte header length and a PacketHeaderProto starting
    with offsetInBlock, tag 0x09)."""
    c = p.cols
    idx, cc = narrow(p, out, (c[0] == 0) & (c[1] == _DT_VERSION))
    keep = (p.proto[idx] == _TCP) & _DT_OPS[cc[2]] & (p.length[idx] >= 6)
    idx, s, length, _ = take(p, idx[keep])
    proven = np.zeros(0, dtype=np.int64)
    if idx.size:
        one = s[:, 3] < 0x80  # a 1- or 2-byte varint length, then tag 0x0A
        size = np.where(one, s[:, 3], (s[:, 3] & 0x7F) + (s[:, 4].astype(np.int64) << 7))
        start = np.where(one, 4, 5)
        ok = (at(s, start) == 0x0A) & (start + size <= length) & (size >= 2)
        out.assign(idx, codes(ok, Label.HDFS_OP))
        proven = p.flow[idx[ok]]
    idx, cc = narrow(p, out, (c[0] == 0xDE) & (c[1] == 0xAD) & (c[2] == 0xBE) & (c[3] == 0xEF))
    idx, s, _, _ = take(p, idx[(p.proto[idx] == _TCP) & (p.length[idx] >= 7)])
    if idx.size:
        out.assign(idx, codes(prefix(s, 0, _DT_SASL_MAGIC) & (s[:, 4] < 0x80) & (s[:, 5] == 0x08), Label.HDFS_SASL))
    if proven.size:
        idx, cc = narrow(p, out, np.isin(p.flow, proven))
        idx, s, length, _ = take(p, idx[(p.proto[idx] == _TCP) & (p.length[idx] >= 8)])
        header = be16(s, 4)
        ok = (s[:, 6] == 0x09) & (header >= 10) & (header <= 128) & (be32(s, 0) >= 4)
        out.assign(idx, codes(ok, Label.HDFS_PACKET))


def spark(p: Packets, out: Labeller) -> None:
    """Spark's transport frames (network-common MessageEncoder): an 8-byte frame length that counts itself, a
    message type 0-12, then per type — RpcRequest/RpcResponse: request id and a 4-byte body size the frame holds
    exactly (21 + size); OneWayMessage: the body size (13 + size); ChunkFetchRequest: exactly 21 bytes;
    StreamResponse: its stream id and byte count (21 + id; the stream's bytes follow the frame); any other type only
    when the frame is exactly the packet. The frame fills the packet or runs past it. An RpcRequest whose body
    starts with AuthMessage's tag (0xFB) is spark.network.crypto's key exchange; with SaslMessage's (0xEA),
    spark.authenticate's SASL; in such a flow an RpcResponse is labelled apart (it may be the exchange's reply)."""
    c = p.cols
    negotiating = _spark_auth_bodies(p, out)
    idx, cc = narrow(p, out, (c[0] == 0) & (c[1] == 0) & (c[2] == 0) & (c[3] == 0))
    keep = (p.proto[idx] == _TCP) & (cc[8] <= _SPARK_TYPES) & (p.length[idx] >= 21)
    idx, s, length, v = take(p, idx[keep])
    if idx.size == 0:
        return
    frame, kind = be32(s, 4), s[:, 8]
    ok = (frame >= 9) & (frame <= _SPARK_FRAME_MAX)
    rpc = (kind == _RPC_REQUEST) | (kind == _RPC_RESPONSE)
    ok &= ~rpc | (frame == 21 + be32(s, 17))
    ok &= (kind != _ONE_WAY) | (frame == 13 + be32(s, 9))
    ok &= (kind != _CHUNK_REQUEST) | (frame == 21)
    # StreamResponse: the stream id (a 4-byte length and its bytes) and the byte count; the stream's bytes follow
    # the frame (not in it), so the packet may hold more than the frame
    stream = (kind == _STREAM_RESPONSE) & (be32(s, 9) <= _STREAM_ID_MAX) & (frame == 21 + be32(s, 9))
    ok &= (kind != _STREAM_RESPONSE) | stream
    sized = rpc | (kind == _ONE_WAY) | (kind == _CHUNK_REQUEST)
    # the frame fills the packet or runs on past it; a type without a size field only when it is exactly the packet
    ok &= stream | (sized & (frame >= length)) | (frame == length)
    request = ok & rpc & (v > 21)
    auth = request & (s[:, 21] == _SPARK_AUTH_TAG)
    sasl = request & (kind == _RPC_REQUEST) & (s[:, 21] == _SPARK_SASL_TAG)
    # In a flow that authenticates, an RpcResponse may be the exchange's own reply (a SASL challenge), and an RPC
    # header sent apart from its body may be the exchange's own (Spark writes the AuthMessage so): they prove
    # neither way, so they are labelled apart; every other frame in clear proves the connection is not encrypted.
    in_exchange = np.isin(p.flow[idx], np.concatenate([negotiating // _KEY_FLOW, p.flow[idx[auth | sasl]]]))
    # a header written apart is the exchange's own when its body size is the length of an AuthMessage/SaslMessage
    # body written apart in the same direction of the same flow
    own = np.isin(_body_key(p.flow[idx], p.forward[idx], be32(s, 17)), negotiating)
    reply = ok & in_exchange & ((kind == _RPC_RESPONSE) | (rpc & (length == 21) & own))
    found = np.select([auth, sasl, reply, ok], [Label.SPARK_AUTH, Label.SPARK_SASL, Label.SPARK_REPLY, Label.SPARK], 0)
    out.assign(idx, found.astype(np.int64))


def _spark_auth_bodies(p: Packets, out: Labeller) -> I64:
    """Label an AuthMessage (tag 0xFB, the app id, the salt, the ciphertext: each a 4-byte length and its bytes) or
    a SaslMessage (tag 0xEA, the app id, the token) written apart from its RPC header, by those lengths adding up to
    the packet exactly; returns their (flow, direction, length) keys (:func:`_body_key`)."""
    c = p.cols
    idx, cc = narrow(p, out, (c[0] == _SPARK_AUTH_TAG) | (c[0] == _SPARK_SASL_TAG))
    keep = (p.proto[idx] == _TCP) & (cc[1] == 0) & (cc[2] == 0) & (cc[3] == 0) & (cc[4] <= _APP_ID_MAX)
    idx, s, length, _ = take(p, idx[keep & (p.length[idx] >= 9)])
    if idx.size == 0:
        return np.zeros(0, dtype=np.int64)
    app = s[:, 4].astype(np.int64)
    second = be32_at(s, 5 + app)
    auth = (s[:, 0] == _SPARK_AUTH_TAG) & (second <= _SALT_MAX)
    auth &= 13 + app + second + be32_at(s, 9 + app + second) == length
    sasl = (s[:, 0] == _SPARK_SASL_TAG) & (9 + app + second == length)
    out.assign(idx, np.select([auth, sasl], [Label.SPARK_AUTH, Label.SPARK_SASL], 0).astype(np.int64))
    found = auth | sasl
    return _body_key(p.flow[idx[found]], p.forward[idx[found]], length[found])


def _body_key(flow: I64, forward: Bool, size: I64) -> I64:
    """(flow, direction, body size) as one integer; ``key // _KEY_FLOW`` is the flow."""
    return np.asarray(flow * _KEY_FLOW + forward.astype(np.int64) * (1 << 32) + size, dtype=np.int64)


__all__ = ["hadoop_rpc", "hdfs_data", "spark"]
