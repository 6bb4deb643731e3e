"""Management, identity and service protocols, built to their specifications: SNMP, IPMI/RMCP+, Kerberos,
LDAP, DHCP, TFTP, PostgreSQL, MySQL, MQTT, RDP, Kafka, Slurm; and tcpdump's captures of some of them."""

from __future__ import annotations

import random
import struct
from pathlib import Path

import pytest
from payload_build import Flow, verdict

RNG = random.Random(1201)
CAPTURES = Path(__file__).resolve().parents[2].parent / "shared" / "captures" / "tcpdump-tests"


def rand(n: int) -> bytes:
    return RNG.randbytes(n)


def tlv(tag: int, body: bytes) -> bytes:
    n = len(body)
    length = bytes([n]) if n < 0x80 else (b"\x81" + bytes([n]) if n < 0x100 else b"\x82" + struct.pack(">H", n))
    return bytes([tag]) + length + body


def integer(value: int) -> bytes:
    return tlv(0x02, value.to_bytes(max(1, (value.bit_length() + 8) // 8), "big"))


def octets(data: bytes) -> bytes:
    return tlv(0x04, data)


def seq(*parts: bytes) -> bytes:
    return tlv(0x30, b"".join(parts))


# --- SNMP --------------------------------------------------------------------------------------------


def snmp_v2c(community: bytes = b"public") -> bytes:
    varbind = seq(seq(tlv(0x06, b"\x2b\x06\x01\x02\x01\x01\x05\x00"), b"\x05\x00"))
    pdu = tlv(0xA0, integer(0x1234) + integer(0) + integer(0) + varbind)
    return seq(integer(1), octets(community), pdu)


def snmp_v3(flags: int, engine: bytes = b"\x80\x00\x1f\x88\x80" + bytes(8)) -> bytes:
    header = seq(integer(0x4321), integer(65507), octets(bytes([flags])), integer(3))
    usm = octets(seq(octets(engine), integer(3), integer(1200), octets(b"admin"), octets(bytes(12)), octets(b"")))
    scoped = octets(rand(60)) if flags & 2 else seq(octets(engine), octets(b""), tlv(0xA0, rand(20)))
    return seq(integer(3), header, usm, scoped)


def snmp(*messages: bytes) -> Flow:
    return Flow(proto=17, sport=50000, dport=161).fwd(*messages)


def test_snmp_versions_and_security_levels() -> None:
    assert verdict(snmp(snmp_v2c()))[:2] == ("plaintext", "snmp")
    assert verdict(snmp(snmp_v3(0x04)))[:2] == ("plaintext", "snmp")  # noAuthNoPriv, reportable
    assert verdict(snmp(snmp_v3(0x05)))[:2] == ("integrity-only", "snmp")  # authNoPriv
    assert verdict(snmp(snmp_v3(0x07)))[:2] == ("encrypted", "snmp")  # authPriv
    discovery = snmp_v3(0x04, engine=b"")
    assert verdict(snmp(discovery, snmp_v3(0x07)))[0] == "encrypted"  # discovery does not downgrade
    assert verdict(snmp(discovery))[0] == "handshake-only"


def test_snmp_rejects_priv_without_auth_and_wrong_lengths() -> None:
    assert verdict(snmp(snmp_v3(0x06)))[1] is None  # privacy without authentication is invalid
    assert verdict(snmp(snmp_v2c() + b"\x00"))[1] is None  # outer length must be the datagram's


# --- IPMI --------------------------------------------------------------------------------------------


def rmcp_plus(payload_type: int, payload: bytes, *, trailer: bytes = b"") -> bytes:
    session = bytes([6, payload_type]) + rand(8) + struct.pack("<H", len(payload))
    return b"\x06\x00\xff\x07" + session + payload + trailer


def test_ipmi_rmcp_plus_and_ipmi15() -> None:
    bmc = Flow(proto=17, sport=50000, dport=623)
    setup = rmcp_plus(0x10, rand(32))
    assert verdict(bmc.fwd(setup, rmcp_plus(0xC0, rand(32), trailer=rand(16))))[:2] == ("encrypted", "ipmi")
    authed = Flow(proto=17, dport=623).fwd(setup, rmcp_plus(0x40, rand(12), trailer=rand(16)))
    assert verdict(authed)[0] == "integrity-only"
    cipher_zero = Flow(proto=17, dport=623).fwd(setup, rmcp_plus(0x00, rand(12)))
    assert verdict(cipher_zero)[0] == "plaintext"
    msg = rand(9)
    v15 = b"\x06\x00\xff\x07" + b"\x00" + rand(4) + b"\x1a\x2b\x3c\x4d" + bytes([len(msg)]) + msg
    assert verdict(Flow(proto=17, dport=623).fwd(v15))[:2] == ("plaintext", "ipmi")
    # Get Channel Authentication Capabilities: IPMI 1.5, no session, before every RMCP+ session.
    capabilities = b"\x06\x00\xff\x07" + b"\x00" + bytes(8) + b"\x09\x20\x18\xc8\x81\x00\x38\x8e\x04\xb5"
    lanplus = Flow(proto=17, dport=623).fwd(capabilities, setup, rmcp_plus(0xC0, rand(32), trailer=rand(16)))
    assert verdict(lanplus)[:2] == ("encrypted", "ipmi")


# --- Kerberos, LDAP ----------------------------------------------------------------------------------


def krb_as_req() -> bytes:
    body = seq(tlv(0xA0, tlv(0x03, b"\x00\x40\x00\x00\x00")), tlv(0xA2, tlv(0x1B, b"LAB.EXAMPLE")), rand(40))
    return tlv(0x6A, seq(tlv(0xA1, integer(5)), tlv(0xA2, integer(10)), tlv(0xA4, body)))


def test_kerberos_is_a_handshake_that_says_what_is_in_clear() -> None:
    udp = verdict(Flow(proto=17, dport=88).fwd(krb_as_req()))
    assert udp[:2] == ("handshake-only", "kerberos")
    assert "principal names" in udp[2]
    message = krb_as_req()
    assert verdict(Flow(dport=88).fwd(struct.pack(">I", len(message)) + message))[:2] == ("handshake-only", "kerberos")


def ldap_msg(op: bytes, msg_id: int = 1) -> bytes:
    return seq(integer(msg_id), op)


def test_ldap_simple_bind_is_plaintext_and_starttls_then_tls_encrypted() -> None:
    bind = ldap_msg(tlv(0x60, integer(3) + octets(b"cn=admin,dc=lab") + tlv(0x80, b"secret")))
    protection, protocol, reason = verdict(Flow(dport=389).fwd(bind))
    assert (protection, protocol) == ("plaintext", "ldap") and "password" in reason
    starttls = ldap_msg(tlv(0x77, tlv(0x80, b"1.3.6.1.4.1.1466.20037")))
    hello = b"\x16\x03\x01\x00\x40\x01\x00\x00\x3c\x03\x03" + rand(59)
    upgraded = Flow(dport=389).fwd(starttls, hello, b"\x17\x03\x03\x00\x40" + rand(64))
    got = verdict(upgraded)
    assert got[0] == "encrypted" and "LDAP StartTLS" in got[2]
    # A simple bind before StartTLS gave the password away: the weakest packet wins.
    assert verdict(Flow(dport=389).fwd(bind, starttls, hello, b"\x17\x03\x03\x00\x40" + rand(64)))[0] == "plaintext"


def test_ldap_with_active_directory_length_encoding() -> None:
    # Active Directory writes every length in the 4-byte long form (0x84).
    search = octets(b"dc=lab") + b"\x0a\x01\x02\x0a\x01\x00"
    op = b"\x63\x84" + struct.pack(">I", len(search)) + search
    body = b"\x02\x84\x00\x00\x00\x01\x07" + op
    message = b"\x30\x84" + struct.pack(">I", len(body)) + body
    assert verdict(Flow(dport=389).fwd(message))[:2] == ("plaintext", "ldap")


def test_ldap_search_in_clear_is_plaintext() -> None:
    search = ldap_msg(tlv(0x63, octets(b"dc=lab") + b"\x0a\x01\x02\x0a\x01\x00" + integer(0) * 2), msg_id=2)
    assert verdict(Flow(dport=389).fwd(search))[:2] == ("plaintext", "ldap")


# --- DHCP, TFTP -------------------------------------------------------------------------------------


def test_dhcp_and_tftp_are_plaintext() -> None:
    dhcp = struct.pack(">BBBBIHH", 1, 1, 6, 0, 0xABCD1234, 0, 0x8000) + bytes(16) + rand(6) + bytes(10)
    dhcp += bytes(192) + b"\x63\x82\x53\x63\x35\x01\x01\xff"
    assert verdict(Flow(proto=17, sport=68, dport=67).fwd(dhcp))[:2] == ("plaintext", "dhcp")
    request = b"\x00\x01pxelinux.0\x00octet\x00blksize\x001468\x00"
    assert verdict(Flow(proto=17, sport=40000, dport=69).fwd(request))[:2] == ("plaintext", "tftp")
    transfer = Flow(proto=17, sport=40000, dport=50123)
    transfer.back(b"\x00\x03\x00\x01" + rand(512)).fwd(b"\x00\x04\x00\x01").back(b"\x00\x03\x00\x02" + rand(100))
    assert verdict(transfer)[:2] == ("plaintext", "tftp")
    # DATA without a matching ACK is two bytes of evidence: not TFTP.
    assert verdict(Flow(proto=17, dport=50123).fwd(b"\x00\x03\x00\x01" + rand(512)))[1] is None


# --- databases, brokers ------------------------------------------------------------------------------


def test_postgresql_startup_in_clear_vs_sslrequest_then_tls() -> None:
    params = b"user\x00train\x00database\x00metrics\x00\x00"
    startup = struct.pack(">II", 8 + len(params), 0x00030000) + params
    assert verdict(Flow(dport=5432).fwd(startup))[:2] == ("plaintext", "postgresql")
    ssl_request = struct.pack(">II", 8, 80877103)
    hello = b"\x16\x03\x01\x00\x40\x01\x00\x00\x3c\x03\x03" + rand(59)
    flow = Flow(dport=5432).fwd(ssl_request).back(b"S").fwd(hello).back(b"\x17\x03\x03\x00\x40" + rand(64))
    protection, _, reason = verdict(flow)
    assert protection == "encrypted" and "PostgreSQL SSLRequest" in reason
    assert verdict(Flow(dport=5432).fwd(ssl_request).back(b"S"))[:2] == ("handshake-only", "postgresql")


def _mysql_packet(seq_id: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "little") + bytes([seq_id]) + payload


def test_mysql_login_in_clear_vs_ssl_request() -> None:
    greeting = _mysql_packet(0, b"\x0a8.0.36\x00" + struct.pack("<I", 9) + rand(8) + b"\x00" + rand(30))
    fixed = struct.pack("<IIB", 0x000FA685, 1 << 24, 33) + bytes(23)
    login = _mysql_packet(1, fixed + b"train\x00" + rand(21))
    assert verdict(Flow(dport=3306).back(greeting).fwd(login))[:2] == ("plaintext", "mysql")
    ssl = _mysql_packet(1, struct.pack("<IIB", 0x000FAE85, 1 << 24, 33) + bytes(23))
    hello = b"\x16\x03\x01\x00\x40\x01\x00\x00\x3c\x03\x03" + rand(59)
    tls = Flow(dport=3306).back(greeting).fwd(ssl, hello).back(b"\x17\x03\x03\x00\x40" + rand(64))
    assert verdict(tls)[0] == "encrypted"
    assert verdict(Flow(dport=3306).back(greeting))[:2] == ("handshake-only", "mysql")


def test_mqtt_connect_and_kafka_header_are_plaintext() -> None:
    body = b"\x00\x04MQTT\x04\xc2\x00\x3c" + b"\x00\x06sensor" + b"\x00\x04user" + b"\x00\x04pass"
    assert verdict(Flow(dport=1883).fwd(b"\x10" + bytes([len(body)]) + body))[:2] == ("plaintext", "mqtt")
    client = b"trainer-producer-1"
    header = struct.pack(">hhih", 18, 3, 7, len(client)) + client + b"\x00" + rand(10)
    assert verdict(Flow(dport=9092).fwd(struct.pack(">I", len(header)) + header))[:2] == ("plaintext", "kafka")


# --- RDP, Slurm --------------------------------------------------------------------------------------


def _x224(code: int, neg_type: int, protocols: int) -> bytes:
    x224 = bytes([code]) + b"\x00\x00\x12\x34\x00" + struct.pack("<BBHI", neg_type, 0, 8, protocols)
    body = bytes([len(x224)]) + x224
    return struct.pack(">BBH", 3, 0, 4 + len(body)) + body


def test_rdp_standard_security_is_unknown_and_tls_negotiation_defers_to_tls() -> None:
    std = verdict(Flow(dport=3389).fwd(_x224(0xE0, 1, 0)).back(_x224(0xD0, 2, 0)))
    assert std[:2] == ("unknown", "rdp") and "RC4" in std[2]
    hello = b"\x16\x03\x01\x00\x40\x01\x00\x00\x3c\x03\x03" + rand(59)
    tls = Flow(dport=3389).fwd(_x224(0xE0, 1, 3)).back(_x224(0xD0, 2, 2)).fwd(hello)
    tls.back(b"\x17\x03\x03\x00\x40" + rand(64))
    assert verdict(tls)[0] == "encrypted"


def test_slurm_rpc_with_munge_is_integrity_only() -> None:
    cred = b"MUNGE:AwQFAAD9" + rand(20)
    header = struct.pack(">HHHIHH", 38 << 8, 0, 1008, 12, 0, 0) + struct.pack(">H", 0)
    body = struct.pack(">I", 101) + struct.pack(">I", len(cred)) + cred + rand(12)
    message = header + body
    protection, protocol, reason = verdict(Flow(dport=6817).fwd(struct.pack(">I", len(message)) + message))
    assert (protection, protocol) == ("integrity-only", "slurm")
    assert "not encrypted" in reason


def test_radius_off_its_ports_needs_every_attribute_inside_the_head() -> None:
    attrs = b"\x01\x07admin" + b"\x04\x06\x0a\x00\x00\x01"
    short = struct.pack(">BBH", 1, 5, 20 + len(attrs)) + rand(16) + attrs  # 33 bytes: walked to its end
    long_attrs = attrs + b"\x1a\xff" + bytes(253)  # a vendor attribute running past the 64-byte head
    long = struct.pack(">BBH", 1, 5, 20 + len(long_attrs)) + rand(16) + long_attrs
    assert verdict(Flow(proto=17, sport=40000, dport=18120).fwd(short))[1] == "radius"
    assert verdict(Flow(proto=17, sport=40000, dport=18120).fwd(long))[1] != "radius"
    assert verdict(Flow(proto=17, sport=40000, dport=1812).fwd(long))[1] == "radius"


def test_radius_attributes_are_plaintext() -> None:
    attrs = b"\x01\x07admin" + b"\x02\x12" + rand(16) + b"\x04\x06\x0a\x00\x00\x01"
    request = struct.pack(">BBH", 1, 5, 20 + len(attrs)) + rand(16) + attrs
    protection, protocol, reason = verdict(Flow(proto=17, sport=40000, dport=1812).fwd(request))
    assert (protection, protocol) == ("plaintext", "radius")
    assert "User-Password" in reason
    assert verdict(Flow(proto=17, dport=1812).fwd(request + b"\x00"))[1] is None  # length must be the datagram's


@pytest.mark.parametrize(
    ("capture", "port", "protection", "protocol"),
    [
        ("RADIUS.pcap", 1812, "plaintext", "radius"),
        ("RADIUS-RFC5176.pcap", 3799, "plaintext", "radius"),
        ("afs.pcap", 88, "handshake-only", "kerberos"),
        ("dhcp-option-108.pcapng", 67, "plaintext", "dhcp"),
        ("dhcpv6-ia-na.pcap", 547, "plaintext", "dhcp"),
    ],
)
def test_service_captures(capture: str, port: int, protection: str, protocol: str) -> None:
    pcap = pytest.importorskip("ringfence.observe.flows.pcap")
    path = CAPTURES / capture
    if not path.exists():
        pytest.skip(f"{path} not present")
    table, _, _, _ = pcap.PcapReader()._read(path, None)
    rows = [r for r in table.to_pylist() if port in (r["sport"], r["dport"])]
    assert rows
    assert {(r["protection"], r["protocol"]) for r in rows} == {(protection, protocol)}


def test_prometheus_scrape_and_h2c_are_named() -> None:
    scrape = verdict(Flow(dport=9100).fwd(b"GET /metrics HTTP/1.1\r\nHost: node-7:9100\r\n\r\n"))
    assert scrape[:2] == ("plaintext", "http") and "Prometheus" in scrape[2]
    h2c = verdict(Flow(dport=2379).fwd(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes(9)))
    assert h2c[:2] == ("plaintext", "http2") and "gRPC" in h2c[2]
