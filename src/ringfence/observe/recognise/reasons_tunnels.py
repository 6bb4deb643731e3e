"""The words of the verdicts for a tunnel's own packets: GRE, PPTP's enhanced GRE and L2TP; and for OpenVPN.

None of these tunnels encrypts. The conversations they carry are flows of their own, judged by what they are;
what stays in the tunnel's flow is its control traffic, and that is readable (and, for PPP, says how the user
authenticated).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from ringfence.observe.recognise.labels import Label
from ringfence.observe.recognise.reasons import ENC, HANDSHAKE, PLAIN, UNKNOWN, Family, Row, Verdict
from ringfence.observe.recognise.reasons import plural as _n

_CARRIED: Final = "the conversations it carries are judged as flows of their own"
_MPPE: Final = (
    "MPPE (RC4 keyed from the MS-CHAP exchange, whose MS-CHAPv2 response falls to an offline DES search) is not "
    "counted as encryption"
)


def _ppp(r: Row) -> list[str]:
    """What the PPP negotiation packets of a flow show, in words (empty if none were sampled)."""
    pap, control, mppe = r.c(Label.PPP_PAP), r.c(Label.PPP_CONTROL), r.c(Label.PPP_MPPE)
    said = []
    if pap:
        said.append(f"{_n(pap, 'PAP message')}: the user name and password in clear")
    if control:
        said.append(f"{_n(control, 'PPP negotiation message')} in clear (LCP, CHAP/EAP, CCP, IPCP: user name, "
                    "challenge and response, addresses)")  # fmt: skip
    if mppe:
        said.append(f"{_n(mppe, 'MPPE-encrypted PPP packet')}")
    return said


def _gre(r: Row) -> Verdict:
    keepalive, opaque, ack = r.c(Label.GRE_KEEPALIVE), r.c(Label.GRE_OPAQUE), r.c(Label.PPTP_ACK)
    ppp = _ppp(r)
    if ppp or ack:
        said = ppp + ([f"{_n(ack, 'acknowledgement')}"] if ack else [])
        text = f"PPTP's PPP in enhanced GRE (RFC 2637): {'; '.join(said)}; {_MPPE}"
        if r.c(Label.PPP_PAP, Label.PPP_CONTROL):
            return PLAIN, "pptp-gre", text
        # only MPPE (or acknowledgements): nothing readable, and nothing that counts as protection
        return UNKNOWN, "pptp-gre", f"{text}; capture from the call's start to see its negotiation"
    if opaque:
        what = f" ({r.detail})" if r.detail else ""
        ka = f", and {_n(keepalive, 'keepalive')}" if keepalive else ""
        return (
            UNKNOWN,
            "gre",
            (
                f"GRE: {_n(opaque, 'packet')} of a protocol type ringfence does not decode, or cut short{what}{ka}; "
                "GRE neither encrypts nor authenticates (its key is an identifier), so what they carry is unproven"
            ),
        )
    return (
        PLAIN,
        "gre",
        (
            f"GRE: {_n(keepalive, 'keepalive')} in clear; GRE (RFC 2784) neither encrypts nor authenticates (its key "
            f"is an identifier): {_CARRIED}"
        ),
    )


def _l2tp(r: Row) -> Verdict:
    control = r.c(Label.L2TP_CONTROL)
    said = ([f"{_n(control, 'control message')} in clear (host names, tunnel and session ids; hidden AVPs are "
             "only MD5-obscured)"] if control else []) + _ppp(r)  # fmt: skip
    tail = f"; L2TP does not encrypt (L2TP/IPsec would show as ESP): {_CARRIED}"
    if r.c(Label.L2TP_CONTROL, Label.PPP_PAP, Label.PPP_CONTROL):
        mppe = f"; {_MPPE}" if r.c(Label.PPP_MPPE) else ""
        return PLAIN, "l2tp", f"L2TPv2: {'; '.join(said)}{mppe}{tail}"
    return UNKNOWN, "l2tp", f"L2TPv2: {'; '.join(said)}; {_MPPE}{tail}"


def _openvpn(r: Row) -> Verdict:
    plain, auth, crypt = r.c(Label.OVPN_RESET), r.c(Label.OVPN_RESET_AUTH), r.c(Label.OVPN_RESET_CRYPT)
    control, data, clear = r.c(Label.OVPN_CONTROL), r.c(Label.OVPN_DATA), r.c(Label.OVPN_CLEAR)
    how = "; ".join(
        ([f"{_n(crypt, 'reset')} under tls-crypt (control channel encrypted and authenticated)"] if crypt else [])
        + ([f"{_n(auth, 'reset')} under tls-auth (an HMAC on every control packet)"] if auth else [])
        + ([f"{_n(plain, 'reset')} without tls-auth/tls-crypt"] if plain else [])
    )
    lead = f"OpenVPN: {how}" + (f", {_n(control, 'control/ack packet')} (the control channel's TLS)" if control else "")
    if clear:
        return (
            PLAIN,
            "openvpn",
            f"{lead}; {_n(clear, 'data packet')} holding a whole IP packet or the keepalive ping in clear "
            "(--cipher none): the tunnelled traffic is readable",
        )
    if data:
        return (
            ENC,
            "openvpn",
            f"{lead}; {_n(data, 'data packet')} (P_DATA: the cipher negotiated inside the TLS control channel, not "
            "visible — the old default BF-CBC is a 64-bit block cipher); no tunnelled IP packet in clear",
        )
    return HANDSHAKE, "openvpn", f"{lead}; no data packet sampled{r.sample_note()}"


#: Handlers of the families worded here; :mod:`.verdict` joins them with the others.
TUNNEL_HANDLERS: Final[dict[Family, Callable[[Row], Verdict]]] = {
    Family.GRE: _gre,
    Family.L2TP: _l2tp,
    Family.OPENVPN: _openvpn,
}

__all__ = ["TUNNEL_HANDLERS"]
