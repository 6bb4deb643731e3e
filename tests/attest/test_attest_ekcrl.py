"""EK revocation: the manufacturers' CRLs (files only), each verified, current and covering the chain."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from ek_kit import NOW, Pki, cert, crl, der, make_pki
from pydantic import ValidationError

from ringfence.attest.ekcert import check_ek_certificate
from ringfence.attest.ekcrl import EkCrl, load_ek_crls
from ringfence.attest.interface import AttestError
from ringfence.cli import main
from ringfence.policy.attestation import Attestation

ROOT, MID = "TPM Vendor Root", "TPM Vendor EK CA 1"


@pytest.fixture(scope="module")
def pki() -> Pki:
    return make_pki()


def _crls(pki: Pki, *, mid: x509.CertificateRevocationList | None = None,
          root: x509.CertificateRevocationList | None = None) -> list[EkCrl]:
    # (`is None`: a CRL without entries is falsy, its length being its number of entries)
    return [EkCrl("ekca1.crl", crl(MID, pki.mid_key) if mid is None else mid),
            EkCrl("root.crl", crl(ROOT, pki.root_key) if root is None else root)]


def _check(pki: Pki, crls: list[EkCrl], kind: str = "rsa") -> str | None:
    if kind == "rsa":
        return check_ek_certificate(der(pki.rsa_ek), pki.rsa_ek_public(), pki.anchors, NOW, crls)
    return check_ek_certificate(der(pki.ecc_ek), pki.ecc_ek_public(), pki.anchors, NOW, crls)


def test_current_crls_that_list_neither_the_ek_nor_its_ca_admit_it(pki: Pki) -> None:
    others = crl(MID, pki.mid_key, revoked=(pki.rsa_ek.serial_number + 1, 12345))
    assert _check(pki, _crls(pki, mid=others)) is None
    assert _check(pki, _crls(pki), "ecc") is None


def test_a_revoked_ek_certificate_is_refused_with_its_serial_and_issuer(pki: Pki) -> None:
    listed = crl(MID, pki.mid_key, revoked=(pki.ecc_ek.serial_number,))
    why = _check(pki, _crls(pki, mid=listed), "ecc")
    assert why is not None
    assert f"(serial 0x{pki.ecc_ek.serial_number:x}, issuer CN={MID}) is revoked" in why
    assert "key_compromise" in why and "ekca1.crl" in why
    # the RSA EK of the same CA is not on it
    assert _check(pki, _crls(pki, mid=listed)) is None


def test_a_revoked_intermediate_is_refused_with_its_serial_and_issuer(pki: Pki) -> None:
    arl = crl(ROOT, pki.root_key, revoked=(pki.mid.serial_number,))
    why = _check(pki, _crls(pki, root=arl))
    assert why is not None
    assert f"CN={MID} (serial 0x{pki.mid.serial_number:x}, issuer CN={ROOT}) is revoked" in why


def test_a_stale_crl_is_refused_saying_what_to_do(pki: Pki) -> None:
    why = _check(pki, _crls(pki, mid=crl(MID, pki.mid_key, days=(-40, -2))))
    assert why is not None and "CRL ekca1.crl of CN=TPM Vendor EK CA 1 is stale" in why
    assert "download the current one" in why and "http://crl.tpm-vendor.example/ekca1.crl" in why
    why = _check(pki, _crls(pki, root=crl(ROOT, pki.root_key, days=(-40, -2))))
    assert why is not None and "root.crl" in why and "stale" in why
    why = _check(pki, _crls(pki, mid=crl(MID, pki.mid_key, days=(1, 30))))  # issued tomorrow
    assert why is not None and "is in the future" in why


def test_a_crl_not_signed_by_the_issuer_is_refused(pki: Pki) -> None:
    forged = crl(MID, ec.generate_private_key(ec.SECP384R1()))
    why = _check(pki, _crls(pki, mid=forged))
    assert why == f"CRL ekca1.crl: its signature does not verify with the key of CN={MID}"
    # the root's key signing the EK CA's CRL is no better
    why = _check(pki, _crls(pki, mid=crl(MID, pki.root_key)))
    assert why is not None and "signature does not verify" in why


def test_every_issuer_of_the_chain_needs_a_crl_once_crls_are_given(pki: Pki) -> None:
    why = _check(pki, [EkCrl("ekca1.crl", crl(MID, pki.mid_key))])
    assert why is not None and f"no CRL given for CN={ROOT}, the issuer of CN={MID}" in why
    assert "http://crl.tpm-vendor.example/root.crl" in why and "attestation.ek_crls" in why
    why = _check(pki, [EkCrl("root.crl", crl(ROOT, pki.root_key))])
    assert why is not None and f"no CRL given for CN={MID}" in why
    # another vendor's CRL covers nothing here
    assert "no CRL given" in (_check(pki, [EkCrl("x.crl", crl("Another Vendor", pki.mid_key))]) or "")


def test_a_crl_signer_without_crl_sign_is_refused(pki: Pki) -> None:
    nocrl = cert(MID, pki.mid_key, ROOT, pki.root_key, ca=True, key_usage={"key_cert_sign": True})
    why = check_ek_certificate(der(pki.rsa_ek), pki.rsa_ek_public(), [pki.root, nocrl], NOW, _crls(pki))
    assert why is not None and "may not sign CRLs" in why


def test_partial_delta_and_indirect_crls_are_not_taken_for_complete_ones(pki: Pki) -> None:
    def idp(**kw: bool) -> x509.IssuingDistributionPoint:
        flags = {"only_contains_user_certs": False, "only_contains_ca_certs": False, "indirect_crl": False,
                 "only_contains_attribute_certs": False, **kw}
        return x509.IssuingDistributionPoint(None, None, only_some_reasons=None, **flags)

    # a root's ARL (CA certificates only) covers the EK CA: fine
    arl = crl(ROOT, pki.root_key, extensions=((idp(only_contains_ca_certs=True), True),))
    assert _check(pki, _crls(pki, root=arl)) is None
    # an EK CA's CRL of CA certificates only does not cover the EK certificate
    ca_only = crl(MID, pki.mid_key, extensions=((idp(only_contains_ca_certs=True), True),))
    why = _check(pki, _crls(pki, mid=ca_only))
    assert why is not None and "covers end-entity certificates" in why
    # a user-only ARL does not cover the CA
    why = _check(pki, _crls(pki, root=crl(ROOT, pki.root_key, extensions=((idp(only_contains_user_certs=True),
                                                                             True),))))
    assert why is not None and "covers CA certificates" in why
    why = _check(pki, _crls(pki, mid=crl(MID, pki.mid_key, extensions=((x509.DeltaCRLIndicator(6), True),))))
    assert why is not None and "delta CRL" in why
    why = _check(pki, _crls(pki, mid=crl(MID, pki.mid_key, extensions=((idp(indirect_crl=True), True),))))
    assert why is not None and "indirect or partitioned" in why


def test_crl_files_pem_der_and_bundles_are_read(pki: Pki, tmp_path: Path) -> None:
    mid, root = crl(MID, pki.mid_key), crl(ROOT, pki.root_key)
    (tmp_path / "ekca1.crl").write_bytes(mid.public_bytes(serialization.Encoding.DER))
    (tmp_path / "bundle.pem").write_bytes(b"# vendor CRLs\n" + mid.public_bytes(serialization.Encoding.PEM)
                                          + root.public_bytes(serialization.Encoding.PEM))
    # relative paths from the base (the policy's folder), absolute ones as given
    got = load_ek_crls(["ekca1.crl", str(tmp_path / "bundle.pem")], tmp_path)
    assert [c.path for c in got] == [str(tmp_path / "ekca1.crl")] + [str(tmp_path / "bundle.pem")] * 2
    assert [c.crl.issuer.rfc4514_string() for c in got] == [f"CN={MID}", f"CN={MID}", f"CN={ROOT}"]
    assert _check(pki, list(got[1:])) is None


@pytest.mark.parametrize(("content", "why"), [
    (None, "No such file"),
    (b"", "not a CRL in PEM or DER"),
    (b"garbage", "not a CRL in PEM or DER"),
    (b"-----BEGIN X509 CRL-----\nAAAA\n-----END X509 CRL-----\n", "not a CRL in PEM or DER"),
    (b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", "PEM without an X509 CRL block"),
    (b"\x30\x03\x02\x01\x01", "not a CRL in PEM or DER"),
])
def test_a_missing_or_malformed_crl_file_is_an_error_naming_it(tmp_path: Path, content: bytes | None,
                                                               why: str) -> None:
    if content is not None:
        (tmp_path / "vendor.crl").write_bytes(content)
    with pytest.raises(AttestError) as exc:
        load_ek_crls(["vendor.crl"], tmp_path)
    assert f"attestation.ek_crls: {tmp_path / 'vendor.crl'}: " in exc.value.message and why in exc.value.message


def test_the_policy_takes_crls_only_with_roots() -> None:
    doc = {"pcrs": [9],
           "components": [{"name": "k", "kind": "host-kernel", "pcr": 9, "digests": ["sha256:" + "a" * 64]}]}
    a = Attestation.model_validate_json(json.dumps({**doc, "ek_roots": ["v.pem"], "ek_crls": ["v.crl", "r.crl"]}))
    assert a.ek_crls == ("v.crl", "r.crl")
    with pytest.raises(ValidationError, match="ek_crls needs ek_roots"):
        Attestation.model_validate_json(json.dumps({**doc, "ek_crls": ["v.crl"]}))
    with pytest.raises(ValidationError):
        Attestation.model_validate_json(json.dumps({**doc, "ek_roots": ["v.pem"], "ek_crl": ["v.crl"]}))


def test_enrol_with_a_malformed_crl_exits_2_naming_the_file(pki: Pki, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    policy = yaml.safe_load((Path(__file__).parents[2] / "examples" / "lab-policy.yaml").read_text())
    policy["attestation"] = {"pcrs": [9], "ek_roots": ["vendor.pem"], "ek_crls": ["vendor.crl"], "components": [
        {"name": "k", "kind": "host-kernel", "pcr": 9, "digests": ["sha256:" + "a" * 64]}]}
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(policy))
    (tmp_path / "vendor.pem").write_bytes(b"".join(c.public_bytes(serialization.Encoding.PEM) for c in pki.anchors))
    (tmp_path / "vendor.crl").write_bytes(b"-----BEGIN X509 CRL-----\nAAAA\n-----END X509 CRL-----\n")
    argv = ["attest", "enroll", "--target", "ssh", "--policy", str(tmp_path / "policy.yaml"),
            "--hosts", str(tmp_path / "hosts.yaml")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'vendor.crl'}: not a CRL in PEM or DER" in err and "Traceback" not in err
    (tmp_path / "vendor.crl").unlink()  # listed but missing: the same, naming it
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'vendor.crl'}" in err and "Traceback" not in err


def test_a_stale_crl_refuses_even_if_the_ek_was_never_revoked(pki: Pki) -> None:
    # fail closed: a CRL past nextUpdate says nothing about revocations since; not "not revoked"
    stale = crl(MID, pki.mid_key, days=(-60, -30))
    assert _check(pki, _crls(pki, mid=stale)) is not None
    # the same CRL, read on a day inside its window, admits
    inside = NOW - timedelta(days=45)
    early = make_pki(inside)
    crls = [EkCrl("a", crl(MID, early.mid_key, at=inside)), EkCrl("b", crl(ROOT, early.root_key, at=inside))]
    assert check_ek_certificate(der(early.rsa_ek), early.rsa_ek_public(), early.anchors, inside, crls) is None
