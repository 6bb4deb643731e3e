"""``swanctl --list-certs`` as the IPsec rotation's judgement reads it (recorded from strongSwan 5.9.8, the lab)."""

from __future__ import annotations

import pytest

from ringfence.secure.layers.interface import LayerError
from ringfence.secure.layers.ipsec_certs import parse_certs

LISTING = """
List of X.509 End Entity Certificates

  subject:  "CN=spiffe://lab/node/worker-0"
  issuer:   "CN=ringfence CA lab, O=ringfence"
  validity:  not before Dec 01 18:32:58 2026, ok
             not after  Dec 02 18:37:58 2026, ok (expires in 23 hours)
  serial:    5b:1b:ed:55:92:92:ed:17:93:0b:e7:d7:70:28:68:69:96:09:cf:30
  altNames:  spiffe://lab/node/worker-0
  flags:     serverAuth clientAuth
  authkeyId: 27:57:9b:6e:50:bb:d0:66:e6:4c:f4:2e:08:77:c5:35:b7:c0:d6:21
  pubkey:    ECDSA 256 bits

  subject:  "CN=spiffe://lab/node/worker-1"
  issuer:   "CN=ringfence CA lab, O=ringfence"
  serial:    11:73:07:ca:8d:ed:0f:f5:b1:6e:1f:17:2f:aa:6f:64:9a:19:18:1a
  pubkey:    ECDSA 256 bits, has private key

List of X.509 CA Certificates

  subject:  "CN=ringfence CA lab, O=ringfence"
  issuer:   "CN=ringfence CA lab, O=ringfence"
  serial:    30:49:a6:46:a9:b3:4e:08:49:f6:af:3d:c9:d5:58:2b:3a:4f:c0:f4
  flags:     CA CRLSign self-signed

List of X.509 CRLs

  issuer:   "CN=ringfence CA lab, O=ringfence"
  update:    this on Dec 01 18:32:58 2026, ok
             next on Dec 02 18:37:58 2026, ok (expires in 23 hours)
  serial:    01:a2:32:e6:3b:2c
  authKeyId: 27:57:9b:6e:50:bb:d0:66:e6:4c:f4:2e:08:77:c5:35:b7:c0:d6:21
  2 revoked certificates:
    13:0f:a9:72:01:93:d4:8d:d5:63:e2:14:90:0e:d5:c3:99:ac:51:a0: Dec 01 18:32:58 2026, unspecified
    7a:82:44:57:82:11:df:b9:f1:63:83:ce:51:a6:ee:9d:7a:c0:36:e1: Dec 01 18:32:58 2026, unspecified
"""


def test_end_entity_certificates_and_the_crls_revoked_serials() -> None:
    li = parse_certs(LISTING)
    assert [(c.subject, c.serial, c.own) for c in li.certs] == [
        ("CN=spiffe://lab/node/worker-0", 0x5B1BED559292ED17930BE7D7702868699609CF30, False),  # the peer's
        ("CN=spiffe://lab/node/worker-1", 0x117307CA8DED0FF5B16E1F172FAA6F649A19181A, True),
    ]  # the CA's certificate is not an end entity, and the CRL's own number is not a revoked serial
    assert li.revoked() == {0x130FA9720193D48DD563E214900ED5C399AC51A0, 0x7A8244578211DFB9F16383CE51A6EE9D7AC036E1}
    assert [c.issuer for c in li.crls] == ["CN=ringfence CA lab, O=ringfence"]


def test_nothing_loaded_is_nothing_revoked() -> None:
    li = parse_certs("")
    assert li.certs == () and li.crls == () and li.revoked() == frozenset()


def test_a_crl_that_lists_fewer_serials_than_it_counts_is_refused() -> None:
    # a check that old certificates are revoked must not pass on a listing it did not read whole
    cut = "    7a:82:44:57:82:11:df:b9:f1:63:83:ce:51:a6:ee:9d:7a:c0:36:e1: Dec 01 18:32:58 2026, unspecified\n"
    assert cut in LISTING
    with pytest.raises(LayerError, match="says 2 revoked certificates and lists 1"):
        parse_certs(LISTING.replace(cut, ""))


def test_revoked_entries_outside_a_crl_are_refused() -> None:
    with pytest.raises(LayerError, match="outside a CRL"):
        parse_certs("List of X.509 CRLs\n  2 revoked certificates:\n")
