"""Recognisers for consoles and application databases: Telnet, VNC (RFB) and MongoDB.

BMCs' and switches' consoles still speak Telnet, and a BMC's remote KVM is usually VNC; MongoDB holds the
metadata of many ML platforms. Each is plaintext unless it runs inside TLS (which the TLS rules then judge).
"""

from __future__ import annotations

from typing import Final

import numpy as np

from ringfence.observe.recognise._bytes import (
    HEAD,
    U8,
    Bool,
    Labeller,
    Packets,
    at,
    is_digit,
    le,
    on_ports,
    select,
    table,
)
from ringfence.observe.recognise.labels import Label

_TCP: Final = 6
TELNET_PORT: Final = 23
_IAC: Final = 0xFF
_SB: Final = 0xFA
_SE: Final = 0xF0
#: Telnet option codes in the IANA registry (0-49, 138-140) and EXOPL (255).
_TELNET_OPTIONS: Final = table([*range(50), 138, 139, 140, 255])
_RFB_BANNER: Final = 12
_VNC_CHALLENGE: Final = 16
#: MongoDB wire protocol opcodes: OP_REPLY, OP_UPDATE, OP_INSERT, OP_QUERY, OP_GET_MORE, OP_DELETE,
#: OP_KILL_CURSORS, OP_COMPRESSED, OP_MSG.
_MONGO_OPS: Final = (1, 2001, 2002, 2004, 2005, 2006, 2007, 2012, 2013)
_OP_MSG: Final = 2013
_OP_COMPRESSED: Final = 2012
_MONGO_HEADER: Final = 16
_MONGO_MAX: Final = 48_000_000  # maxMessageSizeBytes
_OP_MSG_FLAGS: Final = 0x00010003  # checksumPresent, moreToCome, exhaustAllowed


def _negotiation(s: U8, pos: int) -> Bool:
    """Rows with a Telnet WILL/WONT/DO/DONT (IAC, 251-254, a registered option) at byte ``pos``."""
    return np.asarray((s[:, pos] == _IAC) & (s[:, pos + 1] >= 0xFB) & _TELNET_OPTIONS[s[:, pos + 2]])


def telnet(p: Packets, out: Labeller) -> None:
    """Telnet option negotiation (RFC 854, 855): a packet that starts with IAC and a WILL/WONT/DO/DONT of a
    registered option, or a subnegotiation (IAC SB option … IAC SE) that ends the packet inside the head. On
    TCP 23 one command is enough; elsewhere the packet must be two or more negotiations and nothing else."""
    c = p.cols
    idx, s, length, v = select(p, out, (p.proto == _TCP) & (c[0] == _IAC) & (c[1] >= _SB) & (p.length >= 3))
    if idx.size == 0:
        return
    on_port = on_ports(p, idx, (TELNET_PORT,)) & (
        _negotiation(s, 0)
        | ((s[:, 1] == _SB) & _TELNET_OPTIONS[s[:, 2]] & (length == v) & (at(s, length - 2) == _IAC)
           & (at(s, length - 1) == _SE))
    )  # fmt: skip
    whole = (length >= 6) & (length % 3 == 0) & (length <= HEAD)
    for pos in range(0, HEAD - 2, 3):
        whole &= (pos >= length) | _negotiation(s, pos)
    out.assign(idx, np.where(on_port | whole, Label.TELNET, 0).astype(np.int64))


def rfb(p: Packets, out: Labeller) -> None:
    """VNC's RFB (RFC 6143 §7.1.1): the 12-byte ProtocolVersion ``RFB xxx.yyy\\n``; in a flow that has one,
    the 16-byte packets are VNC authentication's DES challenge and response (§7.2.2), so their random bytes are
    not taken for unrecognised ciphertext."""
    c = p.cols
    cand = (p.proto == _TCP) & (p.length == _RFB_BANNER) & (c[0] == 0x52) & (c[1] == 0x46) & (c[2] == 0x42)
    idx, s, _, _ = select(p, out, cand & (c[3] == 0x20) & (c[7] == 0x2E) & (c[11] == 0x0A))
    if idx.size == 0:
        return
    digits = np.all(is_digit(s[:, [4, 5, 6, 8, 9, 10]]), axis=1)
    out.assign(idx, np.where(digits, Label.RFB, 0).astype(np.int64))
    flows = p.flow[idx[digits]]
    if flows.size:
        rows = np.flatnonzero((p.length == _VNC_CHALLENGE) & out.free & np.isin(p.flow, flows))
        out.assign(rows, np.full(rows.size, Label.VNC_AUTH, np.int64))


def mongodb(p: Packets, out: Labeller) -> None:
    """The MongoDB wire protocol over TCP: a little-endian header (messageLength 16 bytes to 48 MB, requestID,
    responseTo, a defined opCode); an OP_MSG's flag bits within checksumPresent/moreToCome/exhaustAllowed and
    its first section kind 0 or 1; an OP_COMPRESSED's compressor 0-3 (noop, snappy, zlib, zstd)."""
    c = p.cols
    cand = (p.proto == _TCP) & (c[14] == 0) & (c[15] == 0) & (p.length >= _MONGO_HEADER)
    idx, s, _, v = select(p, out, cand)
    if idx.size == 0:
        return
    size, op = le(s, 0, 4), le(s, 12, 4)
    ok = np.isin(op, _MONGO_OPS) & (size >= _MONGO_HEADER) & (size <= _MONGO_MAX)
    msg = op == _OP_MSG
    ok &= ~msg | ((size >= 21) & (v >= 21) & ((le(s, 16, 4) & ~_OP_MSG_FLAGS) == 0) & (s[:, 20] <= 1))
    comp = op == _OP_COMPRESSED
    ok &= ~comp | ((v >= 25) & np.isin(le(s, 16, 4), _MONGO_OPS) & (s[:, 24] <= 3))
    out.assign(idx, np.where(ok, Label.MONGODB, 0).astype(np.int64))


__all__ = ["TELNET_PORT", "mongodb", "rfb", "telnet"]
