"""One test (or two: the permitted and the refused reading) per payload rule, on hand-built packets."""

from __future__ import annotations

import random
import struct
import zlib

import numpy as np
import pytest
from payload_build import Flow, build, segments, verdict, verdicts

from ringfence.observe.payload import classify_flows
from ringfence.observe.samples import FlowKeys, PayloadSamples

RNG = random.Random(20240611)


def rand(n: int) -> bytes:
    """Deterministic stand-in for ciphertext."""
    return RNG.randbytes(n)


# --- no payload, contract --------------------------------------------------------------------


def test_flow_without_payload_is_unknown() -> None:
    assert verdict(Flow()) == ("unknown", None, "no payload observed")


def test_no_flows_gives_empty_lists() -> None:
    assert classify_flows(*build([])) == ([], [], [])


def test_reader_contract_violation_is_a_clear_error() -> None:
    keys, samples = build([Flow().fwd(b"x" * 10)])
    bad = PayloadSamples(flow=samples.flow + 5, forward=samples.forward, length=samples.length, head=samples.head)
    with pytest.raises(ValueError, match="outside"):
        classify_flows(keys, bad)
    narrow = PayloadSamples(flow=samples.flow, forward=samples.forward, length=samples.length, head=samples.head[:, :8])
    with pytest.raises(ValueError, match="head has shape"):
        classify_flows(keys, narrow)


# --- SSH -------------------------------------------------------------------------------------


def _ssh_packet(code: int, body: bytes = b"") -> bytes:
    pad = 8 - (5 + len(body) + 1) % 8
    pad += 8 if pad < 4 else 0
    plen = 1 + 1 + len(body) + pad
    return struct.pack(">IBB", plen, pad, code) + body + bytes(pad)


def test_ssh_banner_and_kex_only_is_handshake() -> None:
    flow = Flow(dport=22).fwd(b"SSH-2.0-OpenSSH_9.2\r\n").back(b"SSH-2.0-OpenSSH_9.6\r\n")
    flow.fwd(_ssh_packet(20, b"curve25519-sha256" * 4)).back(_ssh_packet(20, b"ssh-ed25519" * 5))
    assert verdict(flow)[:2] == ("handshake-only", "ssh")


def test_ssh_after_newkeys_is_encrypted() -> None:
    flow = Flow(dport=22).fwd(b"SSH-2.0-OpenSSH_9.2\r\n").back(b"SSH-2.0-OpenSSH_9.6\r\n")
    flow.fwd(_ssh_packet(20, b"kex" * 30), _ssh_packet(30, rand(32)), _ssh_packet(21), rand(52), rand(44))
    protection, protocol, reason = verdict(flow)
    assert (protection, protocol) == ("encrypted", "ssh")
    assert "NEWKEYS" in reason


def _ssh_session_start() -> Flow:
    return Flow(dport=22).fwd(b"SSH-2.0-OpenSSH_9.2\r\n").back(b"SSH-2.0-OpenSSH_9.6\r\n")


def test_ssh_newkeys_hidden_behind_the_reply_is_found_by_length() -> None:
    # The server writes KEX_ECDH_REPLY and NEWKEYS in one segment; NEWKEYS starts past the 64-byte head.
    reply = _ssh_packet(31, rand(600))
    flow = Flow(dport=22).back(b"SSH-2.0-OpenSSH_9.6\r\n", _ssh_packet(20, b"kex" * 30), reply + _ssh_packet(21))
    flow.back(rand(44), rand(1400), rand(1400))  # server-side only: a one-direction capture
    protection, protocol, reason = verdict(flow)
    assert (protection, protocol) == ("encrypted", "ssh")
    assert "NEWKEYS x1" in reason


def test_ssh_gex_group_alone_is_not_newkeys() -> None:
    # KEX_DH_GEX_GROUP is also code 31, but the server then waits: nothing follows it in the segment.
    flow = Flow(dport=22).back(b"SSH-2.0-OpenSSH_9.6\r\n", _ssh_packet(31, rand(300)), rand(300), rand(300))
    assert verdict(flow)[0] == "handshake-only"


def test_ssh_bytes_after_newkeys_in_one_segment_are_encrypted() -> None:
    flow = _ssh_session_start().fwd(_ssh_packet(20, b"kex" * 30), _ssh_packet(21) + rand(44))
    protection, _, reason = verdict(flow)
    assert protection == "encrypted"
    assert "after NEWKEYS" in reason
    # … unless what follows NEWKEYS is itself a cleartext packet: that proves nothing.
    clear = _ssh_session_start().fwd(_ssh_packet(20, b"kex" * 30), _ssh_packet(21) + _ssh_packet(2, b"x" * 20))
    assert verdict(clear)[0] == "handshake-only"


def test_ssh_sample_cut_after_newkeys_uses_the_flow_counters() -> None:
    # The sample ends with the key exchange (every packet of it a cleartext SSH packet); 500 more follow.
    flow = _ssh_session_start().fwd(_ssh_packet(20, b"kex" * 30)).back(_ssh_packet(20, b"kex" * 30))
    flow.fwd(_ssh_packet(30, rand(32))).back(_ssh_packet(31, rand(600)) + _ssh_packet(21))
    flow.extra_payload_packets = 500
    protection, _, reason = verdict(flow)
    assert protection == "encrypted"
    assert "2+ later payload packets" in reason and "not sampled" in reason
    # One later packet may be the client's NEWKEYS: not enough …
    flow.extra_payload_packets = 1
    assert verdict(flow)[0] == "handshake-only"
    # … unless both sides' NEWKEYS were sampled.
    flow.fwd(_ssh_packet(21))
    assert verdict(flow)[0] == "encrypted"


# --- WireGuard -------------------------------------------------------------------------------


def _wg(kind: int, size: int, counter: int = 7) -> bytes:
    if kind == 4:  # receiver index, little-endian 64-bit counter, then ciphertext and tag
        return bytes([4, 0, 0, 0]) + rand(4) + struct.pack("<Q", counter) + rand(size - 16)
    return bytes([kind, 0, 0, 0]) + rand(size - 4)


def test_wireguard_full_mtu_bulk_is_encrypted() -> None:
    # The sample that made the lab's collective class unknown: a bulk tunnel (wireguard-go, MTU 1420)
    # whose first sampled packets are all full size. Padding stops at the MTU: 1420 + 32 = 1452 bytes,
    # not a multiple of 16 — as the kernel's and wireguard-go's padding both do.
    receiver = rand(4)
    bulk = [bytes([4, 0, 0, 0]) + receiver + struct.pack("<Q", 0x258F + i) + rand(1436) for i in range(16)]
    flow = Flow(proto=17, sport=51820, dport=51820, extra_payload_packets=96_000).fwd(*bulk)
    protection, protocol, reason = verdict(flow)
    assert (protection, protocol) == ("encrypted", "wireguard")
    assert "16 transport data messages" in reason


def test_wireguard_transport_needs_a_session_counter() -> None:
    # Type 4 and three zero bytes alone are 4 bytes of evidence; the counter's top bytes pin it.
    fake = [bytes([4, 0, 0, 0]) + rand(1448) for _ in range(16)]
    assert all(any(f[13:16]) for f in fake)
    assert verdict(Flow(proto=17, dport=51820).fwd(*fake))[:2] == ("unknown", None)
    assert verdict(Flow(proto=17, dport=51820).fwd(_wg(4, 32, counter=2**40)))[:2] == ("unknown", None)


def test_wireguard_handshake_then_transport_data() -> None:
    hs = Flow(proto=17, dport=51820).fwd(_wg(1, 148)).back(_wg(2, 92))
    assert verdict(hs)[:2] == ("handshake-only", "wireguard")
    full = Flow(proto=17, dport=51820).fwd(_wg(1, 148)).back(_wg(2, 92)).fwd(_wg(4, 1440), _wg(4, 32))
    protection, protocol, reason = verdict(full)
    assert (protection, protocol) == ("encrypted", "wireguard")
    assert "transport data" in reason


def test_wireguard_needs_its_exact_sizes() -> None:
    wrong = Flow(proto=17, dport=51820).fwd(_wg(1, 150)).back(_wg(2, 90))
    assert verdict(wrong)[0] == "unknown"


# --- QUIC ------------------------------------------------------------------------------------


def _quic_long(first: int, size: int = 1200) -> bytes:
    return bytes([first]) + b"\x00\x00\x00\x01" + b"\x08" + rand(8) + b"\x08" + rand(8) + rand(size - 23)


def test_quic_long_headers_only_is_handshake_then_short_headers_encrypted() -> None:
    hs = Flow(proto=17, dport=443).fwd(_quic_long(0xC3)).back(_quic_long(0xC1, 180), _quic_long(0xE1, 900))
    assert verdict(hs)[:2] == ("handshake-only", "quic")
    full = Flow(proto=17, dport=443).fwd(_quic_long(0xC3)).back(_quic_long(0xE1, 900))
    full.fwd(bytes([0x47]) + rand(60), bytes([0x5A]) + rand(300))
    assert verdict(full)[:2] == ("encrypted", "quic")


# --- IPsec -----------------------------------------------------------------------------------


def _ipv4(payload_len: int) -> bytes:
    return struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + payload_len, 1, 0, 64, 1, 0, b"\n\0\0\1", b"\n\0\0\2")


def test_esp_with_opaque_payload_is_encrypted() -> None:
    flow = Flow(proto=50, sport=-1, dport=-1).fwd(
        *(b"\x12\x34\x56\x78" + struct.pack(">I", i) + rand(120) for i in range(1, 5))
    )
    protection, protocol, reason = verdict(flow)
    assert (protection, protocol) == ("encrypted", "esp")
    assert "SPI 0x12345678" in reason


def test_esp_null_encryption_is_integrity_only() -> None:
    inner = _ipv4(64) + b"\x08\x00" + bytes(62)
    flow = Flow(proto=50, sport=-1, dport=-1).fwd(b"\x00\x00\x10\x01\x00\x00\x00\x01" + inner + rand(14))
    protection, protocol, reason = verdict(flow)
    assert (protection, protocol) == ("integrity-only", "esp")
    assert "NOT confidential" in reason


def test_esp_with_reserved_spi_is_unknown() -> None:
    flow = Flow(proto=50, sport=-1, dport=-1).fwd(b"\x00\x00\x00\x07" + rand(100))
    assert verdict(flow)[:2] == ("unknown", "esp")


def _ike(exchange: int = 34, version: int = 0x20, size: int = 300) -> bytes:
    return rand(8) + bytes(8) + bytes([33, version, exchange, 8]) + bytes(4) + struct.pack(">I", size) + rand(size - 28)


def test_ike_is_handshake_only() -> None:
    flow = Flow(proto=17, sport=500, dport=500).fwd(_ike()).back(_ike(size=200))
    protection, protocol, reason = verdict(flow)
    assert (protection, protocol) == ("handshake-only", "ike")
    assert "IKEv2" in reason


def test_nat_t_port_carries_ike_and_esp() -> None:
    flow = Flow(proto=17, sport=4500, dport=4500).fwd(bytes(4) + _ike(35, size=250))
    flow.fwd(b"\xff").fwd(*(b"\xc0\x01\x02\x03" + struct.pack(">I", i) + rand(140) for i in range(1, 4)))
    protection, protocol, reason = verdict(flow)
    assert (protection, protocol) == ("encrypted", "esp")
    assert "IKE" in reason and "4500" in reason


# --- MACsec ----------------------------------------------------------------------------------


def _sectag(tci: int) -> bytes:
    return bytes([tci, 0]) + b"\x00\x00\x00\x48" + b"\x2e\xb7\x3f\x39\x95\xc3\x00\x01"


def test_macsec_e_bit_decides() -> None:
    encrypted = Flow(proto=0, sport=-1, dport=-1, ethertype=0x88E5).fwd(_sectag(0x2C) + rand(100))
    integrity = Flow(proto=0, sport=-1, dport=-1, ethertype=0x88E5).fwd(
        _sectag(0x20) + b"\x08\x00" + _ipv4(60) + bytes(60)
    )
    (p1, n1, _), (p2, n2, r2) = verdicts(encrypted, integrity)
    assert (p1, n1) == ("encrypted", "macsec")
    assert (p2, n2) == ("integrity-only", "macsec")
    assert "NOT confidential" in r2


# --- RoCEv2 ----------------------------------------------------------------------------------


def _bth(opcode: int) -> bytes:
    return bytes([opcode, 0, 0xFF, 0xFF, 0, 0, 0x12, 0x34, 0x80, 0, 0, 1])


def _bf16(n: int, seed: int = 1) -> bytes:
    x = np.random.default_rng(seed).normal(0, 0.05, n).astype(np.float32)
    return (x.view(np.uint32) >> 16).astype(np.uint16).tobytes()


def test_roce_write_with_tensor_payload_is_plaintext() -> None:
    reth = rand(8) + b"\x00\x00\x10\x01" + struct.pack(">I", 1024)
    flow = Flow(proto=17, sport=49152, dport=4791).fwd(_bth(0x0A) + reth + _bf16(512) + rand(4))
    protection, protocol, reason = verdict(flow)
    assert (protection, protocol) == ("plaintext", "rocev2")
    assert "tensor-bf16" in reason


def test_roce_high_entropy_payload_is_unknown_and_acks_prove_nothing() -> None:
    opaque = Flow(proto=17, sport=49153, dport=4791).fwd(_bth(0x04) + rand(1024) + rand(4))
    acks = Flow(proto=17, sport=49154, dport=4791).fwd(_bth(0x11) + b"\x00\x00\x00\x01" + rand(4))
    (p1, n1, r1), (p2, n2, _) = verdicts(opaque, acks)
    assert (p1, n1) == ("unknown", "rocev2")
    assert "never encrypts" in r1
    assert (p2, n2) == ("unknown", "rocev2")


# --- plaintext protocols ---------------------------------------------------------------------


def test_http_request_and_status_lines() -> None:
    req = Flow(dport=8080).fwd(b"GET /datasets/shard-0001.tar HTTP/1.1\r\nHost: storage\r\n\r\n")
    resp = Flow(dport=8080).back(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n" + rand(100))
    (p1, n1, r1), (p2, n2, _) = verdicts(req, resp)
    assert (p1, n1) == ("plaintext", "http")
    assert "GET /datasets/shard-0001.tar" in r1
    assert (p2, n2) == ("plaintext", "http")


def _dns_query(name: bytes) -> bytes:
    qname = b"".join(bytes([len(label)]) + label for label in name.split(b".")) + b"\x00"
    return b"\xab\xcd\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00" + qname + b"\x00\x01\x00\x01"


def test_dns_over_udp_and_tcp() -> None:
    query = _dns_query(b"storage.cluster.local")
    udp = Flow(proto=17, dport=53).fwd(query)
    tcp = Flow(proto=6, dport=53).fwd(struct.pack(">H", len(query)) + query)
    assert [v[:2] for v in verdicts(udp, tcp)] == [("plaintext", "dns"), ("plaintext", "dns")]


def _mdns_response(name: bytes, flags: int = 0x8400, answers: int = 1, questions: int = 0) -> bytes:
    rname = b"".join(bytes([len(label)]) + label for label in name.split(b".")) + b"\x00"
    header = struct.pack(">HHHHHH", 0, flags, questions, answers, 0, 0)
    return header + rname + struct.pack(">HHIH", 12, 0x8001, 120, 2) + b"\xc0\x0c"  # PTR, cache-flush IN


def test_an_mdns_response_without_a_question_is_dns_on_its_port() -> None:
    response = _mdns_response(b"_ssh._tcp.local")
    assert verdict(Flow(proto=17, sport=5353, dport=5353).fwd(response))[:2] == ("plaintext", "dns")
    for bad in (_mdns_response(b"_ssh._tcp.local", flags=0x0000), _mdns_response(b"_ssh._tcp.local", answers=0)):
        assert verdict(Flow(proto=17, sport=5353, dport=5353).fwd(bad))[1] != "dns"
    assert verdict(Flow(proto=17, sport=40000, dport=5354).fwd(response))[1] != "dns"  # elsewhere a question


def test_ntp_and_syslog() -> None:
    ntp = (
        Flow(proto=17, sport=40123, dport=123)
        .fwd(bytes([0x23]) + bytes(47))
        .back(bytes([0x24, 2, 3, 0xE9]) + bytes(44))
    )
    syslog = Flow(proto=17, dport=514).fwd(b"<13>1 2024-06-11T10:00:00Z node1 trainer 42 - - step 100 loss 2.31")
    assert [v[:2] for v in verdicts(ntp, syslog)] == [("plaintext", "ntp"), ("plaintext", "syslog")]


def _ntp_control(response: bool, data: bytes, opcode: int = 2, pad: int = 0, version: int = 2) -> bytes:
    first = (version << 3) | 6
    return struct.pack(">BBHHHHH", first, (0x80 if response else 0) | opcode, 7, 0, 0, 0, len(data)) + data + bytes(pad)


def _nts(client: bool) -> bytes:
    """An NTPv4 packet with NTS extension fields (RFC 8915 §5.7): Unique Identifier, then (client) a cookie,
    then the Authenticator and Encrypted Extension Fields."""
    ef = struct.pack(">HH", 0x0104, 36) + rand(32)
    if client:
        ef += struct.pack(">HH", 0x0204, 104) + rand(100)
    ef += struct.pack(">HHHH", 0x0404, 40, 16, 16) + rand(32)
    return bytes([0x23 if client else 0x24, 0 if client else 2, 6, 0xE9]) + bytes(44) + ef


def test_ntp_authenticated_in_every_packet_is_integrity_only_and_a_crypto_nak_is_not_authentication() -> None:
    nts = Flow(proto=17, sport=40123, dport=123).fwd(_nts(True)).back(_nts(False))
    got = verdict(nts)
    assert got[:2] == ("integrity-only", "ntp") and "2 packets with Network Time Security" in got[2]
    md5 = bytes([0x23]) + bytes(47) + struct.pack(">I", 1) + rand(16)
    got = verdict(Flow(proto=17, sport=40123, dport=123).fwd(md5).back(md5))
    assert got[:2] == ("integrity-only", "ntp") and "2 packets with a symmetric-key MAC" in got[2]
    nak = bytes([0x24, 2, 3, 0xE9]) + bytes(44) + bytes(4)  # key id 0 alone: a crypto-NAK
    got = verdict(Flow(proto=17, sport=40123, dport=123).fwd(md5).back(nak))
    assert got[:2] == ("plaintext", "ntp") and "1 with a MAC: authenticated, but not every packet is" in got[2]
    bad_ef = _nts(False)[:50] + struct.pack(">H", 18) + _nts(False)[52:]  # not a multiple of 4
    assert verdict(Flow(proto=17, sport=40123, dport=123).fwd(bad_ef))[0] == "plaintext"


def _ntp_private(request: int = 42, nitems: int = 0, itemsize: int = 0, response: bool = False) -> bytes:
    head = struct.pack(">BBBBHH", (0x80 if response else 0) | (2 << 3) | 7, 0, 3, request, nitems, itemsize)
    return head + bytes(nitems * itemsize if response else 40)


def test_ntp_control_and_private_modes_on_port_123() -> None:
    text = b'version="ntpd 4.2.8p10", processor="x86_64", system="Linux", leap=00, stratum=2'
    control = (
        Flow(proto=17, sport=38531, dport=123)
        .fwd(_ntp_control(False, b""))
        .back(_ntp_control(True, text, pad=(-len(text)) % 4))
    )
    private = Flow(proto=17, sport=40000, dport=123).fwd(_ntp_private()).back(_ntp_private(nitems=3, itemsize=72,
                                                                                          response=True))  # fmt: skip
    (p1, n1, r1), (p2, n2, r2) = verdicts(control, private)
    assert (p1, n1) == ("plaintext", "ntp")
    assert "2 mode-6 control messages" in r1
    assert (p2, n2) == ("plaintext", "ntp")
    assert "2 mode-7 private messages" in r2


@pytest.mark.parametrize(
    "flow",
    [
        # the same control messages away from port 123: a 12-byte header alone proves nothing
        Flow(proto=17, sport=38531, dport=5000).fwd(_ntp_control(False, b"")).back(_ntp_control(True, bytes(40))),
        # a count the datagram does not hold, or more than the 468 data bytes a control message carries
        Flow(proto=17, sport=38531, dport=123).fwd(_ntp_control(True, bytes(40))[:40]),
        Flow(proto=17, sport=38531, dport=123).fwd(_ntp_control(True, bytes(472))),
        # a request with the error bit set, opcode 0 (reserved), version 0
        Flow(proto=17, sport=38531, dport=123).fwd(b"\x16\x42" + bytes(10)),
        Flow(proto=17, sport=38531, dport=123).fwd(_ntp_control(False, b"", opcode=0)),
        Flow(proto=17, sport=38531, dport=123).fwd(_ntp_control(False, b"", version=0)),
        # mode 7 with an unknown implementation number, or items beyond the datagram
        Flow(proto=17, sport=40000, dport=123).fwd(_ntp_private()[:2] + b"\x09" + _ntp_private()[3:]),
        Flow(proto=17, sport=40000, dport=123).fwd(_ntp_private(nitems=6, itemsize=72, response=True)[:300]),
    ],
)
def test_ntp_control_and_private_need_their_whole_header(flow: Flow) -> None:
    assert verdict(flow)[1] != "ntp"


def _pptp(kind: int, length: int) -> bytes:
    return struct.pack(">HHIHH", length, 1, 0x1A2B3C4D, kind, 0) + bytes(length - 12)


def test_pptp_control_messages() -> None:
    sccrq = Flow(dport=1723).fwd(_pptp(1, 156)).back(_pptp(2, 156))
    echo = Flow(dport=1723).fwd(_pptp(5, 16))
    (p1, n1, r1), (p2, n2, _) = verdicts(sccrq, echo)
    assert (p1, n1) == ("plaintext", "pptp")
    assert "2 control messages" in r1
    assert (p2, n2) == ("plaintext", "pptp")


@pytest.mark.parametrize(
    "payload",
    [
        _pptp(1, 156)[:4] + b"\x1a\x2b\x3c\x4e" + _pptp(1, 156)[8:],  # not the magic cookie
        _pptp(1, 168),  # SCCRQ is 156 bytes, not 168
        _pptp(16, 16),  # no control message type 16
        _pptp(1, 156)[:2] + b"\x00\x02" + _pptp(1, 156)[4:],  # a management message (type 2): none is defined
    ],
)
def test_pptp_needs_cookie_type_and_its_length(payload: bytes) -> None:
    assert verdict(Flow(dport=1723).fwd(payload))[1] != "pptp"


def _hsrp_v0(auth: bytes, state: int = 16) -> bytes:
    return struct.pack(">BBBBBBBB", 0, 0, state, 3, 10, 100, 1, 0) + auth.ljust(8, b"\x00") + bytes([10, 0, 0, 1])


def _hsrp_v2(auth_tlv: bytes) -> bytes:
    group = struct.pack(">BBBBBBH6sIII4s", 1, 40, 2, 0, 6, 4, 254, b"\x00\x11\x92\x1a\x17\x00", 105, 3000, 10000,
                        bytes([10, 0, 0, 1]))  # fmt: skip
    return group + bytes(12) + auth_tlv  # an IPv4 virtual address, padded to 16 bytes


def test_hsrp_hellos_by_their_authentication() -> None:
    flows = [
        Flow(proto=17, sport=1985, dport=1985).fwd(_hsrp_v0(b"cisco")),
        Flow(proto=17, sport=1985, dport=1985).fwd(_hsrp_v0(b"s3cret")),
        Flow(proto=17, sport=1985, dport=1985).fwd(_hsrp_v2(b"\x03\x08" + b"cisco".ljust(8, b"\x00"))),
        Flow(proto=17, sport=1985, dport=1985).fwd(_hsrp_v2(b"\x04\x1c" + bytes(2) + rand(26))),
        Flow(proto=17, sport=1985, dport=1985).fwd(_hsrp_v2(b"")),
    ]
    got = verdicts(*flows)
    assert [v[:2] for v in got] == [("plaintext", "hsrp")] * 3 + [("integrity-only", "hsrp"), ("plaintext", "hsrp")]
    assert 'default password "cisco"' in got[0][2]
    assert "text password in clear" in got[1][2]
    assert 'default password "cisco"' in got[2][2]
    assert "MD5" in got[3][2]
    assert "without an authentication TLV" in got[4][2]


@pytest.mark.parametrize(
    "flow",
    [
        Flow(proto=17, sport=40000, dport=1986).fwd(_hsrp_v0(b"cisco")),  # not port 1985
        Flow(proto=17, sport=1985, dport=1985).fwd(_hsrp_v0(b"cisco") + b"\x00"),  # v0 is exactly 20 bytes
        Flow(proto=17, sport=1985, dport=1985).fwd(_hsrp_v0(b"cisco", state=3)),  # no state 3
    ],
)
def test_hsrp_needs_its_port_length_and_state(flow: Flow) -> None:
    assert verdict(flow)[1] != "hsrp"


def _vrrp2(auth: int, count: int = 1, password: bytes = b"") -> bytes:
    head = struct.pack(">BBBBBBH", 0x21, 51, 100, count, auth, 1, 0) + bytes([10, 0, 0, 100]) * count
    return head + password.ljust(8, b"\x00")


def _vrrp3(count: int = 1, v6: bool = False) -> bytes:
    return struct.pack(">BBBBHH", 0x31, 51, 100, count, 100, 0) + bytes(16 if v6 else 4) * count


def test_vrrp_advertisements_by_their_authentication() -> None:
    flows = [
        Flow(proto=112, sport=-1, dport=-1).fwd(_vrrp2(1, password=b"k33pal1v")),
        Flow(proto=112, sport=-1, dport=-1).fwd(_vrrp2(0, count=2)),
        Flow(proto=112, sport=-1, dport=-1).fwd(_vrrp3(count=1, v6=True)),
    ]
    got = verdicts(*flows)
    assert [v[:2] for v in got] == [("plaintext", "vrrp")] * 3
    assert "text password in clear" in got[0][2]
    assert "without authentication" in got[1][2] and "without authentication" in got[2][2]


@pytest.mark.parametrize(
    "payload",
    [
        _vrrp2(1) + b"\x00",  # v2 is exactly 16 + 4 x count bytes
        _vrrp2(2),  # authentication type 2 (IPsec AH) would not be inside protocol 112
        _vrrp3()[:1] + b"\x00" + _vrrp3()[2:],  # VRID 0
        _vrrp3(count=2)[:-3],  # neither 4 nor 16 bytes per address
    ],
)
def test_vrrp_needs_its_exact_layout(payload: bytes) -> None:
    assert verdict(Flow(proto=112, sport=-1, dport=-1).fwd(payload))[1] != "vrrp"


def _bgp(kind: int, body: bytes) -> bytes:
    return b"\xff" * 16 + struct.pack(">HB", 19 + len(body), kind) + body


def test_bgp_sessions_are_plaintext() -> None:
    open_ = _bgp(1, struct.pack(">BHHIB", 4, 64512, 90, 0x0A000001, 0))
    flow = Flow(sport=40179, dport=179).fwd(open_, _bgp(4, b"")).back(_bgp(1, open_[19:]), _bgp(4, b""))
    protection, protocol, reason = verdict(flow)
    assert (protection, protocol) == ("plaintext", "bgp")
    assert "4 messages" in reason and "TCP-MD5" in reason


@pytest.mark.parametrize(
    "payload",
    [
        _bgp(4, b"\x00"),  # a KEEPALIVE is exactly 19 bytes
        _bgp(1, b"\x04"),  # an OPEN is at least 29
        _bgp(6, bytes(10)),  # no message type 6
        b"\xff" * 15 + b"\xfe" + _bgp(4, b"")[16:],  # the marker is 16 bytes of ones
    ],
)
def test_bgp_needs_marker_type_and_length(payload: bytes) -> None:
    assert verdict(Flow(sport=40179, dport=179).fwd(payload))[1] != "bgp"


def _bfd(auth: bytes = b"", state: int = 3, diag: int = 0, mult: int = 3, mine: int = 0x1234, m_bit: int = 0,
         length: int | None = None) -> bytes:  # fmt: skip
    flags = (state << 6) | (0x04 if auth else 0) | m_bit
    size = 24 + len(auth) if length is None else length
    return struct.pack(">BBBBIIIII", (1 << 5) | diag, flags, mult, size, mine, 0x5678, 300_000, 300_000, 0) + auth


BFD_MD5 = struct.pack(">BBBBI", 2, 24, 1, 0, 77) + bytes(16)
BFD_SHA1 = struct.pack(">BBBBI", 5, 28, 1, 0, 77) + bytes(20)
BFD_PASSWORD = struct.pack(">BBB", 1, 3 + 6, 1) + b"fabr1c"


def test_bfd_by_its_authentication() -> None:
    flows = [
        Flow(proto=17, sport=49152, dport=3784).fwd(_bfd()).back(_bfd()),
        Flow(proto=17, sport=49153, dport=4784).fwd(_bfd(BFD_PASSWORD)),
        Flow(proto=17, sport=49154, dport=3784).fwd(_bfd(BFD_MD5)).back(_bfd(BFD_SHA1)),
        Flow(proto=17, sport=49155, dport=3784).fwd(_bfd(BFD_MD5), _bfd()),
    ]
    got = verdicts(*flows)
    assert [v[:2] for v in got] == [("plaintext", "bfd"), ("plaintext", "bfd"), ("integrity-only", "bfd"),
                                    ("plaintext", "bfd")]  # fmt: skip
    assert "2 control packets without authentication" in got[0][2] and "tears the BGP/OSPF session" in got[0][2]
    assert "simple password in clear" in got[1][2]
    assert "keyed MD5/SHA1" in got[2][2]


@pytest.mark.parametrize(
    ("port", "payload"),
    [
        (3784, _bfd(length=25) + b"\x00"),  # … its Length is the datagram's
        (3784, _bfd(length=23)),
        (3784, _bfd(mult=0)),  # a detect multiplier of 0
        (3784, _bfd(mine=0)),  # My Discriminator must be non-zero
        (3784, _bfd(m_bit=1)),  # the multipoint bit is reserved
        (3784, _bfd(diag=9)),  # no diagnostic 9
        (3784, _bfd(struct.pack(">BBB", 2, 20, 1) + bytes(17))),  # keyed MD5 is 24 bytes
        (3785, _bfd()),  # echo packets are not control packets
        (3999, _bfd()),
    ],
)
def test_bfd_needs_its_exact_header(port: int, payload: bytes) -> None:
    assert verdict(Flow(proto=17, sport=49152, dport=port).fwd(payload))[1] != "bfd"


def _tacacs(kind: int, seq: int, flags: int, body: bytes) -> bytes:
    return struct.pack(">BBBBII", 0xC1, kind, seq, flags, 0x5EED1234, len(body)) + body


def test_tacacs_in_clear_and_obfuscated_are_both_plaintext() -> None:
    start = b"\x01\x01\x01\x01\x05\x00\x00\x00admin"  # an authentication START, user "admin"
    clear = Flow(sport=40049, dport=49).fwd(_tacacs(1, 1, 0x01, start)).back(_tacacs(1, 2, 0x01, bytes(6)))
    hidden = Flow(sport=40050, dport=49).fwd(_tacacs(2, 1, 0x00, rand(40))).back(_tacacs(2, 2, 0x04, rand(20)))
    (p1, n1, r1), (p2, n2, r2) = verdicts(clear, hidden)
    assert (p1, n1) == ("plaintext", "tacacs+") and "UNENCRYPTED" in r1
    assert (p2, n2) == ("plaintext", "tacacs+") and "MD5 keystream" in r2


@pytest.mark.parametrize(
    ("dport", "payload"),
    [
        (4949, _tacacs(1, 1, 0x01, bytes(20))),  # not port 49
        (49, _tacacs(4, 1, 0x01, bytes(20))),  # no packet type 4
        (49, _tacacs(1, 0, 0x01, bytes(20))),  # sequence numbers start at 1
        (49, _tacacs(1, 1, 0x02, bytes(20))),  # an undefined flag
        (49, b"\xc2" + _tacacs(1, 1, 0x01, bytes(20))[1:]),  # minor version 2
    ],
)
def test_tacacs_needs_port_version_type_and_flags(dport: int, payload: bytes) -> None:
    assert verdict(Flow(sport=40049, dport=dport).fwd(payload))[1] != "tacacs+"


def _ospf2(autype: int, auth: bytes = bytes(8), digest: bytes = b"") -> bytes:
    hello = bytes([255, 255, 255, 0]) + struct.pack(">HBBII", 10, 0x02, 1, 40, 0) + bytes(8)  # mask … backup DR
    size = 24 + len(hello)
    return struct.pack(">BBHIIHH", 2, 1, size, 0x0A000001, 0, 0, autype) + auth + hello + digest


def _ospf3() -> bytes:
    hello = struct.pack(">IBBBBHHII", 5, 1, 0, 0, 0x13, 10, 40, 0, 0)
    return struct.pack(">BBHIIHBB", 3, 1, 16 + len(hello), 0x0A000001, 0, 0, 0, 0) + hello


def test_ospf_by_its_authentication() -> None:
    md5 = struct.pack(">HBBI", 0, 1, 16, 7)
    flows = [
        Flow(proto=89, sport=-1, dport=-1).fwd(_ospf2(2, md5, rand(16))),
        Flow(proto=89, sport=-1, dport=-1).fwd(_ospf2(1, b"ospfpass")),
        Flow(proto=89, sport=-1, dport=-1).fwd(_ospf2(0)),
        Flow(proto=89, sport=-1, dport=-1).fwd(_ospf3()),
    ]
    got = verdicts(*flows)
    assert [v[:2] for v in got] == [("integrity-only", "ospf")] + [("plaintext", "ospf")] * 3
    assert "AuType 2" in got[0][2] and "simple password" in got[1][2]
    assert "without authentication" in got[2][2] and "OSPFv3" in got[3][2]


@pytest.mark.parametrize(
    "payload",
    [
        _ospf2(2, struct.pack(">HBBI", 0, 1, 16, 7)),  # the 16-byte digest the header announces is missing
        _ospf2(3),  # no AuType 3
        _ospf2(0)[:1] + b"\x06" + _ospf2(0)[2:],  # no packet type 6
        _ospf2(0)[:2] + b"\x00\x34" + _ospf2(0)[4:],  # 52 bytes declared, 48 in the datagram
    ],
)
def test_ospf_needs_its_exact_header(payload: bytes) -> None:
    assert verdict(Flow(proto=89, sport=-1, dport=-1).fwd(payload))[1] != "ospf"


def _zmtp_rest(mechanism: bytes, server: int = 0) -> bytes:
    return mechanism.ljust(20, b"\x00") + bytes([server]) + bytes(31)


_ZMTP_SIG = b"\xff" + bytes(8) + b"\x7f"


@pytest.mark.parametrize(
    ("mechanism", "protection"),
    [(b"NULL", "plaintext"), (b"PLAIN", "plaintext"), (b"CURVE", "encrypted"), (b"GSSAPI", "handshake-only")],
)
def test_zmtp_greetings_by_mechanism(mechanism: bytes, protection: str) -> None:
    # one write (the whole greeting, then a READY command) …
    whole = Flow(dport=5555).fwd(_ZMTP_SIG + b"\x03\x01" + _zmtp_rest(mechanism) + b"\x04\x19\x05READY")
    # … or libzmq's three: the signature, the major version, the rest
    split = Flow(dport=5556).fwd(_ZMTP_SIG, b"\x03", b"\x01" + _zmtp_rest(mechanism)).back(
        _ZMTP_SIG + b"\x03", b"\x01" + _zmtp_rest(mechanism, server=1)
    )
    for got in verdicts(whole, split):
        assert got[:2] == (protection, "zeromq"), got
        assert mechanism.decode() in got[2]


@pytest.mark.parametrize(
    "segments",
    [
        [_ZMTP_SIG, b"\x03"],  # a signature and a version: no mechanism seen
        [_ZMTP_SIG + b"\x03\x01" + _zmtp_rest(b"NULLX")],  # not a mechanism name
        [_ZMTP_SIG + b"\x03\x01" + _zmtp_rest(b"NULL")[:-1] + b"\x01"],  # filler not zero
        [_ZMTP_SIG + b"\x03\x01" + _zmtp_rest(b"NULL", server=2)],  # as-server is 0 or 1
    ],
)
def test_zmtp_needs_the_mechanism_and_its_padding(segments: list[bytes]) -> None:
    assert verdict(Flow(dport=5555).fwd(*segments))[1] != "zeromq"


@pytest.mark.parametrize(
    ("header", "protection"),
    [
        (b"AMQP\x00\x00\x09\x01", "plaintext"),  # 0-9-1 (RabbitMQ)
        (b"AMQP\x00\x01\x00\x00", "plaintext"),  # 1.0
        (b"AMQP\x03\x01\x00\x00", "plaintext"),  # 1.0, SASL next
        (b"AMQP\x02\x01\x00\x00", "handshake-only"),  # 1.0, TLS next; no TLS in the sample
    ],
)
def test_amqp_protocol_headers(header: bytes, protection: str) -> None:
    assert verdict(Flow(dport=5672).fwd(header).back(header))[:2] == (protection, "amqp")


def test_amqp_needs_a_known_version() -> None:
    assert verdict(Flow(dport=5672).fwd(b"AMQP\x00\x00\x08\x07"))[1] != "amqp"


# --- ringfence transport, gloo ---------------------------------------------------------------


def _rft(kind: int, body: bytes, seq: int = 0) -> bytes:
    return struct.pack(">4sBBHIQI", b"RFT1", kind, 0, 0, 1 if kind >= 16 else 0, seq, len(body)) + body


def test_ringfence_transport_records() -> None:
    hello = Flow(dport=29600).fwd(_rft(1, b"hello " * 20)).back(_rft(1, b"hello " * 20))
    data = Flow(dport=29601).fwd(_rft(1, b"hello" * 20)).fwd(*(_rft(16, rand(1000), i) for i in range(3)))
    leaky = Flow(dport=29602).fwd(_rft(16, _bf16(512)))
    (p1, n1, _), (p2, n2, r2), (p3, n3, _) = verdicts(hello, data, leaky)
    assert (p1, n1) == ("handshake-only", "ringfence-transport")
    assert (p2, n2) == ("encrypted", "ringfence-transport")
    assert "RFT1" in r2
    assert (p3, n3) == ("plaintext", "ringfence-transport")


def _gloo_send(data: bytes, slot: int = 7) -> bytes:
    return struct.pack("<6Q", 48 + len(data), 1, slot, 0, len(data), 0) + data


def test_gloo_with_float_tensor_is_plaintext() -> None:
    tensor = np.random.default_rng(3).normal(0, 1, 8192).astype(np.float32).tobytes()
    notify = struct.pack("<6Q", 48, 2, 7, 0, len(tensor), 0)
    flow = Flow(sport=45000, dport=45001).fwd(notify, *segments(_gloo_send(tensor), 1448)[:6])
    protection, protocol, reason = verdict(flow)
    assert (protection, protocol) == ("plaintext", "gloo")
    assert "tensor" in reason


def test_gloo_control_only_is_unknown() -> None:
    flow = Flow(sport=45000, dport=45001).fwd(struct.pack("<6Q", 48, 3, 7, 0, 4096, 0))
    assert verdict(flow)[:2] == ("unknown", "gloo")


# --- content without framing -----------------------------------------------------------------


def test_random_bytes_are_never_encrypted() -> None:
    flows = [Flow(sport=30000 + i, dport=5000).fwd(*(rand(1400) for _ in range(16))) for i in range(300)]
    results = verdicts(*flows)
    assert {p for p, _, _ in results} == {"unknown"}
    assert all("high entropy" in r and "no recognised encryption protocol framing" in r for _, _, r in results)


def test_compressed_text_is_unknown() -> None:
    text = b"".join(b"%d,node-%d,loss=%.4f,lr=%.6f\n" % (i, i % 7, 1 / (i + 1), 3e-4) for i in range(4000))
    flow = Flow(dport=9000).fwd(*segments(zlib.compress(text, 9))[1:9])
    assert verdict(flow)[0] == "unknown"


@pytest.mark.parametrize(
    ("dtype", "protocols"), [(np.float32, {"tensor-f32"}), (np.float16, {"tensor-f16", "tensor-bf16"})]
)
def test_numpy_float_tensors_are_plaintext(dtype: type, protocols: set[str]) -> None:
    # fp16 and bf16 words near 1 share their high bytes' range; only "16-bit floats" is certain
    data = np.random.default_rng(5).normal(0, 1, 20000).astype(dtype).tobytes()
    protection, protocol, _ = verdict(Flow(dport=45001).fwd(*segments(data[3:], 1448)[:8]))
    assert protection == "plaintext"
    assert protocol in protocols


def test_bf16_tensor_is_plaintext() -> None:
    flow = Flow(dport=45001).fwd(*segments(_bf16(20000, seed=9)[1:], 1448)[:8])
    assert verdict(flow)[:2] == ("plaintext", "tensor-bf16")


def test_text_and_zeros_are_plaintext() -> None:
    text = Flow(dport=7000).fwd(b"step=100 loss=2.3141 grad_norm=0.9912 lr=0.000300 tokens/s=18234\n" * 3)
    zeros = Flow(dport=7001).fwd(bytes(1400))
    (p1, n1, _), (p2, _, r2) = verdicts(text, zeros)
    assert (p1, n1) == ("plaintext", "text")
    assert p2 == "plaintext"
    assert "zero" in r2


def test_port_is_only_a_hint() -> None:
    protection, protocol, reason = verdict(Flow(dport=443).fwd(rand(1400), rand(1400)))
    assert (protection, protocol) == ("unknown", None)
    assert "port 443" in reason and "cannot prove" in reason


def test_weakest_packet_wins_in_an_encrypted_flow() -> None:
    flow = Flow(dport=443).fwd(b"\x17\x03\x03\x00\x40" + rand(64), b"\x17\x03\x03\x00\x40" + rand(64))
    flow.fwd(b"POST /v1/grads HTTP/1.1\r\nHost: ps\r\n\r\n")
    assert verdict(flow)[:2] == ("plaintext", "http")


def test_unsorted_rows_give_the_same_verdicts() -> None:
    flows = [
        Flow(dport=22).fwd(b"SSH-2.0-x\r\n", _ssh_packet(21), rand(60)),
        Flow(proto=17, dport=51820).fwd(_wg(1, 148), _wg(4, 64)),
        Flow(dport=80).fwd(b"GET / HTTP/1.1\r\n\r\n"),
    ]
    keys, samples = build(flows)
    order = np.random.default_rng(1).permutation(samples.m)
    shuffled = PayloadSamples(
        flow=samples.flow[order], forward=samples.forward[order], length=samples.length[order], head=samples.head[order]
    )
    assert classify_flows(keys, shuffled) == classify_flows(keys, samples)


def test_keys_with_more_payload_than_sampled_say_so() -> None:
    flow = Flow(proto=17, dport=51820, extra_payload_packets=500).fwd(_wg(1, 148)).back(_wg(2, 92))
    assert "first 2 payload packets" in verdict(flow)[2]


def test_flow_keys_shape_mismatch_is_rejected() -> None:
    keys, samples = build([Flow().fwd(b"abc")])
    bad = FlowKeys(
        ethertype=keys.ethertype,
        proto=keys.proto,
        sport=keys.sport[:0],
        dport=keys.dport,
        payload_bytes=keys.payload_bytes,
        payload_packets=keys.payload_packets,
    )
    with pytest.raises(ValueError, match="sport"):
        classify_flows(bad, samples)


def test_a_long_kexinit_tail_is_not_taken_for_ciphertext() -> None:
    names = b"curve25519-sha256,curve25519-sha256@libssh.org,ecdh-sha2-nistp256,diffie-hellman-group16-sha512," * 30
    kexinit = _ssh_packet(20, rand(16) + names)
    flow = Flow(dport=22).fwd(b"SSH-2.0-OpenSSH_9.2\r\n", *segments(kexinit)).back(b"SSH-2.0-OpenSSH_9.6\r\n")
    assert verdict(flow)[:2] == ("handshake-only", "ssh")


def test_one_bare_record_header_is_not_tls() -> None:
    flow = Flow(dport=5000).fwd(b"\x17\x03\x03\x01\x00" + rand(1400), *(rand(1400) for _ in range(5)))
    assert verdict(flow)[:2] == ("unknown", None)


def test_tls_null_cipher_is_integrity_only() -> None:
    body = b"\x00" * 8 + b"step=100 loss=2.3141 grad_norm=0.99 lr=0.0003 tokens=18234 " * 4
    hello = b"\x16\x03\x01\x00\x40\x01\x00\x00\x3c\x03\x03" + rand(59)
    flow = Flow(dport=8443).fwd(hello, b"\x17\x03\x03" + struct.pack(">H", len(body)) + body)
    protection, protocol, reason = verdict(flow)
    assert (protection, protocol) == ("integrity-only", "tls")
    assert "NULL cipher" in reason


# --- IGMP and PIM ------------------------------------------------------------------------------


def _with_checksum(message: bytes, at: int = 2, covered: int | None = None) -> bytes:
    """``message`` with the Internet checksum (RFC 1071) of its first ``covered`` bytes written at ``at``."""
    part = message[: covered or len(message)]
    part += b"\0" * (len(part) % 2)
    total = sum(struct.unpack(f">{len(part) // 2}H", part))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return message[:at] + struct.pack(">H", ~total & 0xFFFF) + message[at + 2 :]


def _igmp(kind: int, group: str = "239.1.1.1", extra: bytes = b"") -> bytes:
    return _with_checksum(bytes([kind, 0]) + b"\0\0" + bytes(int(x) for x in group.split(".")) + extra)


def _pim_hello() -> bytes:
    return _with_checksum(b"\x20\x00\0\0" + struct.pack(">HHH", 1, 2, 105) + struct.pack(">HHI", 20, 4, 0x1234))


def test_igmp_and_pim_are_plaintext_multicast_control() -> None:
    report, leave = _igmp(0x16), _igmp(0x17, "224.0.0.2")
    query3 = _igmp(0x11, "0.0.0.0", b"\x02\x7d\x00\x00")
    got = verdict(Flow(proto=2, sport=-1, dport=-1).fwd(report, leave, query3))
    assert got[:2] == ("plaintext", "igmp") and "3 messages" in got[2]
    register = _with_checksum(b"\x21\x00\0\0" + b"\0\0\0\0" + b"\x45" + bytes(80), covered=8)
    got = verdict(Flow(proto=103, sport=-1, dport=-1).fwd(_pim_hello(), register))
    assert got[:2] == ("plaintext", "pim") and "IPsec" in got[2]


@pytest.mark.parametrize(
    ("proto", "payload"),
    [
        (2, _igmp(0x16)[:2] + b"\x00\x00" + _igmp(0x16)[4:]),  # a wrong checksum
        (2, _igmp(0x16, extra=b"\0\0\0\0")),  # a v2 report is exactly 8 bytes
        (2, _igmp(0x30)),  # not an IGMP type read here
        (103, _pim_hello()[:2] + b"\x00\x00" + _pim_hello()[4:]),  # a wrong checksum
        (103, b"\x10" + _pim_hello()[1:]),  # PIMv1 is not this header
        (103, _with_checksum(b"\x2b\x00\0\0" + bytes(8))),  # no type 11
    ],
)
def test_igmp_and_pim_need_a_valid_checksum_and_type(proto: int, payload: bytes) -> None:
    assert verdict(Flow(proto=proto, sport=-1, dport=-1).fwd(payload))[1] not in {"igmp", "pim"}


# --- IPsec AH --------------------------------------------------------------------------------------


def _ah(next_header: int, inner: bytes, spi: int = 0x1000, icv: int = 12, reserved: int = 0) -> bytes:
    return struct.pack(">BBHII", next_header, (12 + icv) // 4 - 2, reserved, spi, 7) + rand(icv) + inner


def test_ah_is_integrity_only_and_ah_with_esp_inside_is_encrypted() -> None:
    tcp = struct.pack(">HHIIBBHHH", 40000, 80, 1, 0, 0x50, 0x18, 512, 0, 0) + b"GET / HTTP/1.1\r\n"
    got = verdict(Flow(proto=51, sport=-1, dport=-1).fwd(_ah(6, tcp), _ah(6, tcp, icv=16), _ah(6, tcp, icv=36)))
    assert got[:2] == ("integrity-only", "ah") and "SPI 0x00001000" in got[2] and "NOT confidential" in got[2]
    esp = struct.pack(">II", 0x2000, 1) + rand(48)
    got = verdict(Flow(proto=51, sport=-1, dport=-1).fwd(_ah(50, esp)))
    assert got[:2] == ("encrypted", "ah")


@pytest.mark.parametrize(
    "payload",
    [
        _ah(6, rand(20), spi=200),  # SPI 1-255 are reserved
        _ah(6, rand(20), reserved=1),  # reserved must be zero
        _ah(6, b"", icv=32)[:30],  # the header's length runs past the packet
        _ah(6, rand(60), icv=8),  # no integrity algorithm has an ICV under 12 bytes …
        _ah(6, rand(60), icv=40),  # … or over 32 (36 with IPv6 padding)
        _ah(200, rand(20)),  # not an IP protocol number
    ],
)
def test_ah_needs_its_exact_header(payload: bytes) -> None:
    assert verdict(Flow(proto=51, sport=-1, dport=-1).fwd(payload))[1] != "ah"
