"""Payload verdicts on real traffic: tcpdump's regression captures, real TLS handshakes, torch tensors.

Captures go through the real reader (:class:`ringfence.observe.flows.pcap.PcapReader`), so these are
end-to-end: file → flows → samples → verdicts.
"""

from __future__ import annotations

import datetime
import ssl
from pathlib import Path

import numpy as np
import pytest
from payload_build import Flow, segments, verdict

from ringfence.observe.flows._pcap_flows import MID_STREAM_NOTE
from ringfence.observe.payload import classify_flows
from ringfence.observe.samples import FlowKeys, PayloadSamples

pcap = pytest.importorskip("ringfence.observe.flows.pcap")

CAPTURES = Path(__file__).resolve().parents[2].parent / "shared" / "captures" / "tcpdump-tests"
ASSETS = Path(__file__).resolve().parents[1] / "assets"


def read(name: str) -> tuple[list[dict[str, object]], FlowKeys, PayloadSamples]:
    path = CAPTURES / name
    if not path.exists():
        pytest.skip(f"{path} not present")
    table, keys, samples, _ = pcap.PcapReader()._read(path, None)
    return table.to_pylist(), keys, samples


@pytest.mark.parametrize(
    ("capture", "protection", "protocol"),
    [
        ("macsec-encrypted.pcap", "encrypted", "macsec"),
        ("macsec-integonly.pcap", "integrity-only", "macsec"),
        ("macsec-changed.pcap", "integrity-only", "macsec"),  # C=1 but E=0: readable
        ("02-sunrise-sunset-esp.pcap", "encrypted", "esp"),
        ("08-sunrise-sunset-esp2.pcap", "encrypted", "esp"),
        ("espudp1.pcap", "encrypted", "esp"),
        ("ikev2four.pcap", "handshake-only", "ike"),
        ("ISAKMP_sa_setup.pcap", "handshake-only", "ike"),
        ("ssh.pcap", "encrypted", "ssh"),
        # Not handshake-only: after 8 long-header packets the capture holds 10 1-RTT short-header packets.
        ("quic_handshake.pcap", "encrypted", "quic"),
        ("gquic.pcap", "handshake-only", "gquic"),
        ("ipv4_tcp_http_xml.pcap", "plaintext", "http"),
        ("dns_udp.pcap", "plaintext", "dns"),
        ("ntp-control.pcap", "plaintext", "ntp"),  # ntpq's mode-6 requests and responses
        ("syslog_udp.pcap", "plaintext", "syslog"),
    ],
)
def test_capture_verdicts(capture: str, protection: str, protocol: str) -> None:
    rows, _, _ = read(capture)
    with_payload = [r for r in rows if r["reason"] != "no payload observed"]
    assert with_payload
    assert {(r["protection"], r["protocol"]) for r in with_payload} == {(protection, protocol)}


def test_ntp_with_a_mac_in_both_directions_is_integrity_only_and_a_crypto_nak_leaves_it_plaintext() -> None:
    rows, _, _ = read("ntp.pcap")
    # four client/server exchanges: two MAC'd both ways (key id 8), one answered by a crypto-NAK, one without MACs
    got = sorted((r["protection"], r["protocol"]) for r in rows)
    assert got == [("integrity-only", "ntp")] * 2 + [("plaintext", "ntp")] * 2
    nak = [r for r in rows if "not every packet is" in str(r["reason"])]
    assert len(nak) == 1


def test_pptp_control_connection_is_plaintext() -> None:
    rows, _, _ = read("pptp.pcap")
    (control,) = [r for r in rows if r["dport"] == 1723]
    assert (control["protection"], control["protocol"]) == ("plaintext", "pptp"), control["reason"]
    assert "MPPE" in str(control["reason"])


def test_hsrp_hellos_inside_erspan_name_the_default_password() -> None:
    rows, _, _ = read("erspan-type-ii-2.pcap")
    hsrp = [r for r in rows if r["dport"] == 1985]
    # v0 hellos to 224.0.0.2 and v2 hellos (a text authentication TLV) to 224.0.0.102, all with "cisco"
    assert {r["dst"] for r in hsrp} == {"224.0.0.2", "224.0.0.102"}
    assert {(r["protection"], r["protocol"]) for r in hsrp} == {("plaintext", "hsrp")}
    assert all('default password "cisco"' in str(r["reason"]) for r in hsrp)


@pytest.mark.parametrize(
    "name",
    [
        # OpenSSH 9.2 client and server on loopback (made for these tests, snaplen 160), 400 kB of `cat`:
        # the server writes its key-exchange reply and NEWKEYS in one 1564-byte segment.
        "ssh-openssh92-loopback.pcap",
        # The same session's server → client packets only (a one-direction mirror): the client's own
        # NEWKEYS is not there, so only the reply segment's length shows the server's.
        "ssh-openssh92-server-only.pcap",
    ],
)
def test_real_ssh_sessions_are_encrypted(name: str) -> None:
    table, _, _, _ = pcap.PcapReader()._read(ASSETS / name, None)
    (row,) = table.to_pylist()
    assert (row["protection"], row["protocol"]) == ("encrypted", "ssh"), row["reason"]
    assert "NEWKEYS" in str(row["reason"])


@pytest.mark.parametrize(
    ("name", "data"),
    [
        # wireguard-go 0.0.20220316 between two namespaces (made for these tests, snaplen 96), a bulk TCP
        # stream through the tunnel: both directions, with a handshake in the middle of the capture …
        ("wireguard-go-bulk.pcap", 14),
        # … and the sender's full-size packets alone (1452 bytes: padding stops at the MTU 1420), which is
        # what a flow's first sampled packets hold when a bulk sender's burst outruns the ACKs.
        ("wireguard-go-bulk-full-size.pcap", 16),
    ],
)
def test_real_wireguard_go_tunnels_are_encrypted(name: str, data: int) -> None:
    table, _, _, _ = pcap.PcapReader()._read(ASSETS / name, None)
    (row,) = table.to_pylist()
    assert (row["protection"], row["protocol"]) == ("encrypted", "wireguard"), row["reason"]
    assert f"{data} transport data messages" in str(row["reason"])


@pytest.mark.parametrize(
    ("mode", "protection", "words"),
    [
        # A real Spark 4.3 standalone cluster (Master, Worker, executor JVMs) on loopback, one reduceByKey job per
        # mode, its transport's flows only (tests/assets/make_spark_captures.sh, snaplen 160): without
        # authentication …
        ("plain", "plaintext", "in clear"),
        # … with spark.network.crypto: the AuthMessage header and body are written apart, then TransportCipher …
        ("crypto", "encrypted", "TransportCipher"),
        # … with SASL authentication and frames in clear after it …
        ("sasl", "plaintext", "after SASL authentication"),
        # … and with SASL encryption, which the packets do not show.
        ("saslenc", "unknown", "enableSaslEncryption"),
    ],
)
def test_real_spark_clusters_by_their_protection(mode: str, protection: str, words: str) -> None:
    table, _, _, _ = pcap.PcapReader()._read(ASSETS / f"spark43-{mode}.pcap", None)
    rows = table.to_pylist()
    assert len(rows) == 6  # the job's six transport connections (to the master, the driver, the block managers)
    assert {(r["protection"], r["protocol"]) for r in rows} == {(protection, "spark")}
    assert all(words in str(r["reason"]) for r in rows), rows[0]["reason"]


def _assets(name: str) -> list[dict[str, object]]:
    table, _, _, _ = pcap.PcapReader()._read(ASSETS / name, None)
    return [r for r in table.to_pylist() if r["payload_bytes"]]


def test_real_key_value_stores_and_zookeeper_are_plaintext_and_name_their_passwords() -> None:
    # Debian 12's redis-server 7.0 (requirepass), memcached 1.6 (text, binary and UDP) and ZooKeeper 3.8 with zkCli
    # on loopback (tests/assets/make_service_captures.sh)
    redis = _assets("redis7.pcap")
    assert len(redis) == 5 and {(r["protection"], r["protocol"]) for r in redis} == {("plaintext", "redis")}
    assert all("1 AUTH sends the password itself" in str(r["reason"]) for r in redis)
    bus = _assets("redis7-cluster.pcap")
    assert len(bus) == 6 and {(r["protection"], r["protocol"]) for r in bus} == {("plaintext", "redis")}
    assert all("Cluster bus" in str(r["reason"]) for r in bus)
    memcached = _assets("memcached16.pcap")
    assert len(memcached) == 6 and {(r["protection"], r["protocol"]) for r in memcached} == {("plaintext", "memcached")}
    (udp,) = [r for r in memcached if r["proto"] == 17]
    assert "CVE-2018-1000115" in str(udp["reason"])
    assert {"binary" in str(r["reason"]) for r in memcached} == {True, False}
    (zk,) = _assets("zookeeper38.pcap")
    assert (zk["protection"], zk["protocol"]) == ("plaintext", "zookeeper")
    assert "digest AuthPackets send user:password" in str(zk["reason"])


def test_real_ptp4l_is_plaintext_without_authentication_tlvs() -> None:
    # ptp4l 3.1 master and slave (software timestamps, UDPv4) between two namespaces: Sync, Follow_Up, Delay_Req,
    # Delay_Resp and Announce, none with an AUTHENTICATION TLV
    rows = _assets("ptp4l31.pcap")
    assert {r["dport"] for r in rows} == {319, 320}
    assert {(r["protection"], r["protocol"]) for r in rows} == {("plaintext", "ptp")}
    assert all("without an AUTHENTICATION TLV" in str(r["reason"]) for r in rows)


def test_real_frr_bfd_sessions_are_plaintext() -> None:
    # FRR 8.4's bfdd, one single-hop session between two namespaces (FRR's BFD has no authentication)
    rows = _assets("frr84-bfd.pcap")
    assert len(rows) == 2 and {(r["protection"], r["protocol"]) for r in rows} == {("plaintext", "bfd")}
    assert all("without authentication" in str(r["reason"]) for r in rows)


@pytest.mark.parametrize(
    ("mode", "protection", "words"),
    [
        # Two OpenVPN 2.6 processes on loopback (--dev null, a ping each second; make_service_captures.sh): the
        # control channel without tls-auth, with tls-auth and with tls-crypt, over UDP, and over TCP …
        ("plain", "encrypted", "without tls-auth/tls-crypt"),
        ("tls-auth", "encrypted", "under tls-auth"),
        ("tls-crypt", "encrypted", "under tls-crypt"),
        ("tcp", "encrypted", "4 data packets"),
        # … and with --data-ciphers none: the pings cross in clear, after their HMAC and packet id
        ("cipher-none", "plaintext", "--cipher none"),
    ],
)
def test_real_openvpn_sessions_by_their_data_channel(mode: str, protection: str, words: str) -> None:
    (row,) = _assets(f"openvpn26-{mode}.pcap")
    assert (row["protection"], row["protocol"]) == (protection, "openvpn"), row["reason"]
    assert words in str(row["reason"])


def test_quic_capture_cut_after_the_long_headers_is_handshake_only() -> None:
    _, keys, samples = read("quic_handshake.pcap")
    first = np.arange(samples.m) < 8  # the reader keeps the first packets in time order
    cut = PayloadSamples(
        flow=samples.flow[first], forward=samples.forward[first], length=samples.length[first], head=samples.head[first]
    )
    protection, protocol, reason = classify_flows(keys, cut)
    assert (protection[0], protocol[0]) == ("handshake-only", "quic")
    assert "Initial x3, Handshake x5" in reason[0]


def test_ip_over_infiniband_is_judged_by_the_ip_inside() -> None:
    rows, _, _ = read("ipoib.pcap")
    verdicts = {(r["protection"], r["protocol"]) for r in rows}
    assert ("plaintext", "icmp") in verdicts
    assert ("encrypted", "ssh") in verdicts


def test_truncated_and_hostile_captures_do_not_break_the_classifier() -> None:
    for name in ("esp_truncated.pcap", "heapoverflow-tcp_print.pcap", "udp-length-heapoverflow.pcap"):
        rows, _, _ = read(name)
        assert all(
            r["protection"] in {"encrypted", "plaintext", "integrity-only", "handshake-only", "unknown"} for r in rows
        )


# --- real TLS, produced by OpenSSL through Python's ssl module (memory BIOs, no sockets) ----------


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "storage.lab")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    d = tmp_path_factory.mktemp("tls")
    (d / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    (d / "key.pem").write_bytes(pem)
    return d / "cert.pem", d / "key.pem"


def tls_flow(cert: tuple[Path, Path], version: ssl.TLSVersion, *, app_data: bool) -> Flow:
    """A real TLS connection's bytes, each flight cut into TCP segments, in order."""
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(*cert)
    client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_ctx.check_hostname = False
    client_ctx.verify_mode = ssl.CERT_NONE
    for ctx in (server_ctx, client_ctx):
        ctx.minimum_version = ctx.maximum_version = version
    c_in, c_out, s_in, s_out = (ssl.MemoryBIO() for _ in range(4))
    client = client_ctx.wrap_bio(c_in, c_out)
    server = server_ctx.wrap_bio(s_in, s_out, server_side=True)
    flow = Flow(dport=8443)

    def pump() -> None:
        if sent := c_out.read():
            flow.fwd(*segments(sent))
            s_in.write(sent)
        if sent := s_out.read():
            flow.back(*segments(sent))
            c_in.write(sent)

    done = {"client": False, "server": False}
    for _ in range(10):
        for side, conn in (("client", client), ("server", server)):
            if not done[side]:
                try:
                    conn.do_handshake()
                    done[side] = True
                except ssl.SSLWantReadError:
                    pass
            pump()
        if all(done.values()):
            break
    if app_data:
        client.write(b"GET /checkpoint/step-1000.pt HTTP/1.1\r\nHost: storage\r\n\r\n")
        pump()
        server.read(4096)
        server.write(np.random.default_rng(0).normal(0, 1, 4096).astype(np.float32).tobytes())
        pump()
    return flow


@pytest.mark.parametrize(
    ("version", "protocol"), [(ssl.TLSVersion.TLSv1_3, "tls1.3"), (ssl.TLSVersion.TLSv1_2, "tls1.2")]
)
def test_real_tls_with_application_data_is_encrypted(
    certificate: tuple[Path, Path], version: ssl.TLSVersion, protocol: str
) -> None:
    protection, name, reason = verdict(tls_flow(certificate, version, app_data=True))
    assert (protection, name) == ("encrypted", protocol)
    assert "content type 23" in reason


def test_real_tls_handshake_without_data_is_handshake_only(certificate: tuple[Path, Path]) -> None:
    flow = tls_flow(certificate, ssl.TLSVersion.TLSv1_2, app_data=False)
    assert verdict(flow)[:2] == ("handshake-only", "tls1.2")


def test_torch_bf16_and_float32_tensors_are_plaintext() -> None:
    torch = pytest.importorskip("torch")
    gen = torch.Generator().manual_seed(0)
    grads = torch.randn(16384, generator=gen) * 1e-3
    for dtype, protocol in ((torch.bfloat16, "tensor-bf16"), (torch.float32, "tensor-f32")):
        data = grads.to(dtype).view(torch.uint8).numpy().tobytes()
        assert verdict(Flow(dport=45001).fwd(*segments(data[1:])[:8]))[:2] == ("plaintext", protocol)


# --- the lab as found: plaintext everywhere but SSH --------------------------------------------


@pytest.mark.privileged
def test_lab_traffic_as_found(lab_capture: Path) -> None:
    table, _, _, _ = pcap.PcapReader()._read(lab_capture, None)
    seen = [r for r in table.to_pylist() if r["reason"] != "no payload observed"]
    # A connection already past its handshake when the capture began (a busy machine delays the
    # capture's start) cannot be named from ciphertext: it must be unknown and say why, never judged.
    joined = [r for r in seen if MID_STREAM_NOTE in r["reason"]]
    assert all(r["protection"] == "unknown" for r in joined)
    rows = [r for r in seen if r not in joined]
    ssh = [r for r in rows if r["dport"] == 22]
    assert ssh
    assert all(r["protocol"] == "ssh" and r["protection"] in {"encrypted", "handshake-only"} for r in ssh)
    others = [r for r in rows if r["dport"] != 22]
    assert not [r for r in others if r["protection"] == "encrypted"], "only SSH is protected in the as-found lab"
    collective = [r for r in others if r["protocol"] == "gloo" or str(r["protocol"]).startswith("tensor-")]
    assert collective
    assert all(r["protection"] == "plaintext" for r in collective)
    web = [r for r in others if r["dport"] in (8000, 8080, 9000)]  # management, storage, replication
    assert web and all(r["protection"] == "plaintext" for r in web)
    # A response whose request came before the capture began (the client sent only ACKs in it: at most
    # Ethernet + IPv4 + TCP with options, 66 bytes, a frame) shows a body and no HTTP line: plaintext text is
    # then its right verdict. Every exchange the capture holds from the request on is named HTTP.
    with_request = [r for r in web if r["bytes_fwd"] > 66 * r["packets_fwd"]]
    assert with_request
    assert {r["protocol"] for r in with_request} == {"http"}
    assert {r["protocol"] for r in web} <= {"http", "text"}
