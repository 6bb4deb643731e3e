"""PTPv2 over UDP, built to IEEE 1588-2019: unauthenticated messages are plaintext, messages that all carry an
AUTHENTICATION TLV are integrity-only, and TLVs past the sampled head leave the protection unknown."""

from __future__ import annotations

import struct

import pytest
from payload_build import Flow, verdict

SYNC, DELAY_REQ, FOLLOW_UP, DELAY_RESP, ANNOUNCE, MANAGEMENT = 0x0, 0x1, 0x8, 0x9, 0xB, 0xD
#: Body bytes after the 34-byte header, by messageType (§13.6-13.12).
BODY = {SYNC: 10, DELAY_REQ: 10, FOLLOW_UP: 10, DELAY_RESP: 20, ANNOUNCE: 30, MANAGEMENT: 14}
AUTH = struct.pack(">HH", 0x8009, 22) + bytes([1, 0]) + struct.pack(">I", 7) + bytes(16)  # SPP 1, key 7, 16-byte ICV
PATH_TRACE = struct.pack(">HH", 0x0008, 8) + bytes(8)


def ptp(mtype: int, tlvs: bytes = b"", version: int = 2, size: int | None = None) -> bytes:
    body = BODY[mtype]
    length = 34 + body + len(tlvs) if size is None else size
    header = struct.pack(">BBHBBH8sI10sHBb", mtype, version, length, 0, 0, 0x0200, bytes(8), 0, bytes(range(10)),
                         7, 0, 0)  # fmt: skip
    return header + bytes(body) + tlvs


def event(*payloads: bytes) -> Flow:
    return Flow(proto=17, sport=319, dport=319).fwd(*payloads)


def test_ptp_without_authentication_is_plaintext() -> None:
    got = verdict(event(ptp(SYNC), ptp(DELAY_REQ)))
    assert got[:2] == ("plaintext", "ptp") and "2 messages without an AUTHENTICATION TLV" in got[2]
    # a TLV that is not AUTHENTICATION, read to the message's end, authenticates nothing
    got = verdict(event(ptp(SYNC, PATH_TRACE), ptp(SYNC, AUTH)))
    assert got[:2] == ("plaintext", "ptp") and "1 other authenticated" in got[2]
    got = verdict(Flow(proto=17, sport=40000, dport=320).fwd(ptp(MANAGEMENT, struct.pack(">HHH", 1, 2, 0x2000))))
    assert got[:2] == ("plaintext", "ptp") and "1 management message without an AUTHENTICATION TLV" in got[2]


def test_ptp_authenticated_in_every_message_is_integrity_only() -> None:
    got = verdict(event(ptp(SYNC, AUTH), ptp(DELAY_RESP, AUTH), ptp(FOLLOW_UP, PATH_TRACE + AUTH)))
    assert got[:2] == ("integrity-only", "ptp") and "3 messages" in got[2]


def test_tlvs_past_the_head_leave_ptp_unknown() -> None:
    got = verdict(Flow(proto=17, sport=320, dport=320).fwd(ptp(ANNOUNCE, AUTH)))
    assert got[:2] == ("unknown", "ptp") and "not visible" in got[2]


@pytest.mark.parametrize(
    ("port", "payload"),
    [
        (319, ptp(SYNC, version=1)),  # PTPv1's header is another
        (319, ptp(SYNC, size=43)),  # shorter than a Sync
        (319, ptp(SYNC, size=100)),  # longer than the datagram
        (319, ptp(SYNC) + bytes(8)),  # shorter: the datagram is the message
        (319, bytes([0, 0x22]) + ptp(SYNC)[2:]),  # minorVersionPTP 2
        (319, bytes([0x4, 2]) + ptp(SYNC)[2:]),  # messageType 4 is reserved
        (5319, ptp(SYNC)),  # PTP over UDP is on 319/320
    ],
)
def test_ptp_needs_its_header_on_its_ports(port: int, payload: bytes) -> None:
    assert verdict(Flow(proto=17, sport=40000, dport=port).fwd(payload))[1] != "ptp"
