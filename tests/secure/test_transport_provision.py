"""Rank certificates issued from a cluster PKI: what the ranks load, and what they refuse."""

from __future__ import annotations

from pathlib import Path

import pytest

from ringfence.errors import InputError
from ringfence.secure import pki
from ringfence.secure.transport import TransportError, config_from_env
from ringfence.secure.transport.handshake import load_credentials
from ringfence.secure.transport.provision import provisioned, rank_credentials


def test_every_rank_loads_its_own_certificate_from_the_cluster_ca(tmp_path: Path) -> None:
    pdir = tmp_path / "pki"
    env = rank_credentials(pdir, "labx", "bench", 3)
    assert (pdir / "ca" / "ca.pem").exists()
    for rank in range(3):
        creds = load_credentials(config_from_env(env, rank=rank), rank)
        assert creds.identity == f"spiffe://labx/job/bench/rank/{rank}"
        assert creds.job == "spiffe://labx/job/bench"
        assert (pdir / "nodes" / f"job-bench-rank-{rank}" / "key.pem").stat().st_mode & 0o077 == 0
    # rank 1's certificate is not rank 2's: a rank given another's directory stops before it connects
    wrong = {**env, "RINGFENCE_TRANSPORT_DIR": env["RINGFENCE_TRANSPORT_DIR"].replace("{rank}", "1")}
    with pytest.raises(TransportError, match="own certificate unusable"):
        load_credentials(config_from_env(wrong, rank=2), 2)


def test_existing_ca_is_reused_and_fresh_keys_issued(tmp_path: Path) -> None:
    pdir = tmp_path / "pki"
    ca = pki.init_ca(pdir, "labx")
    first = rank_credentials(pdir, "labx", "bench", 2)
    key0 = (pdir / "nodes" / "job-bench-rank-0" / "key.pem").read_bytes()
    assert rank_credentials(pdir, "labx", "bench", 2) == first
    assert pki.show(pdir / "ca" / "ca.pem").fingerprint == ca.fingerprint
    assert (pdir / "nodes" / "job-bench-rank-0" / "key.pem").read_bytes() != key0


def test_revoked_rank_is_refused_through_the_cas_list(tmp_path: Path) -> None:
    pdir = tmp_path / "pki"
    env = rank_credentials(pdir, "labx", "bench", 2)
    assert env["RINGFENCE_TRANSPORT_REVOKED"] == str(pdir / "ca" / "revoked.txt")
    pki.revoke(pdir, pdir / "nodes" / "job-bench-rank-1" / "cert.pem")
    load_credentials(config_from_env(env, rank=0), 0)
    with pytest.raises(TransportError, match="revoked"):
        load_credentials(config_from_env(env, rank=1), 1)


def test_ca_of_another_cluster_is_refused_not_replaced(tmp_path: Path) -> None:
    pdir = tmp_path / "pki"
    ca = pki.init_ca(pdir, "other")
    with pytest.raises(InputError, match="spiffe://other"):
        rank_credentials(pdir, "labx", "bench", 2)
    assert pki.show(pdir / "ca" / "ca.pem").fingerprint == ca.fingerprint
    with pytest.raises(InputError, match="at least one rank"):
        rank_credentials(pdir, "other", "bench", 0)


def test_provisioned_reads_the_callers_variables() -> None:
    assert not provisioned({})
    assert not provisioned({"RINGFENCE_TRANSPORT_DIR": ""})
    assert provisioned({"RINGFENCE_TRANSPORT_DIR": "/d/{rank}"})
    assert provisioned({"RINGFENCE_TRANSPORT_CERT": "/c.pem"})
