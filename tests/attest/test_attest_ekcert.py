"""The EK certificate chain at enrolment: certificates made here with cryptography, and swtpm's local CA."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from ek_kit import CA_USAGE, NOW, Pki, cert, crl, der, ek_public_ecc, ek_public_rsa, make_pki
from swtpm_kit import swtpm

from ringfence.attest.ekcert import (
    EK_CERT_INDICES,
    EK_CERT_NV_ECC,
    EK_CERT_NV_RSA,
    check_ek_certificate,
    check_ek_certificates,
    load_ek_roots,
)
from ringfence.attest.ekcrl import EkCrl
from ringfence.attest.interface import AttestError
from ringfence.attest.node import NodeTpm
from ringfence.attest.structures import parse_public
from ringfence.attest.verifier import enrol


@pytest.fixture(scope="module")
def pki() -> Pki:
    return make_pki()


def test_an_ek_certificate_chaining_through_the_vendor_ca_to_its_root_is_accepted(pki: Pki) -> None:
    assert check_ek_certificate(der(pki.rsa_ek), pki.rsa_ek_public(), pki.anchors, NOW) is None
    # NV indexes are padded after the certificate: the DER length decides
    padded = der(pki.rsa_ek) + b"\xff" * 40
    assert check_ek_certificate(padded, pki.rsa_ek_public(), pki.anchors, NOW) is None
    # the ECC EK (P-256, template L-2) by its certificate at 0x01c0000a
    found = {EK_CERT_NV_ECC: der(pki.ecc_ek), "0x01c00014": b""}
    assert check_ek_certificates(found, pki.ecc_ek_public(), pki.anchors, NOW) is None


def test_the_profile_indices_are_the_tcg_ones() -> None:
    assert EK_CERT_NV_RSA == "0x01c00002" and EK_CERT_NV_ECC == "0x01c0000a"
    assert EK_CERT_INDICES["rsa"][0] == EK_CERT_NV_RSA and "0x01c00016" in EK_CERT_INDICES["ecc"]


def test_each_ek_kind_needs_its_own_certificate(pki: Pki) -> None:
    # an ECC EK is never certified by the RSA EK's certificate, nor an RSA EK by the ECC one
    why = check_ek_certificates({EK_CERT_NV_ECC: der(pki.rsa_ek)}, pki.ecc_ek_public(), pki.anchors, NOW)
    assert why == f"NV {EK_CERT_NV_ECC}: the EK certificate certifies an RSA key; this TPM's EK is ECC"
    why = check_ek_certificate(der(pki.ecc_ek), pki.rsa_ek_public(), pki.anchors, NOW)
    assert why == "the EK certificate certifies an ECC key; this TPM's EK is RSA"
    # the certificate of this EK's key decides, whichever index holds it
    found = {EK_CERT_NV_ECC: der(pki.rsa_ek), "0x01c00016": der(pki.ecc_ek)}
    assert check_ek_certificates(found, pki.ecc_ek_public(), pki.anchors, NOW) is None


def test_a_tpm_without_a_certificate_of_its_ek_is_refused(pki: Pki) -> None:
    why = check_ek_certificates(dict.fromkeys(EK_CERT_INDICES["ecc"], b""), pki.ecc_ek_public(), pki.anchors, NOW)
    assert why is not None and "holds no EK certificate for its ECC EK (NV 0x01c0000a" in why


def test_a_certificate_of_another_key_is_refused(pki: Pki) -> None:
    other = rsa.generate_private_key(65537, 2048).public_key()
    why = check_ek_certificate(der(pki.rsa_ek), ek_public_rsa(other), pki.anchors, NOW)
    assert why == "the EK certificate certifies another key than this TPM's EK"
    other_ecc = ec.generate_private_key(ec.SECP256R1()).public_key()
    why = check_ek_certificate(der(pki.ecc_ek), ek_public_ecc(other_ecc), pki.anchors, NOW)
    assert why == "the EK certificate certifies another key than this TPM's EK"
    # same point, another curve: a P-384 EK is not certified by a P-256 certificate
    p384 = ec.generate_private_key(ec.SECP384R1())
    why = check_ek_certificate(der(pki.ecc_ek), ek_public_ecc(p384.public_key(), 0x000C), pki.anchors, NOW)
    assert why == "the EK certificate certifies another key than this TPM's EK"
    assert check_ek_certificate(der(pki.ek_cert(p384)), ek_public_ecc(p384.public_key(), 0x000C),
                                pki.anchors, NOW) is None


def test_an_unknown_algorithm_is_refused_by_name(pki: Pki) -> None:
    ed = ed25519.Ed25519PrivateKey.generate().public_key()
    why = check_ek_certificate(der(pki.ek_cert(ed, key_usage={"key_agreement": True})), pki.ecc_ek_public(),
                               pki.anchors, NOW)
    assert why is not None and "Ed25519PublicKey: not an RSA or ECC EK" in why
    small = rsa.generate_private_key(65537, 1024)
    why = check_ek_certificate(der(pki.ek_cert(small)), pki.rsa_ek_public(), pki.anchors, NOW)
    assert why is not None and "1024 bits" in why
    # an EK of a type that is neither RSA nor ECC (a keyed hash): refused, never matched to a certificate
    public = bytearray(pki.rsa_ek_public())
    public[2:4] = b"\x00\x08"
    why = check_ek_certificate(der(pki.rsa_ek), bytes(public), pki.anchors, NOW)
    assert why is not None and "unsupported key type 0x0008" in why


@pytest.mark.parametrize(("kind", "bits", "why"), [
    ("rsa", None, "has no keyUsage"),
    ("rsa", {"key_agreement": True}, "lacks keyEncipherment"),
    ("rsa", {"digital_signature": True}, "lacks keyEncipherment"),
    ("ecc", {"key_encipherment": True}, "lacks keyAgreement"),
])
def test_the_profile_key_usage_is_required(pki: Pki, kind: str, bits: dict[str, bool] | None, why: str) -> None:
    key = pki.rsa_key if kind == "rsa" else pki.ecc_key
    c = cert("TPM EK", key, "TPM Vendor EK CA 1", pki.mid_key, ca=False, key_usage=bits)
    public = pki.rsa_ek_public() if kind == "rsa" else pki.ecc_ek_public()
    got = check_ek_certificate(der(c), public, pki.anchors, NOW)
    assert got is not None and why in got


def test_an_ek_certificate_that_is_a_ca_is_refused(pki: Pki) -> None:
    c = cert("TPM EK", pki.rsa_key, "TPM Vendor EK CA 1", pki.mid_key, ca=True,
             key_usage={"key_encipherment": True, "key_cert_sign": True})
    why = check_ek_certificate(der(c), pki.rsa_ek_public(), pki.anchors, NOW)
    assert why is not None and "is a CA certificate" in why


def test_an_ek_without_a_listed_root_or_intermediate_is_refused(pki: Pki) -> None:
    why = check_ek_certificate(der(pki.rsa_ek), pki.rsa_ek_public(), [pki.root], NOW)
    assert why is not None and "does not chain to a listed TPM manufacturer root" in why
    # an intermediate alone is not a root
    why = check_ek_certificate(der(pki.rsa_ek), pki.rsa_ek_public(), [pki.mid], NOW)
    assert why is not None and "does not chain" in why
    # no roots at all, or another vendor's
    assert "does not chain" in (check_ek_certificate(der(pki.ecc_ek), pki.ecc_ek_public(), [], NOW) or "")
    other = make_pki()
    why = check_ek_certificate(der(pki.ecc_ek), pki.ecc_ek_public(), other.anchors, NOW)
    assert why is not None and "does not chain" in why


def test_a_forged_issuer_of_the_same_name_is_refused(pki: Pki) -> None:
    fake_key = ec.generate_private_key(ec.SECP384R1())
    forged = cert("TPM EK", pki.rsa_key, "TPM Vendor EK CA 1", fake_key, ca=False,
                  key_usage={"key_encipherment": True})
    why = check_ek_certificate(der(forged), pki.rsa_ek_public(), pki.anchors, NOW)
    assert why is not None and "does not chain" in why


def test_an_issuer_that_is_not_a_ca_is_refused(pki: Pki) -> None:
    leafish_key = ec.generate_private_key(ec.SECP384R1())
    leafish = cert("Not A CA", leafish_key, "TPM Vendor Root", pki.root_key, ca=False, key_usage=CA_USAGE)
    ek = cert("TPM EK", pki.rsa_key, "Not A CA", leafish_key, ca=False, key_usage={"key_encipherment": True})
    why = check_ek_certificate(der(ek), pki.rsa_ek_public(), [pki.root, leafish], NOW)
    assert why is not None and "does not chain" in why
    # a CA whose keyUsage does not allow keyCertSign is no issuer either
    nosign = cert("TPM Vendor EK CA 1", pki.mid_key, "TPM Vendor Root", pki.root_key, ca=True,
                  key_usage={"crl_sign": True})
    why = check_ek_certificate(der(pki.rsa_ek), pki.rsa_ek_public(), [pki.root, nosign], NOW)
    assert why is not None and "does not chain" in why


def test_a_root_whose_path_length_forbids_the_intermediate_is_refused(pki: Pki) -> None:
    root0 = cert("TPM Vendor Root", pki.root_key, "TPM Vendor Root", pki.root_key, ca=True, key_usage=CA_USAGE,
                 path_length=0)
    why = check_ek_certificate(der(pki.rsa_ek), pki.rsa_ek_public(), [root0, pki.mid], NOW)
    assert why is not None and "does not chain" in why
    root1 = cert("TPM Vendor Root", pki.root_key, "TPM Vendor Root", pki.root_key, ca=True, key_usage=CA_USAGE,
                 path_length=1)
    assert check_ek_certificate(der(pki.rsa_ek), pki.rsa_ek_public(), [root1, pki.mid], NOW) is None


def test_an_expired_certificate_in_the_chain_is_refused(pki: Pki) -> None:
    old = pki.ek_cert(pki.rsa_key, days=(-400, -1))
    why = check_ek_certificate(der(old), pki.rsa_ek_public(), pki.anchors, NOW)
    assert why is not None and "outside its validity" in why
    early = pki.ek_cert(pki.ecc_key, days=(2, 400))  # not yet valid
    why = check_ek_certificate(der(early), pki.ecc_ek_public(), pki.anchors, NOW)
    assert why is not None and "outside its validity" in why
    old_mid = cert("TPM Vendor EK CA 1", pki.mid_key, "TPM Vendor Root", pki.root_key, ca=True,
                   key_usage=CA_USAGE, days=(-900, -10))
    why = check_ek_certificate(der(pki.rsa_ek), pki.rsa_ek_public(), [pki.root, old_mid], NOW)
    assert why is not None and "CN=TPM Vendor EK CA 1 is outside its validity" in why
    old_root = cert("TPM Vendor Root", pki.root_key, "TPM Vendor Root", pki.root_key, ca=True,
                    key_usage=CA_USAGE, days=(-900, -10))
    why = check_ek_certificate(der(pki.rsa_ek), pki.rsa_ek_public(), [old_root, pki.mid], NOW)
    assert why is not None and "CN=TPM Vendor Root is outside its validity" in why


@pytest.mark.parametrize(("data", "why"), [
    (b"", "holds no EK certificate"),
    (b"\x04\x03abc", "not a DER certificate"),
    (b"\x30\x82\xff\xff" + bytes(10), "the NV index held"),
    (b"\x30\x03abc", "not a certificate"),
])
def test_a_missing_or_unreadable_certificate_is_refused(pki: Pki, data: bytes, why: str) -> None:
    got = check_ek_certificate(data, pki.rsa_ek_public(), pki.anchors, NOW)
    assert got is not None and why in got
    got = check_ek_certificates({EK_CERT_NV_RSA: data}, pki.rsa_ek_public(), pki.anchors, NOW)
    assert got is not None and why in got


def test_roots_are_loaded_from_pem_files_and_bad_files_are_errors(pki: Pki, tmp_path: Path) -> None:
    pem = b"".join(c.public_bytes(serialization.Encoding.PEM) for c in pki.anchors)
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
    other = [cert("Another Vendor", other_key, "Another Vendor", other_key, ca=True)]
    reg = tmp_path / "reg.json"
    with swtpm(tmp_path / "a", "node-a") as tpm:
        [refused] = enrol([tpm], reg, "site", ek_roots=other)
        assert not refused.enrolled and "does not chain to a listed TPM manufacturer root" in refused.reason
        [ok] = enrol([tpm], reg, "site", ek_roots=roots)
        assert ok.enrolled, ok.reason
        # swtpm's second EK, ECC (NIST P-384, template H-3, persistent at 0x81010016): its certificate is at
        # 0x01c00016 and is what certifies it; the RSA EK's certificates do not
        ecc_public = _read_public(tpm, "0x81010016")
        ecc_found = tpm.ek_certificates("ecc")
        assert ecc_found["0x01c00016"] and not ecc_found[EK_CERT_NV_ECC]
        assert check_ek_certificates(ecc_found, ecc_public, roots) is None
        why = check_ek_certificates(tpm.ek_certificates("rsa"), ecc_public, roots)
        assert why == f"NV {EK_CERT_NV_RSA}: the EK certificate certifies an RSA key; this TPM's EK is ECC"
        assert check_ek_certificates(ecc_found, ecc_public, other) is not None
    with swtpm(tmp_path / "b", "node-b") as bare:  # no certificate in this TPM at all
        [none] = enrol([bare], reg, "site", ek_roots=roots)
        assert not none.enrolled and "holds no EK certificate" in none.reason
        [tofu] = enrol([bare], reg, "site")  # no roots listed: trust-on-first-use, as before
        assert tofu.enrolled, tofu.reason


def _read_public(tpm: NodeTpm, handle: str) -> bytes:
    env = {**os.environ, "TPM2TOOLS_TCTI": tpm.tcti}
    out = Path(tpm.workdir) / "pub.bin"
    out.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tpm2_readpublic", "-c", handle, "-o", str(out)], check=True, env=env, capture_output=True)
    return out.read_bytes()


def _provision(tpm: NodeTpm, index: str, data: bytes) -> None:
    """Store ``data`` at NV ``index`` as a manufacturer stores the EK certificate (owner-defined here)."""
    env = {**os.environ, "TPM2TOOLS_TCTI": tpm.tcti}
    f = Path(tpm.workdir) / "cert.der"
    f.write_bytes(data)
    for argv in (["tpm2_nvdefine", index, "-C", "o", "-s", str(len(data)), "-a",
                  "ownerread|ownerwrite|authread|authwrite|no_da"],
                 ["tpm2_nvwrite", index, "-C", "o", "-i", str(f)]):
        subprocess.run(argv, check=True, env=env, capture_output=True)


@pytest.mark.slow
def test_an_ecc_ek_enrols_by_its_own_certificate_unless_revoked(tmp_path: Path) -> None:
    """A P-256 EK (template L-2, what ``tpm2_createek -G ecc`` makes) certified at 0x01c0000a by a vendor CA
    made here: refused without it, enrolled with it, refused once the vendor's CRL lists it."""
    at = datetime.now(UTC)
    pki = make_pki(at)
    with swtpm(tmp_path / "a", "node-a") as plain:
        tpm = dataclasses.replace(plain, ek_alg="ecc")
        [none] = enrol([tpm], tmp_path / "r1.json", "site", ek_roots=pki.anchors)
        assert not none.enrolled and "holds no EK certificate for its ECC EK" in none.reason
        public = _read_public(tpm, "0x81010001")
        ek_cert = pki.ek_cert(_ecc_key(public))
        _provision(tpm, EK_CERT_NV_ECC, der(ek_cert) + b"\xff" * 16)  # padded, as NV areas often are
        [ok] = enrol([tpm], tmp_path / "r1.json", "site", ek_roots=pki.anchors)
        assert ok.enrolled, ok.reason
        crls = (EkCrl("ekca1.crl", crl("TPM Vendor EK CA 1", pki.mid_key, revoked=(ek_cert.serial_number,), at=at)),
                EkCrl("root.crl", crl("TPM Vendor Root", pki.root_key, at=at)))
        [revoked] = enrol([tpm], tmp_path / "r2.json", "site", ek_roots=pki.anchors, ek_crls=crls)
        assert not revoked.enrolled
        assert f"serial 0x{ek_cert.serial_number:x}, issuer CN=TPM Vendor EK CA 1) is revoked" in revoked.reason


def _ecc_key(public: bytes) -> ec.EllipticCurvePublicKey:
    ek = parse_public(public)
    assert ek.kind == "ecc" and ek.curve == "secp256r1"
    return ec.EllipticCurvePublicNumbers(ek.x, ek.y, ec.SECP256R1()).public_key()


def test_node_tpm_reads_no_certificate_as_empty(tmp_path: Path) -> None:
    with swtpm(tmp_path / "a") as tpm:
        assert isinstance(tpm, NodeTpm)
        assert tpm.ek_certificates("rsa") == dict.fromkeys(EK_CERT_INDICES["rsa"], b"")
        assert tpm.ek_certificates("ecc") == dict.fromkeys(EK_CERT_INDICES["ecc"], b"")
