"""Userspace IPsec without a lab: the charon and swanctl configuration, the strict ruleset, the SA reader, the CRL."""

from __future__ import annotations

import subprocess
from datetime import timedelta
from pathlib import Path

import pytest
from cryptography import x509

from ringfence.errors import InputError
from ringfence.policy.model import Layer
from ringfence.secure import pki
from ringfence.secure.layers import ipsec, registry
from ringfence.secure.layers.interface import Endpoint, LayerError, RenderOptions
from ringfence.secure.layers.ipsec_sas import parse_sas

ASSETS = Path(__file__).parent / "assets"
A = Endpoint("worker-0", "10.77.1.10", identity="spiffe://lab/node/worker-0")
B = Endpoint("worker-1", "10.77.1.11", identity="spiffe://lab/node/worker-1")


def test_charon_conf_keeps_everything_in_its_own_directory() -> None:
    conf = ipsec.charon_conf("/run/ringfence/secure/rfx/hosts/worker-0/ipsec")
    d = "/run/ringfence/secure/rfx/hosts/worker-0/ipsec"
    assert conf.count(f"unix://{d}/charon.vici") == 2  # the daemon's socket is the one swanctl uses
    assert f"path = {d}/charon.log" in conf
    assert "allow_peer_ts = yes" in conf and "fwmark = !0x42" in conf and "fwmark = 0x42" in conf
    assert "make_before_break = yes" in conf
    plugins = conf.split("load = ", 1)[1].split("\n", 1)[0].split()
    assert plugins.index("kernel-libipsec") < plugins.index("kernel-netlink")
    assert {"gcm", "vici", "revocation", "socket-default"} <= set(plugins) and "stroke" not in plugins
    assert "/etc/" not in conf and "include" not in conf  # nothing shared with other daemons on the host


def test_libipsec_swanctl_is_host_to_host_tunnels_one_initiator_per_pair() -> None:
    a = ipsec.libipsec_swanctl_conf(A, (B,), RenderOptions(rekey="30m", extra={"child_rekey": "2m"}))
    b = ipsec.libipsec_swanctl_conf(B, (A,), RenderOptions(rekey="30m"))
    for conf, me, peer in ((a, A, B), (b, B, A)):
        assert "rf-worker-0-worker-1 {" in conf and "mode = tunnel" in conf
        assert f"local_ts = {me.address}/32" in conf and f"remote_ts = {peer.address}/32" in conf
        assert f'id = "CN={me.identity}"' in conf and f'id = "CN={peer.identity}"' in conf
        assert "esp_proposals = aes256gcm16-x25519" in conf and "revocation = strict" in conf
    assert "start_action = start" in a and "keyingtries = 0" in a and "dpd_action = restart" in a
    assert "start_action = none" in b and "keyingtries" not in b  # both initiating would duplicate the SAs
    assert "rekey_time = 2m" in a and "rekey_time = 30m" in a
    with pytest.raises(LayerError, match="identities"):
        ipsec.libipsec_swanctl_conf(A, (Endpoint("x", "10.0.0.1"),), RenderOptions())
    with pytest.raises(LayerError, match="cipher"):
        ipsec.libipsec_swanctl_conf(A, (B,), RenderOptions(cipher="rot13"))


def test_strict_ruleset_admits_only_ike_and_esp_in_udp_outside_the_tunnel() -> None:
    nft = ipsec.strict_ruleset(["10.77.1.11", "10.77.1.12"])
    assert "ip daddr { 10.77.1.11, 10.77.1.12 } meta mark 0x42 udp sport { 500, 4500 } udp dport { 500, 4500 } " \
           "accept" in nft
    assert 'oifname != "ipsec*" counter name plaintext_out drop' in nft
    assert 'iifname != "ipsec*" counter name plaintext_in drop' in nft


def test_strict_ruleset_is_valid_nftables() -> None:
    res = subprocess.run(["nft", "--check", "-f", "-"], input=ipsec.strict_ruleset(["10.77.1.11"]).encode(),
                         capture_output=True)
    if res.returncode != 0 and b"Operation not permitted" in res.stderr:
        pytest.skip("nft --check needs CAP_NET_ADMIN here")
    assert res.returncode == 0, res.stderr


def test_ipsec_is_a_lab_layer() -> None:
    assert Layer.IPSEC in registry.LAB_LAYERS


def test_parse_sas_reads_a_rekeyed_tunnel() -> None:
    (sa,) = parse_sas((ASSETS / "swanctl-list-sas-rekeyed.txt").read_text())
    assert (sa.name, sa.uniqueid, sa.state) == ("rf", 7, "ESTABLISHED")
    assert sa.local_id == "CN=spiffe://lab/node/a" and sa.remote_port == 4500
    old, new = sa.children
    assert (old.state, new.state) == ("DELETED", "INSTALLED")
    assert old.bytes_in == 468 and old.packets_in == 3 and old.spi_out == "8eb005db"
    assert new.mode == "TUNNEL-in-UDP" and new.proposal == "ESP:AES_GCM_16-256/CURVE_25519"
    assert sa.installed() == (new,)
    assert parse_sas("") == ()


def test_parse_sas_refuses_a_child_without_an_ike_sa() -> None:
    with pytest.raises(LayerError, match="outside an IKE SA"):
        parse_sas("  rf: #2, reqid 1, INSTALLED, TUNNEL-in-UDP, ESP:AES_GCM_16-256\n")


def test_crl_lists_revoked_serials_signed_by_the_ca(tmp_path: Path) -> None:
    pki.init_ca(tmp_path, "lab")
    keep = pki.issue(tmp_path, "spiffe://lab/node/worker-0", lifetime=timedelta(hours=1))
    gone = pki.issue(tmp_path, "spiffe://lab/node/worker-1", lifetime=timedelta(hours=1))
    assert list(x509.load_der_x509_crl(pki.crl(tmp_path))) == []
    pki.revoke(tmp_path, gone.cert_path)
    pki.revoke(tmp_path, gone.cert_path)  # twice: listed once
    crl = x509.load_der_x509_crl(pki.crl(tmp_path))
    ca, _ = pki.load_ca(tmp_path)
    assert crl.is_signature_valid(ca.public_key())  # type: ignore[arg-type]
    assert [r.serial_number for r in crl] == [gone.info.serial]
    assert crl.get_revoked_certificate_by_serial_number(keep.info.serial) is None
    # strongSwan finds the CRL by its issuer's key identifier
    aki = crl.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
    assert aki.key_identifier == ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value.digest
    assert pki.revoked_serials(tmp_path) == {gone.info.serial}


def test_revoked_serials_file_that_is_not_hex_is_an_input_error(tmp_path: Path) -> None:
    pki.init_ca(tmp_path, "lab")
    (tmp_path / "ca" / "revoked-serials.txt").write_text("zz\n")
    with pytest.raises(InputError, match="hex serial"):
        pki.revoked_serials(tmp_path)
