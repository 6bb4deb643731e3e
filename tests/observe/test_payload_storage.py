"""Storage protocols, built to their specifications: ONC RPC / NFS (RFC 5531, RPCSEC_GSS RFC 2203),
SMB2/3 (MS-SMB2), iSCSI (RFC 7143), NVMe/TCP, Ceph msgr2 and Lustre LNet; and tcpdump's NFS/SMB captures."""

from __future__ import annotations

import random
import struct
from pathlib import Path

import pytest
from payload_build import Flow, verdict

RNG = random.Random(20261201)
CAPTURES = Path(__file__).resolve().parents[2].parent / "shared" / "captures" / "tcpdump-tests"


def rand(n: int) -> bytes:
    return RNG.randbytes(n)


def _opaque(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data + bytes(-len(data) % 4)


def auth_sys() -> tuple[int, bytes]:
    return 1, struct.pack(">I", 0x5F00AA01) + _opaque(b"node-7") + struct.pack(">III", 1000, 1000, 0)


def gss(service: int, proc: int = 0) -> tuple[int, bytes]:
    return 6, struct.pack(">IIII", 1, proc, 17, service) + _opaque(rand(16))


def rpc_call(cred: tuple[int, bytes], *, prog: int = 100003, vers: int = 3, proc: int = 7, tcp: bool = True,
             body: bytes = b"") -> bytes:  # fmt: skip
    flavour, cred_body = cred
    verf = struct.pack(">II", 0, 0) if flavour != 6 else struct.pack(">I", 6) + _opaque(rand(28))
    msg = struct.pack(">IIIIII", RNG.getrandbits(32), 0, 2, prog, vers, proc)
    msg += struct.pack(">I", flavour) + _opaque(cred_body) + verf + body
    return struct.pack(">I", 0x80000000 | len(msg)) + msg if tcp else msg


def rpc_reply(verf_flavour: int = 0, *, tcp: bool = True, body: bytes = b"") -> bytes:
    verf = struct.pack(">II", 0, 0) if verf_flavour == 0 else struct.pack(">I", 6) + _opaque(rand(28))
    msg = struct.pack(">III", RNG.getrandbits(32), 1, 0) + verf + struct.pack(">I", 0) + body
    return struct.pack(">I", 0x80000000 | len(msg)) + msg if tcp else msg


def nfs(*packets: bytes, proto: int = 6) -> Flow:
    return Flow(proto=proto, sport=801, dport=2049).fwd(*packets)


def test_nfs_auth_sys_is_plaintext() -> None:
    flow = nfs(rpc_call(auth_sys(), body=b"\x00\x00\x00\x20" + rand(32) + b"file contents in clear" * 20))
    flow.back(rpc_reply(body=b"\x00" * 100))
    protection, protocol, reason = verdict(flow)
    assert (protection, protocol) == ("plaintext", "nfs")
    assert "program 100003 v3" in reason and "AUTH_SYS" in reason


def test_nfsv4_over_udp_and_other_rpc_programs() -> None:
    v4 = verdict(nfs(rpc_call(auth_sys(), vers=4, proc=1, tcp=False), proto=17))
    assert v4[:2] == ("plaintext", "nfs") and "v4" in v4[2]
    portmap = verdict(Flow(proto=17, dport=111).fwd(rpc_call(auth_sys(), prog=100000, vers=2, proc=3, tcp=False)))
    assert portmap[:2] == ("plaintext", "onc-rpc")


def _starttls_reply() -> bytes:
    msg = struct.pack(">IIII", RNG.getrandbits(32), 1, 0, 0) + _opaque(b"STARTTLS") + struct.pack(">I", 0)
    return struct.pack(">I", 0x80000000 | len(msg)) + msg


def test_nfs_over_tls_is_judged_by_its_tls_and_names_the_rpc_upgrade() -> None:
    probe = rpc_call((7, b""), proc=0)  # RFC 9289 §4.1: a NULL call with an empty AUTH_TLS credential
    hello = bytes([22, 3, 1, 0, 200, 1, 0, 0, 196, 3, 3]) + rand(53)
    server = bytes([22, 3, 3, 0, 90, 2, 0, 0, 86, 3, 3]) + rand(53)
    flow = nfs(probe, hello, bytes([23, 3, 3, 1, 0]) + rand(59)).back(_starttls_reply(), server,
                                                                      bytes([23, 3, 3, 1, 0]) + rand(59))  # fmt: skip
    got = verdict(flow)
    assert got[0] == "encrypted" and "RPC-with-TLS AUTH_TLS probe" in got[2], got
    alone = verdict(nfs(probe).back(_starttls_reply()))
    assert alone[:2] == ("handshake-only", "nfs") and "RFC 9289" in alone[2]
    # "STARTTLS" in an AUTH_SYS verifier is not the reply, and the probe needs an empty credential
    assert verdict(nfs(rpc_call((7, b"x"), proc=0)))[0] != "handshake-only"


@pytest.mark.parametrize(
    ("service", "protection"), [(1, "plaintext"), (2, "integrity-only"), (3, "encrypted")]
)  # krb5, krb5i, krb5p
def test_rpcsec_gss_services(service: int, protection: str) -> None:
    flow = nfs(rpc_call(gss(service), body=rand(200)), rpc_call(gss(service), body=rand(200)))
    flow.back(rpc_reply(6, body=rand(100)))
    got, protocol, reason = verdict(flow)
    assert (got, protocol) == (protection, "nfs")
    assert ("krb5", "krb5i", "krb5p")[service - 1] in reason


def test_gss_context_setup_only_is_handshake_and_a_null_ping_does_not_downgrade_krb5p() -> None:
    assert verdict(nfs(rpc_call(gss(1, proc=1), proc=0)))[0] == "handshake-only"
    flow = nfs(rpc_call((0, b""), proc=0), rpc_call(gss(3), body=rand(300))).back(rpc_reply(0), rpc_reply(6))
    assert verdict(flow)[:2] == ("encrypted", "nfs")


def test_krb5i_with_one_auth_sys_call_is_plaintext() -> None:
    flow = nfs(rpc_call(gss(2), body=rand(100)), rpc_call(auth_sys(), body=rand(100)))
    assert verdict(flow)[0] == "plaintext"


def test_rpc_with_a_hostile_credential_length_is_not_rpc() -> None:
    call = bytearray(rpc_call(auth_sys()))
    call[32:36] = b"\xff\xff\xff\xff"  # credential length 4294967295 (tcpdump's nfs_large_credentials_length)
    assert verdict(nfs(bytes(call)))[1] is None


def smb2(command: int, *, signed: bool, session: int = 0x1234, status: int = 0, message_id: int = 5) -> bytes:
    flags = 0x08 if signed else 0
    header = b"\xfeSMB" + struct.pack("<HHIHHIIQIIQ", 64, 1, status, command, 1, flags, 0, message_id, 0, 1, session)
    header += rand(16) if signed else bytes(16)
    body = rand(120)
    return struct.pack(">I", len(header) + len(body)) + header + body


def transform(size: int = 400) -> bytes:
    header = b"\xfdSMB" + rand(16) + rand(16) + struct.pack("<IHHQ", size, 0, 1, 0x1234)
    return struct.pack(">I", len(header) + size) + header + rand(size)


def smb_flow(*packets: bytes) -> Flow:
    return Flow(sport=50000, dport=445).fwd(*packets)


def test_smb2_unsigned_is_plaintext_signed_integrity_transform_encrypted() -> None:
    setup = (smb2(0, signed=False, session=0), smb2(1, signed=False, session=0))
    assert verdict(smb_flow(*setup, smb2(8, signed=False)))[:2] == ("plaintext", "smb2")  # READ, unsigned
    assert verdict(smb_flow(*setup, smb2(8, signed=True)))[:2] == ("integrity-only", "smb2")
    assert verdict(smb_flow(*setup, transform(), transform()))[:2] == ("encrypted", "smb3")
    assert verdict(smb_flow(*setup))[:2] == ("handshake-only", "smb2")


def test_smb2_messages_the_spec_leaves_unsigned_do_not_downgrade() -> None:
    interim = smb2(9, signed=False, status=0x103)  # STATUS_PENDING interim response
    oplock = smb2(18, signed=False, message_id=0xFFFFFFFFFFFFFFFF)
    flow = smb_flow(smb2(0, signed=False, session=0), interim, oplock, smb2(9, signed=True))
    assert verdict(flow)[0] == "integrity-only"


def test_smb1_is_plaintext() -> None:
    smb1 = b"\xffSMB" + bytes([0x2E]) + bytes(27) + rand(40)  # READ_ANDX
    assert verdict(smb_flow(struct.pack(">I", len(smb1)) + smb1))[:2] == ("plaintext", "smb1")


def test_an_smb1_negotiate_offering_smb2_is_a_handshake() -> None:
    negotiate = b"\xffSMB" + bytes([0x72]) + bytes(27) + b"\x00\x0c\x00\x02NT LM 0.12\x00\x02SMB 2.???\x00"
    flow = smb_flow(struct.pack(">I", len(negotiate)) + negotiate, smb2(0, signed=False, session=0))
    flow.fwd(smb2(1, signed=False, session=0), transform(), transform())
    assert verdict(flow)[:2] == ("encrypted", "smb3")


def test_iscsi_login_is_plaintext() -> None:
    data = b"InitiatorName=iqn.2026-12.lab:node-7\x00SessionType=Normal\x00AuthMethod=None\x00"
    bhs = struct.pack(">BBBBB", 0x43, 0x87, 0, 0, 0) + len(data).to_bytes(3, "big") + rand(6) + bytes(34)
    flow = Flow(sport=50000, dport=3260).fwd(bhs + data + bytes(-len(data) % 4))
    protection, protocol, reason = verdict(flow)
    assert (protection, protocol) == ("plaintext", "iscsi")
    assert "login" in reason


def test_nvme_tcp_icreq_is_plaintext() -> None:
    icreq = struct.pack("<BBBBIHBBI", 0, 0, 128, 0, 128, 0, 0, 3, 4) + bytes(112)
    icresp = struct.pack("<BBBBIHBBI", 1, 0, 128, 0, 128, 0, 0, 0, 131072) + bytes(112)
    assert verdict(Flow(dport=4420).fwd(icreq).back(icresp))[:2] == ("plaintext", "nvme-tcp")


def _ceph_frame(tag: int, payload: bytes) -> bytes:
    preamble = struct.pack("<BB", tag, 1) + struct.pack("<IH", len(payload), 8) + bytes(18) + b"\x00\x00"
    return preamble + struct.pack("<I", 0x1234ABCD) + payload


def test_ceph_secure_mode_is_encrypted_and_crc_mode_plaintext() -> None:
    banner = b"ceph v2\n" + struct.pack("<H", 16) + bytes(16)
    hello = _ceph_frame(1, rand(40))
    secure = _ceph_frame(6, struct.pack("<QI", 4107, 2) + rand(40))
    crc = _ceph_frame(6, struct.pack("<QI", 4107, 1) + rand(40))
    enc = Flow(dport=3300).fwd(banner, hello).back(banner, secure, rand(400), rand(900))
    assert verdict(enc)[:2] == ("encrypted", "ceph-msgr2")
    plain = Flow(dport=3300).fwd(banner, hello).back(banner, crc, _ceph_frame(17, rand(200)))
    assert verdict(plain)[:2] == ("plaintext", "ceph-msgr2")
    assert verdict(Flow(dport=3300).fwd(banner, hello))[0] == "handshake-only"


def test_lnet_acceptor_is_unknown_with_its_reason() -> None:
    connreq = struct.pack("<IIQ", 0xACCE7100, 1, 0x20000C0A80001)
    protection, protocol, reason = verdict(Flow(dport=988).fwd(connreq + rand(48)))
    assert (protection, protocol) == ("unknown", "lnet")
    assert "sptlrpc" in reason


def _rx(kind: int, security: int, body: bytes, *, epoch: int = 0x3829A1B2, cid: int = 0x1B557A5C) -> bytes:
    header = struct.pack(">IIIIIBBBBHH", epoch, cid, 290, 1, 431, kind, 5, 0, security, 0, 1)
    return header + body


def test_afs_rx_by_security_index() -> None:
    call = struct.pack(">IIII", 132, 536871098, 846, 1049757)  # fetch-status, fid: readable
    null = Flow(proto=17, sport=7001, dport=7000).fwd(_rx(1, 0, call)).back(_rx(1, 0, bytes(40) + call))
    assert verdict(null)[:2] == ("plaintext", "rx")
    kad = Flow(proto=17, sport=7001, dport=7000).fwd(_rx(1, 2, call + bytes(32))).back(_rx(2, 2, rand(20)))
    assert verdict(kad)[:2] == ("plaintext", "rx")
    crypt = Flow(proto=17, sport=7001, dport=7000).fwd(_rx(1, 2, rand(200))).back(_rx(2, 2, rand(20)))
    assert verdict(crypt)[:2] == ("unknown", "rx")
    # One header alone, or two that disagree on the connection, are not Rx.
    assert verdict(Flow(proto=17, dport=7000).fwd(_rx(1, 0, call)))[1] is None
    other = Flow(proto=17, dport=7000).fwd(_rx(1, 0, call), _rx(1, 0, call, cid=0x0BADF00C))
    assert verdict(other)[1] is None


def test_afs_capture_is_judged_rx_and_kerberos() -> None:
    pcap = pytest.importorskip("ringfence.observe.flows.pcap")
    path = CAPTURES / "afs.pcap"
    if not path.exists():
        pytest.skip(f"{path} not present")
    table, _, _, _ = pcap.PcapReader()._read(path, None)
    rows = table.to_pylist()
    rx = [r for r in rows if r["protocol"] == "rx"]
    assert len(rx) >= 10
    assert {r["protection"] for r in rx} <= {"plaintext", "unknown"}  # never encrypted: nothing proves it
    assert any("rxnull" in str(r["reason"]) for r in rx)


@pytest.mark.parametrize(
    ("capture", "protection", "protocol"),
    [
        ("nfs-write-verf-cookie.pcapng", "plaintext", "nfs"),  # NFSv3 WRITE/COMMIT, AUTH_SYS
        ("nfs-seg-fault-1.pcapng", "plaintext", "nfs"),
        ("unaligned-nfs-1.pcap", "plaintext", "onc-rpc"),  # one reply with an AUTH_NONE verifier
        ("smb_data_print-segv.pcap", "plaintext", "smb1"),
    ],
)
def test_storage_captures(capture: str, protection: str, protocol: str) -> None:
    pcap = pytest.importorskip("ringfence.observe.flows.pcap")
    path = CAPTURES / capture
    if not path.exists():
        pytest.skip(f"{path} not present")
    table, _, _, _ = pcap.PcapReader()._read(path, None)
    rows = [r for r in table.to_pylist() if r["reason"] != "no payload observed"]
    assert {(r["protection"], r["protocol"]) for r in rows} == {(protection, protocol)}


# --- DRBD and BeeGFS ---------------------------------------------------------------------------


def drbd80(command: int, body: bytes) -> bytes:
    return struct.pack(">IHH", 0x83740267, command, len(body)) + body


def drbd95(command: int, body: bytes, size: int | None = None) -> bytes:
    return struct.pack(">HHI", 0x835A, command, len(body) if size is None else size) + body


def drbd100(command: int, body: bytes, pad: int = 0) -> bytes:
    return struct.pack(">IHHII", 0x8620EC20, 0, command, len(body), pad) + body


def test_drbd_replication_is_plaintext_and_names_the_blocks_and_the_peer_authentication() -> None:
    features = drbd80(0xFFFE, struct.pack(">IIII", 86, 0xF, 121, 0) + bytes(16))
    got = verdict(Flow(sport=40000, dport=7789).fwd(features, drbd100(0x10, RNG.randbytes(32)),
                                                      drbd100(0x00, bytes(24) + b"A" * 1400)))  # fmt: skip
    assert got[:2] == ("plaintext", "drbd")
    assert "3 packets in clear" in got[2] and "1 of them with the replicated disk's blocks" in got[2]
    assert "authenticated each other at connect" in got[2]
    got = verdict(Flow(sport=40000, dport=7789).fwd(drbd95(0x13, b"")))  # P_PING in DRBD 8.3.x framing
    assert got[:2] == ("plaintext", "drbd") and "cram-hmac-alg, where set" in got[2]


@pytest.mark.parametrize(
    "payload",
    [
        drbd100(0x00, bytes(40), pad=1),  # p_header100's pad must be zero
        drbd95(0x1234, bytes(8)),  # not a command
        drbd95(0x00, bytes(8), size=1 << 24),  # larger than any bio
        b"\x83\x74\x02\x68" + drbd80(0x00, bytes(8))[4:],  # one bit off the magic
    ],
)
def test_drbd_needs_its_exact_header(payload: bytes) -> None:
    assert verdict(Flow(sport=40000, dport=7789).fwd(payload))[1] != "drbd"


def beegfs(msg_type: int, body: bytes, flags: int = 0, prefix: bytes = b"\0\0\0\0SFGB") -> bytes:
    head = struct.pack("<IHBB", 40 + len(body), 0, 0, flags) + prefix
    return head + struct.pack("<HHIQQ", msg_type, 0, 0xFFFFFFFF, 0, 0) + body


def test_beegfs_is_plaintext_and_names_connection_authentication() -> None:
    got = verdict(Flow(sport=40000, dport=8005).fwd(beegfs(4007, struct.pack("<Q", 0x1234)), beegfs(2001, bytes(60))))
    assert got[:2] == ("plaintext", "beegfs") and "1 AuthenticateChannel message" in got[2]
    assert "encrypts nothing" in got[2]


@pytest.mark.parametrize(
    "payload",
    [
        beegfs(2001, bytes(20), flags=0x08),  # an undefined header flag
        beegfs(2001, bytes(20), prefix=b"\0\0\0\0SFGC"),  # not the prefix
        struct.pack("<I", 12) + beegfs(2001, bytes(20))[4:],  # shorter than its own header
    ],
)
def test_beegfs_needs_its_exact_header(payload: bytes) -> None:
    assert verdict(Flow(sport=40000, dport=8005).fwd(payload))[1] != "beegfs"
