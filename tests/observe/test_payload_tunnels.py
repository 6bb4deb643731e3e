"""A tunnel's own packets, built to their specifications: GRE keepalives and undecoded protocol types, PPTP's
enhanced GRE (acknowledgements, PPP negotiation, MPPE) and L2TPv2 control messages; and tcpdump's captures."""

from __future__ import annotations

import random
import struct
from pathlib import Path

import pytest
from payload_build import Flow, verdict

from ringfence.observe.flows.pcap import PcapReader

RNG = random.Random(1203)
CAPTURES = Path(__file__).resolve().parents[2].parent / "shared" / "captures" / "tcpdump-tests"


def rand(n: int) -> bytes:
    return RNG.randbytes(n)


def gre0(ptype: int, payload: bytes = b"", key: int | None = 0x28) -> bytes:
    """GRE version 0 (RFC 2784; the RFC 2890 key where given)."""
    return struct.pack(">BBH", 0x20 if key is not None else 0, 0, ptype) + (
        struct.pack(">I", key) if key is not None else b""
    ) + payload  # fmt: skip


def pptp(ppp: bytes, *, ack: bool = False, seq: bool = True) -> bytes:
    """Enhanced GRE (RFC 2637 §4.1): key bit, sequence and acknowledgement where asked, version 1, 0x880B."""
    head = struct.pack(">BBHHH", 0x20 | (0x10 if seq else 0), 0x01 | (0x80 if ack else 0), 0x880B, len(ppp), 9)
    return head + (struct.pack(">I", 5) if seq else b"") + (struct.pack(">I", 4) if ack else b"") + ppp


def ppp_control(protocol: int, code: int, data: bytes = b"", *, address: bool = True) -> bytes:
    """A PPP negotiation packet (RFC 1661 §5): code, identifier, length, data."""
    return (b"\xff\x03" if address else b"") + struct.pack(">HBBH", protocol, code, 1, 4 + len(data)) + data


def l2tp_control(avps: bytes) -> bytes:
    """An L2TPv2 control message (RFC 2661 §3.1): T, L and S set, version 2, ids, Ns and Nr."""
    return struct.pack(">BBHHHHH", 0xC8, 0x02, 12 + len(avps), 3, 0, 0, 0) + avps


def l2tp_data(ppp: bytes) -> bytes:
    return struct.pack(">BBHHH", 0x40, 0x02, 8 + len(ppp), 3, 4) + ppp


SCCRQ = struct.pack(">HHHH", 0x8008, 0, 0, 1) + struct.pack(">HHH", 0x8008, 0, 2) + b"\x01\x00"
GRE = {"proto": 47, "sport": -1, "dport": -1}


def test_gre_keepalives_are_plaintext_and_an_undecoded_protocol_type_is_unknown_and_named() -> None:
    got = verdict(Flow(**GRE).fwd(gre0(0), gre0(0)).back(gre0(0)))
    assert got[:2] == ("plaintext", "gre") and "3 keepalives" in got[2]
    cdp = gre0(0x2000, b"\x02\xb4" + rand(40))
    got = verdict(Flow(**GRE).fwd(cdp, gre0(0)))
    assert got[:2] == ("unknown", "gre") and "protocol type 0x2000" in got[2] and "1 keepalive" in got[2]


@pytest.mark.parametrize(
    "payload",
    [
        b"\x20\x00\x00\x00\x00\x00\x00",  # the key the flags announce is cut short
        b"\x28\x00\x00\x00" + bytes(4),  # reserved bits (RFC 2784 Reserved0)
        b"\x40\x00\x00\x00" + bytes(8),  # RFC 1701 routing
        b"\x00\x02\x00\x00",  # version 2 does not exist
    ],
)
def test_gre_needs_its_exact_header(payload: bytes) -> None:
    assert verdict(Flow(**GRE).fwd(payload))[1] != "gre"


def test_pptp_negotiation_is_plaintext_pap_names_its_password_and_mppe_alone_is_unknown() -> None:
    lcp = ppp_control(0xC021, 1, b"\x03\x05\xc2\x23\x81")  # Configure-Request: authenticate with MS-CHAPv2
    chap = ppp_control(0xC223, 2, b"\x31" + rand(49), address=False)
    got = verdict(Flow(**GRE).fwd(pptp(lcp), pptp(chap)).back(pptp(b"", ack=True, seq=False)))
    assert got[:2] == ("plaintext", "pptp-gre")
    assert "2 PPP negotiation messages" in got[2] and "1 acknowledgement" in got[2] and "MPPE" in got[2]
    pap = ppp_control(0xC023, 1, b"\x04user\x06secret")
    got = verdict(Flow(**GRE).fwd(pptp(pap)))
    assert got[:2] == ("plaintext", "pptp-gre") and "password in clear" in got[2]
    mppe = b"\xfd\x90\x01" + rand(60)  # compressed protocol field, MPPE header with D (encrypted) set
    got = verdict(Flow(**GRE).fwd(pptp(mppe), pptp(b"\x00" + mppe)))
    assert got[:2] == ("unknown", "pptp-gre") and "not counted as encryption" in got[2]


@pytest.mark.parametrize(
    "payload",
    [
        pptp(ppp_control(0xC021, 1))[:4] + b"\x00\x09" + pptp(ppp_control(0xC021, 1))[6:],  # length ≠ the payload
        pptp(ppp_control(0xC021, 14)),  # LCP has no code 14
        pptp(ppp_control(0xC021, 1))[:-2] + b"\x00\x05",  # not a PPP length: the packet ends elsewhere
        pptp(b"\xfd\x80\x01" + rand(20)),  # MPPE header without its encrypted bit
        b"\x30\x00" + pptp(ppp_control(0xC021, 1))[2:],  # version 0 with PPTP's fields
        pptp(ppp_control(0xC021, 1), seq=False),  # a payload without a sequence number
    ],
)
def test_pptp_needs_its_exact_framing(payload: bytes) -> None:
    assert verdict(Flow(**GRE).fwd(payload))[1] not in {"pptp-gre"}


def test_l2tp_control_messages_and_session_negotiation_are_plaintext() -> None:
    zlb = l2tp_control(b"")
    got = verdict(Flow(proto=17, sport=1701, dport=1701).fwd(l2tp_control(SCCRQ)).back(zlb))
    assert got[:2] == ("plaintext", "l2tp") and "2 control messages" in got[2] and "ESP" in got[2]
    got = verdict(Flow(proto=17, sport=40000, dport=1701).fwd(l2tp_data(ppp_control(0xC223, 1, b"\x10" + rand(20)))))
    assert got[:2] == ("plaintext", "l2tp") and "1 PPP negotiation message" in got[2]


@pytest.mark.parametrize(
    "payload",
    [
        l2tp_control(SCCRQ)[:2] + b"\x00\x30" + l2tp_control(SCCRQ)[4:],  # length ≠ the datagram
        b"\xc0\x02" + l2tp_control(SCCRQ)[2:],  # a control message without Ns/Nr
        l2tp_control(struct.pack(">HHHH", 0x8008, 0, 7, 1)),  # the first AVP is not the Message Type
        b"\xc8\x03" + l2tp_control(SCCRQ)[2:],  # version 3 is not L2TPv2
        l2tp_data(ppp_control(0xC021, 1))[:-1],  # PPP length past the datagram's end
    ],
)
def test_l2tp_needs_its_exact_header(payload: bytes) -> None:
    assert verdict(Flow(proto=17, sport=1701, dport=1701).fwd(payload))[1] != "l2tp"


def test_l2tp_is_only_read_on_its_port() -> None:
    assert verdict(Flow(proto=17, sport=40000, dport=1702).fwd(l2tp_control(SCCRQ)))[1] != "l2tp"


def test_tcpdump_captures_of_gre_control_traffic() -> None:
    flows = PcapReader().read(CAPTURES / "various_gre.pcap").flows.to_pylist()
    gre = sorted((r["packets"], r["protection"], r["protocol"]) for r in flows if r["proto"] == 47)
    # 8 keepalive replies inside Cisco MetaData, and the outer tunnel's 8 keepalives and 2 CDP announcements
    assert gre == [(8, "plaintext", "gre"), (10, "unknown", "gre")]
    (cdp,) = [r for r in flows if r["proto"] == 47 and r["packets"] == 10]
    assert "protocol type 0x2000" in cdp["reason"]
    # the ICMP echo exchange tagged with a security group tag, inside GRE
    (icmp,) = [r for r in flows if r["proto"] == 1]
    tunnel = "gre 10.172.64.6→10.172.64.7 key 0x28"
    assert (icmp["packets"], icmp["protection"], icmp["outer"]) == (10, "plaintext", tunnel)
    # and the PIM hellos beside it (their checksums are valid)
    assert sorted((r["protection"], r["protocol"]) for r in flows if r["proto"] == 103) == [("plaintext", "pim")] * 2
    pptp_flows = PcapReader().read(CAPTURES / "pptp.pcap").flows.to_pylist()
    (lcp,) = [r for r in pptp_flows if r["proto"] == 47]
    assert (lcp["protection"], lcp["protocol"]) == ("plaintext", "pptp-gre")
