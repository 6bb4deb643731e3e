"""The words of the verdicts for message transports: ZeroMQ (ZMTP) and AMQP."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from ringfence.observe.recognise.labels import Label
from ringfence.observe.recognise.reasons import ENC, HANDSHAKE, PLAIN, Family, Row, Verdict
from ringfence.observe.recognise.reasons import plural as _n


def _zmtp(r: Row) -> Verdict:
    null, plain = r.c(Label.ZMTP_NULL), r.c(Label.ZMTP_PLAIN)
    curve, gssapi = r.c(Label.ZMTP_CURVE), r.c(Label.ZMTP_GSSAPI)
    if plain:
        return (
            PLAIN,
            "zeromq",
            "ZeroMQ (ZMTP 3.x) with the PLAIN mechanism: user name and password, then every message, in clear",
        )
    if null:
        return PLAIN, "zeromq", "ZeroMQ (ZMTP 3.x) with the NULL mechanism: no authentication and no encryption"
    if curve:
        return (
            ENC,
            "zeromq",
            (
                f"ZeroMQ (ZMTP 3.x) with the CURVE mechanism in {_n(curve, 'greeting')}: CurveZMQ encrypts and "
                "authenticates every message (Curve25519 keys, XSalsa20-Poly1305)"
            ),
        )
    if gssapi:
        return (
            HANDSHAKE,
            "zeromq",
            "ZeroMQ (ZMTP 3.x) with the GSSAPI mechanism: Kerberos authentication; whether messages are then "
            "wrapped with confidentiality is not visible",
        )
    return HANDSHAKE, "zeromq", "ZeroMQ (ZMTP) signature only; the greeting naming the mechanism is not in the sample"


def _amqp(r: Row) -> Verdict:
    plain, sasl, tls = r.c(Label.AMQP), r.c(Label.AMQP_SASL), r.c(Label.AMQP_TLS)
    if plain or sasl:
        how = "SASL, then AMQP, in clear (SASL PLAIN carries the password)" if sasl else "frames in clear"
        return PLAIN, "amqp", f"AMQP protocol header ({_n(plain + sasl, 'header')}): {how}; AMQPS would show as TLS"
    return (
        HANDSHAKE,
        "amqp",
        f"AMQP 1.0 header asking for TLS ({tls}); the TLS that may follow is not in the sample{r.sample_note()}",
    )


#: Handlers of the families worded here; :mod:`.verdict` joins them with the others.
MESSAGING_HANDLERS: Final[dict[Family, Callable[[Row], Verdict]]] = {
    Family.ZMTP: _zmtp,
    Family.AMQP: _amqp,
}

__all__ = ["MESSAGING_HANDLERS"]
