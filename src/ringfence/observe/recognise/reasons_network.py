"""The words of the verdicts for the network's control plane (HSRP, VRRP, BGP, BFD, OSPF, IGMP, PIM) and for IPsec AH,
which protects it where anything does."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from ringfence.observe.recognise.labels import Label
from ringfence.observe.recognise.reasons import ENC, INTEG, PLAIN, Family, Row, Verdict
from ringfence.observe.recognise.reasons import plural as _n


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


def _bfd(r: Row) -> Verdict:
    none, simple, keyed = r.c(Label.BFD_NOAUTH), r.c(Label.BFD_SIMPLE), r.c(Label.BFD_KEYED)
    weak = []
    if none:
        weak.append(f"{_n(none, 'control packet')} without authentication")
    if simple:
        weak.append(f"{_n(simple, 'control packet')} with a simple password in clear")
    if weak:
        return (
            PLAIN,
            "bfd",
            f"BFD: {'; '.join(weak)}; a forged Down tears the BGP/OSPF session it guards down, and its routes with it",
        )
    return (
        INTEG,
        "bfd",
        f"BFD: {_n(keyed, 'control packet')} with keyed MD5/SHA1 authentication: a forged packet is refused, the "
        "session state is readable",
    )


def _ospf(r: Row) -> Verdict:
    null, simple = r.c(Label.OSPF_NULL), r.c(Label.OSPF_SIMPLE)
    crypto, v3 = r.c(Label.OSPF_CRYPTO), r.c(Label.OSPF3)
    weak = []
    if simple:
        weak.append(f"{_n(simple, 'packet')} with a simple password in clear (AuType 1)")
    if null:
        weak.append(f"{_n(null, 'packet')} without authentication (AuType 0)")
    if v3:
        weak.append(
            f"{_n(v3, 'OSPFv3 packet')} in clear; OSPFv3 authenticates with IPsec (the flow would be AH or ESP) "
            "or a trailer after the packet, not visible here"
        )
    if weak:
        return PLAIN, "ospf", f"OSPF: {'; '.join(weak)}; the topology is readable and forged routes would be taken"
    return (
        INTEG,
        "ospf",
        (
            f"OSPF: {_n(crypto, 'packet')} with cryptographic authentication (AuType 2, a keyed digest after the "
            "packet): forged routes are refused, the topology is readable"
        ),
    )


def _igmp(r: Row) -> Verdict:
    return (
        PLAIN,
        "igmp",
        (
            f"IGMP: {_n(r.c(Label.IGMP), 'message')} in clear (which multicast groups this host joins or leaves); "
            "IGMP has no authentication"
        ),
    )


def _pim(r: Row) -> Verdict:
    return (
        PLAIN,
        "pim",
        (
            f"PIM: {_n(r.c(Label.PIM), 'message')} in clear (multicast routing: neighbours, joins, rendezvous "
            "points); PIM authenticates only with IPsec (RFC 5796), which would make the flow AH or ESP"
        ),
    )


def _ah(r: Row) -> Verdict:
    plain, esp = r.c(Label.AH), r.c(Label.AH_ESP)
    spi = f", {r.detail}" if r.detail else ""
    if plain:
        also = f" ({esp} more carry ESP inside)" if esp else ""
        return (
            INTEG,
            "ah",
            (
                f"IPsec AH (RFC 4302){spi}: {_n(plain, 'packet')} authenticated by an ICV{also}; AH does not encrypt — "
                "the packet it protects follows in clear; NOT confidential"
            ),
        )
    return ENC, "ah", f"IPsec AH (RFC 4302){spi} with ESP inside: {_n(esp, 'packet')} authenticated and encrypted"


#: Handlers of the families worded here; :mod:`.verdict` joins them with the others.
NETWORK_HANDLERS: Final[dict[Family, Callable[[Row], Verdict]]] = {
    Family.HSRP: _hsrp,
    Family.VRRP: _vrrp,
    Family.BGP: _bgp,
    Family.BFD: _bfd,
    Family.OSPF: _ospf,
    Family.IGMP: _igmp,
    Family.PIM: _pim,
    Family.AH: _ah,
}

__all__ = ["NETWORK_HANDLERS"]
