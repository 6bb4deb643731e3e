"""The words of the verdicts for the network's control plane: HSRP, VRRP and BGP."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from ringfence.observe.recognise.labels import Label
from ringfence.observe.recognise.reasons import INTEG, PLAIN, Family, Row, Verdict, plural

_n = plural


def _hsrp(r: Row) -> Verdict:
    default, text = r.c(Label.HSRP_DEFAULT), r.c(Label.HSRP_TEXT)
    md5, none = r.c(Label.HSRP_MD5), r.c(Label.HSRP_NOAUTH)
    if default or text or none:
        why = []
        if default:
            why.append(f"{_n(default, 'hello')} with the default password \"cisco\"")
        if text:
            why.append(f"{_n(text, 'hello')} with a text password in clear")
        if none:
            why.append(f"{_n(none, 'v2 hello')} without an authentication TLV")
        return (
            PLAIN,
            "hsrp",
            f"HSRP (first-hop redundancy): {'; '.join(why)}; anyone on the segment can take the gateway address",
        )
    return (
        INTEG,
        "hsrp",
        f"HSRP v2: {_n(md5, 'hello')} with MD5 authentication: a forged hello is refused, the group is readable",
    )


def _vrrp(r: Row) -> Verdict:
    text, none = r.c(Label.VRRP_TEXT), r.c(Label.VRRP_NOAUTH)
    why = []
    if text:
        why.append(f"{_n(text, 'advertisement')} with a VRRPv2 text password in clear")
    if none:
        why.append(f"{_n(none, 'advertisement')} without authentication (VRRPv2 type 0, or VRRPv3, which has none)")
    return PLAIN, "vrrp", f"VRRP (first-hop redundancy): {'; '.join(why)}; anyone on the segment can take the address"


def _bgp(r: Row) -> Verdict:
    return (
        PLAIN,
        "bgp",
        (
            f"BGP: {_n(r.c(Label.BGP), 'message')} in clear (OPEN names the AS and router id, UPDATEs the routes); "
            "TCP-MD5 or TCP-AO, where configured, authenticates the session in TCP options the payload does not "
            "show — neither encrypts"
        ),
    )


#: Handlers of the families worded here; :mod:`.verdict` joins them with the others.
NETWORK_HANDLERS: Final[dict[Family, Callable[[Row], Verdict]]] = {
    Family.HSRP: _hsrp,
    Family.VRRP: _vrrp,
    Family.BGP: _bgp,
}

__all__ = ["NETWORK_HANDLERS"]
