"""The words of the verdicts for consoles and application databases: Telnet, VNC (RFB) and MongoDB."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from ringfence.observe.recognise.labels import Kind, Label
from ringfence.observe.recognise.reasons import PLAIN, UNKNOWN, Family, Row, Verdict
from ringfence.observe.recognise.reasons import plural as _n


def _telnet(r: Row) -> Verdict:
    return (
        PLAIN,
        "telnet",
        (
            f"Telnet: {_n(r.c(Label.TELNET), 'option negotiation')} in clear; everything typed, the login's "
            "password included, crosses in clear (SSH would show its banner)"
        ),
    )


def _vnc(r: Row) -> Verdict:
    auth = r.c(Label.VNC_AUTH)
    how = (
        f"VNC authentication ({_n(auth, 'challenge/response packet')}: DES keyed with the password, crackable "
        "offline from the capture)"
        if auth
        else "no VNC authentication challenge sampled (security type None, or another)"
    )
    high = r.generic[Kind.HIGH]
    if high:
        return (
            UNKNOWN,
            "vnc",
            (
                f"VNC (RFB) without TLS: {how}; then {_n(high, 'high-entropy packet')} no rule reads (RealVNC's RA2 "
                "encryption, or compressed framebuffer data): not proven either way"
            ),
        )
    return (
        PLAIN,
        "vnc",
        (
            f"VNC (RFB) without TLS: {how}; the framebuffer and keystrokes cross in clear — VeNCrypt or "
            "AnonTLS would show TLS records"
        ),
    )


def _mongodb(r: Row) -> Verdict:
    return (
        PLAIN,
        "mongodb",
        (
            f"MongoDB wire protocol: {_n(r.c(Label.MONGODB), 'message')} in clear (BSON commands and documents; "
            "SCRAM proves the password without sending it, the data stays readable; OP_COMPRESSED is not "
            "encryption); with TLS the flow is TLS"
        ),
    )


#: Handlers of the families worded here; :mod:`.verdict` joins them with the others.
APP_HANDLERS: Final[dict[Family, Callable[[Row], Verdict]]] = {
    Family.TELNET: _telnet,
    Family.VNC: _vnc,
    Family.MONGODB: _mongodb,
}

__all__ = ["APP_HANDLERS"]
