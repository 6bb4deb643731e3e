"""Recogniser for OpenVPN (UDP, or TCP behind a 2-byte length; any port, 1194 by default): the remote-access
VPN in front of many clusters' bastions and management networks.

A session opens with hard-reset control packets (``ssl_pkt.h``: opcode in the top 5 bits, key id in the low 3)
that carry a session id and, in clear, an empty acknowledgement array and message packet id 0 — or, under
``--tls-auth``, an HMAC, a replay packet id and a timestamp first; under ``--tls-crypt``, the packet id and
timestamp then a 32-byte tag over an encrypted rest. In a flow that opened so, control/ack packets are the TLS
handshake of the control channel and data packets (P_DATA_V1/V2) the data channel; a data packet whose body is
an IP packet (or the keepalive ping's magic) at one of the offsets ``--cipher none`` leaves it at is the tunnelled
traffic in clear.
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
    be16_at,
    be32_at,
    match_at,
    narrow,
    table,
    take,
)
from ringfence.observe.recognise.labels import Label

_TCP: Final = 6
_UDP: Final = 17
_RESET_CLIENT_V2: Final = 7
_RESET_SERVER_V2: Final = 8
_RESET_CLIENT_V3: Final = 10  # tls-crypt-v2: the wrapped client key follows
#: First bytes of a hard reset: its opcode and any key id.
_RESET_OPS: Final = table([op << 3 | key for op in (_RESET_CLIENT_V2, _RESET_SERVER_V2, _RESET_CLIENT_V3)
                           for key in range(8)])  # fmt: skip
_CONTROL: Final = (3, 4, 5, 11)  # SOFT_RESET_V1, CONTROL_V1, ACK_V1, CONTROL_WKC_V1
_DATA_V1: Final = 6
_DATA_V2: Final = 9
_SESSION: Final = 9  # opcode and the 8-byte session id
_HMACS: Final = (20, 32)  # tls-auth's HMAC-SHA1 (the default) and HMAC-SHA256, whose fields lie inside the head
_TAG: Final = 32  # tls-crypt's HMAC-SHA256 tag
_TS_MIN: Final = 1_400_000_000  # a replay timestamp (seconds since 1970) no earlier than 2014
_PID_MAX: Final = 255  # a reset is among a session's first packets: its replay packet id is small
#: Where ``--cipher none`` leaves the tunnelled IP packet in a data packet's body, after the opcode (and P_DATA_V2's
#: 3-byte peer id): nothing, a 4-byte packet id, or a packet id after an HMAC-SHA1/SHA256; each also with the
#: one-byte compression header before the packet.
_CLEAR_OFFSETS: Final = (0, 4, 24, 36)
#: The payload of OpenVPN's keepalive ping (``ping.c``), sent every --ping seconds through the data channel: a data
#: packet that carries it readable is not encrypted.
_PING: Final = bytes.fromhex("2a187bf3641eb4cb07ed2d0a981fc748")


def _ip_at(s: U8, pos: I64, size: I64) -> Bool:
    """Rows holding an IPv4 (IHL 5) or IPv6 header at ``pos`` whose length is exactly the ``size`` bytes left."""
    v4 = (at(s, pos) == 0x45) & (be16_at(s, pos + 2) == size)
    v6 = ((at(s, pos) >> 4) == 6) & (be16_at(s, pos + 4) + 40 == size)
    return np.asarray(v4 | v6)


def _resets(s: U8, base: int, length: I64) -> tuple[Bool, Bool, Bool]:
    """(plain, tls-auth, tls-crypt) hard-reset layouts, for rows whose opcode is a hard reset."""
    k = s.shape[0]
    server = (s[:, base] >> 3) == _RESET_SERVER_V2
    acked = server.astype(np.int64)  # the server acknowledges the client's reset: one packet id, 0

    def acks(pos: I64) -> Bool:
        # the ack array's length, its packet id 0 and the peer's session id (server), then message packet id 0
        ok = (at(s, pos) == acked) & (~server | (be32_at(s, pos + 1) == 0))
        return np.asarray(ok & (be32_at(s, pos + 1 + 12 * acked) == 0))

    pos = np.full(k, base + _SESSION, dtype=np.int64)
    plain = acks(pos)
    auth = np.zeros(k, dtype=np.bool_)
    for hmac in _HMACS:
        pid, ts = be32_at(s, pos + hmac), be32_at(s, pos + hmac + 4)
        auth |= (pid >= 1) & (pid <= _PID_MAX) & (ts >= _TS_MIN) & acks(pos + hmac + 8)
    pid, ts = be32_at(s, pos), be32_at(s, pos + 4)
    crypt = (pid >= 1) & (pid <= _PID_MAX) & (ts >= _TS_MIN) & (length >= base + _SESSION + 8 + _TAG + 5)
    return plain, auth & ~plain, crypt & ~plain & ~auth


def openvpn(p: Packets, out: Labeller) -> None:
    """OpenVPN hard resets (plain, tls-auth or tls-crypt layouts), then in their flows the control, ack and data
    packets; data packets that hold a whole IP packet in clear are labelled apart."""
    c = p.cols
    proven = []
    for base in (0, 2):
        idx, cc = narrow(p, out, _RESET_OPS[c[base]])
        rows = (p.proto[idx] == _UDP) if base == 0 else (p.proto[idx] == _TCP) & _framed(cc, p.length[idx])
        idx, s, length, _ = take(p, idx[rows & (p.length[idx] >= base + 14)])
        # a cheap gate before the layouts: byte 9 (an ack count, or a small packet id's high byte) or the high bytes
        # of tls-auth's packet id after either HMAC are zero-ish
        pid = base + _SESSION
        gate = s[:, pid] <= 1
        for hmac in _HMACS:
            gate |= (s[:, pid + hmac] == 0) & (s[:, pid + hmac + 1] == 0) & (s[:, pid + hmac + 2] == 0)
        idx, s, length = idx[gate], s[gate], length[gate]
        if idx.size == 0:
            continue
        plain, auth, crypt = _resets(s, base, length)
        codes = np.select([plain, auth, crypt], [Label.OVPN_RESET, Label.OVPN_RESET_AUTH, Label.OVPN_RESET_CRYPT], 0)
        out.assign(idx, codes.astype(np.int64))
        proven.append(p.flow[idx[codes > 0]])
    flows = np.concatenate(proven) if proven else np.zeros(0, dtype=np.int64)
    if flows.size == 0:
        return
    in_flows = np.isin(p.flow, flows)
    for base in (0, 2):
        idx, cc = narrow(p, out, in_flows)
        rows = (p.proto[idx] == _UDP) if base == 0 else (p.proto[idx] == _TCP) & _framed(cc, p.length[idx])
        idx, s, length, _ = take(p, idx[rows & (p.length[idx] >= base + 2)])
        if idx.size == 0:
            continue
        op = s[:, base] >> 3
        data = (op == _DATA_V1) | (op == _DATA_V2)
        body = np.where(op == _DATA_V2, base + 4, base + 1).astype(np.int64)
        clear = np.zeros(idx.size, dtype=np.bool_)
        for offset in _CLEAR_OFFSETS:
            for comp in (0, 1):
                start = body + offset + comp
                clear |= data & _ip_at(s, start, length - start)
            clear |= data & match_at(s, body + offset, _PING)
        codes = np.select(
            [clear, data, np.isin(op, _CONTROL)], [Label.OVPN_CLEAR, Label.OVPN_DATA, Label.OVPN_CONTROL], 0
        )
        out.assign(idx, codes.astype(np.int64))


def _framed(cc: U8, length: I64) -> Bool:
    """Rows whose first two bytes are the length of the rest: OpenVPN's framing over TCP."""
    return np.asarray(((cc[0].astype(np.int64) << 8) | cc[1]) == length - 2)


__all__ = ["openvpn"]
