"""Workload PKI: CA, issuance into per-node directories, lifetimes, verification and its refusals, CLI."""

from __future__ import annotations

import json
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ringfence.cli import main
from ringfence.errors import InputError
from ringfence.secure import pki

REPO = Path(__file__).resolve().parents[2]
LIFE = timedelta(hours=1)


@pytest.fixture(scope="module", params=["ec-p256", "ed25519"])
def ca_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp(f"ca-{request.param}")
    pki.init_ca(d, "lab", algorithm=request.param)
    return d


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("24h", timedelta(hours=24)),
        ("30m", timedelta(minutes=30)),
        ("7d", timedelta(days=7)),
        ("90s", timedelta(seconds=90)),
        (" 2w ", timedelta(weeks=2)),
    ],
)
def test_parse_duration(text: str, expected: timedelta) -> None:
    assert pki.parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "24", "h", "0h", "-1h", "1y", "1.5h"])
def test_parse_duration_refuses(text: str) -> None:
    with pytest.raises(InputError, match="is not a duration"):
        pki.parse_duration(text, where="keys.cert_lifetime")


def test_identities() -> None:
    i = pki.parse_identity("spiffe://lab/job/train-a/rank/3")
    assert (i.cluster, i.kind, i.name, i.rank, i.directory_name) == (
        "lab",
        "job-rank",
        "train-a",
        3,
        "job-train-a-rank-3",
    )
    assert pki.parse_identity("spiffe://lab/node/worker-0").directory_name == "node-worker-0"
    assert pki.parse_identity("spiffe://lab/user/alice").kind == "user"
    for bad in (
        "spiffe://lab/job/a/rank/-1",
        "spiffe://lab/job/a",
        "https://lab/node/x",
        "spiffe://Lab/node/x",
        "spiffe://lab/node/x/../y",
    ):
        with pytest.raises(InputError):
            pki.parse_identity(bad)


def test_issue_writes_key_0600_into_its_own_directory(ca_dir: Path) -> None:
    issued = pki.issue(ca_dir, "spiffe://lab/job/train-a/rank/0", lifetime=timedelta(minutes=30))
    assert issued.directory == ca_dir / "nodes" / "job-train-a-rank-0"
    assert stat.S_IMODE(issued.key_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(issued.directory.stat().st_mode) == 0o700
    info = issued.info
    assert info.identity == "spiffe://lab/job/train-a/rank/0" and not info.is_ca
    assert info.not_after - info.not_before == timedelta(minutes=35)  # 5 minutes of skew allowance
    assert info.fingerprint.startswith("sha256:") and len(info.fingerprint) == 71
    assert "PRIVATE" not in json.dumps(info.as_dict())
    ca = pki.load_certificate(issued.ca_path)
    assert pki.verify_certificate(pki.load_certificate(issued.cert_path), ca).fingerprint == info.fingerprint


def test_verify_refuses_expired_not_yet_valid_revoked_foreign_and_wrong_identity(ca_dir: Path, tmp_path: Path) -> None:
    issued = pki.issue(ca_dir, "spiffe://lab/node/worker-1", lifetime=LIFE, out_dir=tmp_path / "w1")
    cert = pki.load_certificate(issued.cert_path)
    ca = pki.load_certificate(issued.ca_path)
    now = datetime.now(UTC)
    with pytest.raises(pki.CertificateRejected, match="expired at"):
        pki.verify_certificate(cert, ca, now=now + timedelta(hours=2))
    with pytest.raises(pki.CertificateRejected, match="not valid before"):
        pki.verify_certificate(cert, ca, now=now - timedelta(hours=1))
    with pytest.raises(pki.CertificateRejected, match="is revoked"):
        pki.verify_certificate(cert, ca, revoked=frozenset({issued.info.fingerprint}))
    with pytest.raises(pki.CertificateRejected, match="is not the expected spiffe://lab/node/worker-2"):
        pki.verify_certificate(cert, ca, expected_identity="spiffe://lab/node/worker-2")
    other = tmp_path / "other-ca"
    pki.init_ca(other, "lab")
    with pytest.raises(pki.CertificateRejected, match="was not issued by the cluster CA"):
        pki.verify_certificate(cert, pki.load_certificate(other / "ca" / "ca.pem"))
    with pytest.raises(pki.CertificateRejected, match="is not a CA certificate"):
        pki.verify_certificate(cert, cert)


def test_rotate_replaces_key_and_keeps_identity(ca_dir: Path, tmp_path: Path) -> None:
    first = pki.issue(ca_dir, "spiffe://lab/node/mgmt", lifetime=LIFE, out_dir=tmp_path / "mgmt")
    old_key = first.key_path.read_bytes()
    old, new = pki.rotate(ca_dir, tmp_path / "mgmt", lifetime=LIFE)
    assert old.fingerprint == first.info.fingerprint != new.info.fingerprint
    assert new.info.identity == "spiffe://lab/node/mgmt"
    assert new.key_path.read_bytes() != old_key
    assert new.info.key_algorithm == first.info.key_algorithm


def test_revocation_list(ca_dir: Path, tmp_path: Path) -> None:
    issued = pki.issue(ca_dir, "spiffe://lab/user/alice", lifetime=LIFE, out_dir=tmp_path / "alice")
    fp = pki.revoke(ca_dir, issued.cert_path)
    assert fp in pki.load_revocations(ca_dir / "ca" / "revoked.txt")
    bad = tmp_path / "bad.txt"
    bad.write_text("# list\nsha256:abc\n")
    with pytest.raises(InputError, match=r"bad.txt:2"):
        pki.load_revocations(bad)
    assert pki.load_revocations(tmp_path / "missing.txt") == frozenset()


def test_refusals_of_bad_input(tmp_path: Path) -> None:
    with pytest.raises(pki.PkiError, match="no CA in"):
        pki.issue(tmp_path, "spiffe://lab/node/x", lifetime=LIFE)
    pki.init_ca(tmp_path, "lab")
    with pytest.raises(pki.PkiError, match="already exists"):
        pki.init_ca(tmp_path, "lab")
    with pytest.raises(InputError, match="trust domain"):
        pki.issue(tmp_path, "spiffe://other/node/x", lifetime=LIFE)
    junk = tmp_path / "junk.pem"
    junk.write_bytes(b"-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
    with pytest.raises(InputError, match="junk.pem: not an X.509 certificate"):
        pki.load_certificate(junk)
    key = tmp_path / "ca" / "ca.key"
    key.chmod(0o644)
    with pytest.raises(pki.PkiError, match="must be 0600"):
        pki.load_private_key(key)


def test_cli_init_issue_rotate_show_revoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = str(tmp_path / "pki")
    policy = str(REPO / "examples" / "lab-policy.yaml")
    assert main(["pki", "init", d, "--policy", policy]) == 0
    assert main(["pki", "issue", d, "--job", "train-a", "--rank", "1", "--policy", policy, "--json"]) == 0
    out = capsys.readouterr().out
    issued = json.loads(out[out.index("{", out.index("ca_dir")) :])
    assert issued["identity"] == "spiffe://lab/job/train-a/rank/1"
    nb, na = (datetime.fromisoformat(issued[k]) for k in ("not_before", "not_after"))
    assert na - nb == timedelta(hours=24, minutes=5)  # keys.cert_lifetime: 24h in the lab policy
    rank_dir = issued["directory"]
    assert main(["pki", "rotate", d, rank_dir, "--lifetime", "30m", "--json"]) == 0
    rotated = json.loads(capsys.readouterr().out)
    assert rotated["replaced"] == issued["fingerprint"]
    assert main(["pki", "show", rank_dir, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["fingerprint"] == rotated["fingerprint"]
    assert main(["pki", "revoke", d, f"{rank_dir}/cert.pem"]) == 0
    assert rotated["fingerprint"] in (tmp_path / "pki" / "ca" / "revoked.txt").read_text()
    assert main(["pki", "issue", d, "--node", "worker-0", "--lifetime", "soon"]) == 2
    assert "is not a duration" in capsys.readouterr().err
    assert main(["pki", "issue", d, "--job", "train-a"]) == 2
    assert main(["pki", "show", str(tmp_path / "nothing.pem")]) == 2
