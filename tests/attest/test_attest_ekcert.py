"""The EK certificate chain at enrolment: certificates made here with cryptography, and swtpm's local CA."""

from __future__ import annotations

import shutil
import struct
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID
from swtpm_kit import swtpm

from ringfence.attest.ekcert import check_ek_certificate, load_ek_roots
from ringfence.attest.interface import AttestError
from ringfence.attest.node import NodeTpm
from ringfence.attest.verifier import enrol

NOW = datetime(2026, 12, 1, tzinfo=UTC)
Key = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _cert(subject: str, key: Key | rsa.RSAPublicKey, issuer: str, signer: Key, *, ca: bool,
          days: tuple[int, int] = (-30, 3650)) -> x509.Certificate:
    pub = key if isinstance(key, rsa.RSAPublicKey) else key.public_key()
    return (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(_name(issuer))
            .public_key(pub).serial_number(x509.random_serial_number())
            .not_valid_before(NOW + timedelta(days=days[0])).not_valid_after(NOW + timedelta(days=days[1]))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
            .sign(signer, hashes.SHA256()))


def _ek_public(key: rsa.RSAPublicKey) -> bytes:
    """The TPM2B_PUBLIC of an RSA 2048 EK (template L-1: AES-128-CFB, no scheme, default exponent)."""
    n = key.public_numbers().n.to_bytes(256, "big")
    area = (struct.pack(">HHI", 0x0001, 0x000B, 0x000300B2) + struct.pack(">H", 32) + bytes(32)
            + struct.pack(">HHH", 0x0006, 128, 0x0043) + struct.pack(">H", 0x0010)
            + struct.pack(">HI", 2048, 0) + struct.pack(">H", len(n)) + n)
    return struct.pack(">H", len(area)) + area


@pytest.fixture(scope="module")
def pki() -> dict[str, object]:
    root_key = ec.generate_private_key(ec.SECP384R1())
    mid_key = ec.generate_private_key(ec.SECP384R1())
    ek_key = rsa.generate_private_key(65537, 2048)
    root = _cert("TPM Vendor Root", root_key, "TPM Vendor Root", root_key, ca=True)
    mid = _cert("TPM Vendor EK CA 1", mid_key, "TPM Vendor Root", root_key, ca=True)
    ek = _cert("TPM EK", ek_key.public_key(), "TPM Vendor EK CA 1", mid_key, ca=False)
    return {"root": root, "mid": mid, "ek": ek, "ek_key": ek_key, "mid_key": mid_key, "root_key": root_key}


def _der(c: object) -> bytes:
    assert isinstance(c, x509.Certificate)
    return c.public_bytes(serialization.Encoding.DER)


def _ekpub(pki: dict[str, object]) -> bytes:
    key = pki["ek_key"]
    assert isinstance(key, rsa.RSAPrivateKey)
    return _ek_public(key.public_key())


def _roots(pki: dict[str, object], *names: str) -> list[x509.Certificate]:
    out = [pki[n] for n in names]
    assert all(isinstance(c, x509.Certificate) for c in out)
    return out  # type: ignore[return-value]


def test_an_ek_certificate_chaining_through_the_vendor_ca_to_its_root_is_accepted(pki: dict[str, object]) -> None:
    assert check_ek_certificate(_der(pki["ek"]), _ekpub(pki), _roots(pki, "root", "mid"), NOW) is None
    # NV indexes are padded after the certificate: the DER length decides
    padded = _der(pki["ek"]) + b"\xff" * 40
    assert check_ek_certificate(padded, _ekpub(pki), _roots(pki, "root", "mid"), NOW) is None


def test_an_ek_without_a_listed_root_or_intermediate_is_refused(pki: dict[str, object]) -> None:
    why = check_ek_certificate(_der(pki["ek"]), _ekpub(pki), _roots(pki, "root"), NOW)
    assert why is not None and "does not chain to a listed TPM manufacturer root" in why
    # an intermediate alone is not a root
    why = check_ek_certificate(_der(pki["ek"]), _ekpub(pki), _roots(pki, "mid"), NOW)
    assert why is not None and "does not chain" in why


def test_a_certificate_of_another_key_is_refused(pki: dict[str, object]) -> None:
    other = rsa.generate_private_key(65537, 2048).public_key()
    why = check_ek_certificate(_der(pki["ek"]), _ek_public(other), _roots(pki, "root", "mid"), NOW)
    assert why == "the EK certificate certifies another key than this TPM's EK"


def test_a_forged_issuer_of_the_same_name_is_refused(pki: dict[str, object]) -> None:
    fake_key = ec.generate_private_key(ec.SECP384R1())
    ek_key = pki["ek_key"]
    assert isinstance(ek_key, rsa.RSAPrivateKey)
    forged = _cert("TPM EK", ek_key.public_key(), "TPM Vendor EK CA 1", fake_key, ca=False)
    why = check_ek_certificate(_der(forged), _ekpub(pki), _roots(pki, "root", "mid"), NOW)
    assert why is not None and "does not chain" in why


def test_an_issuer_that_is_not_a_ca_is_refused(pki: dict[str, object]) -> None:
    root_key, ek_key = pki["root_key"], pki["ek_key"]
    assert isinstance(root_key, ec.EllipticCurvePrivateKey) and isinstance(ek_key, rsa.RSAPrivateKey)
    leafish_key = ec.generate_private_key(ec.SECP384R1())
    leafish = _cert("Not A CA", leafish_key, "TPM Vendor Root", root_key, ca=False)
    ek = _cert("TPM EK", ek_key.public_key(), "Not A CA", leafish_key, ca=False)
    why = check_ek_certificate(_der(ek), _ekpub(pki), [*_roots(pki, "root"), leafish], NOW)
    assert why is not None and "does not chain" in why


def test_an_expired_certificate_in_the_chain_is_refused(pki: dict[str, object]) -> None:
    mid_key, ek_key = pki["mid_key"], pki["ek_key"]
    assert isinstance(mid_key, ec.EllipticCurvePrivateKey) and isinstance(ek_key, rsa.RSAPrivateKey)
    old = _cert("TPM EK", ek_key.public_key(), "TPM Vendor EK CA 1", mid_key, ca=False, days=(-400, -1))
    why = check_ek_certificate(_der(old), _ekpub(pki), _roots(pki, "root", "mid"), NOW)
    assert why is not None and "outside its validity" in why


@pytest.mark.parametrize(("data", "why"), [
    (b"", "holds no EK certificate"),
    (b"\x04\x03abc", "not a DER certificate"),
    (b"\x30\x82\xff\xff" + bytes(10), "the NV index held"),
    (b"\x30\x03abc", "not a certificate"),
])
def test_a_missing_or_unreadable_certificate_is_refused(pki: dict[str, object], data: bytes, why: str) -> None:
    got = check_ek_certificate(data, _ekpub(pki), _roots(pki, "root", "mid"), NOW)
    assert got is not None and why in got


def test_roots_are_loaded_from_pem_files_and_bad_files_are_errors(pki: dict[str, object], tmp_path: Path) -> None:
    pem = b"".join(c.public_bytes(serialization.Encoding.PEM) for c in _roots(pki, "root", "mid"))
    (tmp_path / "vendor.pem").write_bytes(pem)
    assert len(load_ek_roots(["vendor.pem"], tmp_path)) == 2
    (tmp_path / "bad.pem").write_text("not a certificate")
    with pytest.raises(AttestError, match="bad.pem: not PEM"):
        load_ek_roots(["bad.pem"], tmp_path)
    with pytest.raises(AttestError, match="missing.pem"):
        load_ek_roots([str(tmp_path / "missing.pem")], Path("/"))


# --- swtpm with an EK certificate from swtpm's local CA (swtpm_setup --create-ek-cert) ----------------

def _manufactured(directory: Path) -> Path:
    """A TPM state whose EK swtpm_localca certified; returns the CA folder (root and issuer PEMs)."""
    if shutil.which("swtpm_setup") is None or shutil.which("swtpm_localca") is None:
        pytest.skip("swtpm-tools (swtpm_setup, swtpm_localca) not installed")
    ca, state = directory / "ca", directory / "state"
    ca.mkdir(parents=True)
    state.mkdir()
    (directory / "localca.conf").write_text(
        f"statedir = {ca}\nsigningkey = {ca}/signkey.pem\nissuercert = {ca}/issuercert.pem\n"
        f"certserial = {ca}/certserial\n")
    (directory / "setup.conf").write_text(
        f"create_certs_tool = /usr/bin/swtpm_localca\ncreate_certs_tool_config = {directory}/localca.conf\n"
        "active_pcr_banks = sha256\n")
    res = subprocess.run(["swtpm_setup", "--tpm2", "--tpmstate", str(state), "--create-ek-cert", "--config",
                          str(directory / "setup.conf"), "--overwrite"], capture_output=True, timeout=120,
                         check=False)
    assert res.returncode == 0, res.stdout.decode()[-800:] + res.stderr.decode()[-800:]
    return ca


@pytest.mark.slow
def test_enrolment_requires_an_ek_certificate_from_a_listed_root(tmp_path: Path) -> None:
    ca = _manufactured(tmp_path / "a")
    roots = load_ek_roots(["swtpm-localca-rootca-cert.pem", "issuercert.pem"], ca)
    other_key = ec.generate_private_key(ec.SECP256R1())
    other = [_cert("Another Vendor", other_key, "Another Vendor", other_key, ca=True)]
    reg = tmp_path / "reg.json"
    with swtpm(tmp_path / "a", "node-a") as tpm:
        [refused] = enrol([tpm], reg, "site", ek_roots=other)
        assert not refused.enrolled and "does not chain to a listed TPM manufacturer root" in refused.reason
        [ok] = enrol([tpm], reg, "site", ek_roots=roots)
        assert ok.enrolled, ok.reason
    with swtpm(tmp_path / "b", "node-b") as bare:  # no certificate in this TPM at all
        [none] = enrol([bare], reg, "site", ek_roots=roots)
        assert not none.enrolled and "holds no EK certificate" in none.reason
        [tofu] = enrol([bare], reg, "site")  # no roots listed: trust-on-first-use, as before
        assert tofu.enrolled, tofu.reason


def test_node_tpm_reads_no_certificate_as_empty(tmp_path: Path) -> None:
    with swtpm(tmp_path / "a") as tpm:
        assert isinstance(tpm, NodeTpm) and tpm.ek_certificate() == b""
