"""Recognisers for message transports at the start of their streams: ZeroMQ's ZMTP and AMQP.

ZeroMQ carries the control and data planes of many inference and pipeline stacks, AMQP (RabbitMQ) their job
queues. Each states at its first bytes how it is protected: ZMTP 3.x names its security mechanism in the
greeting, AMQP 1.0 names whether TLS or SASL comes next.
"""

from __future__ import annotations

from typing import Final

import numpy as np

from ringfence.observe.recognise._bytes import I64, U8, Labeller, Packets, select
from ringfence.observe.recognise.labels import Label

_TCP: Final = 6
#: ZMTP 3.x security mechanisms (RFC 23 §2.4: 20 bytes, the name padded with zeros) and their labels.
_ZMTP_MECHANISMS: Final = (
    (b"NULL", Label.ZMTP_NULL),
    (b"PLAIN", Label.ZMTP_PLAIN),
    (b"CURVE", Label.ZMTP_CURVE),
    (b"GSSAPI", Label.ZMTP_GSSAPI),
)
_ZMTP_GREETING: Final = 64
_AMQP: Final = b"AMQP"


def _mechanism_rest(s: U8, v: I64, at: int) -> I64:
    """Label of the greeting's mechanism field at byte ``at`` where the rest of the greeting checks out (the
    as-server byte 0/1, then 31 zero bytes of filler): 0 where it does not."""
    codes = np.zeros(s.shape[0], np.int64)
    end = at + 21 + 31
    if end > s.shape[1]:
        return codes
    tail = (v >= end) & (s[:, at + 20] <= 1) & np.all(s[:, at + 21 : end] == 0, axis=1)
    for name, label in _ZMTP_MECHANISMS:
        field = np.frombuffer(name.ljust(20, b"\x00"), np.uint8)
        codes[tail & np.all(s[:, at : at + 20] == field, axis=1)] = label
    return codes


def zmtp(p: Packets, out: Labeller) -> None:
    """ZMTP 3.x greeting (RFC 23 §2.3): signature 0xFF, 8 bytes of padding, 0x7F; version 3.0/3.1; the
    mechanism; as-server; filler — 64 bytes. libzmq sends it in up to three writes (the signature, the major
    version, the rest), so a segment may also start at the major version or at the minor one; the signature
    alone (10 or 11 bytes) is labelled too, but only a mechanism makes the flow ZMTP."""
    c = p.cols
    tcp = p.proto == _TCP
    idx, s, length, v = select(p, out, tcp & ((c[0] == 0xFF) | (c[0] <= 3)) & (p.length >= 10))
    if idx.size == 0:
        return
    signature = (s[:, 0] == 0xFF) & (s[:, 9] == 0x7F)
    whole = signature & (s[:, 10] == 3) & (s[:, 11] <= 1) & (length >= _ZMTP_GREETING)
    from_major = (s[:, 0] == 3) & (s[:, 1] <= 1) & (length >= _ZMTP_GREETING - 10)
    from_minor = (s[:, 0] <= 1) & (length >= _ZMTP_GREETING - 11)
    codes = np.where(whole, _mechanism_rest(s, v, 12), 0)
    codes = np.where((codes == 0) & from_major, _mechanism_rest(s, v, 2), codes)
    codes = np.where((codes == 0) & from_minor, _mechanism_rest(s, v, 1), codes)
    alone = signature & ((length == 10) | ((length == 11) & (s[:, 10] == 3)))
    codes = np.where((codes == 0) & alone, Label.ZMTP_SIGNATURE, codes)
    out.assign(idx, codes.astype(np.int64))


def amqp(p: Packets, out: Labeller) -> None:
    """AMQP protocol header: ``AMQP`` then 0 0 9 1 (0-9-1), 1 1 8 0 / 1 1 0 9 (0-8, 0-9), or a protocol id
    and 1 0 0 (1.0: id 0 AMQP, 2 TLS next, 3 SASL next)."""
    c = p.cols
    cand = (p.proto == _TCP) & (c[0] == 0x41) & (c[1] == 0x4D) & (c[2] == 0x51) & (c[3] == 0x50)
    idx, s, _, v = select(p, out, cand & (p.length >= 8))
    if idx.size == 0:
        return
    version = s[:, 4:8]
    legacy = np.zeros(idx.size, np.bool_)
    for tail in ((0, 0, 9, 1), (1, 1, 8, 0), (1, 1, 0, 9)):
        legacy |= np.all(version == np.array(tail, np.uint8), axis=1)
    one = (version[:, 1] == 1) & (version[:, 2] == 0) & (version[:, 3] == 0)
    codes = np.select(
        [legacy | (one & (version[:, 0] == 0)), one & (version[:, 0] == 3), one & (version[:, 0] == 2)],
        [Label.AMQP, Label.AMQP_SASL, Label.AMQP_TLS],
        0,
    )
    out.assign(idx, np.where(v >= 8, codes, 0).astype(np.int64))


__all__ = ["amqp", "zmtp"]
