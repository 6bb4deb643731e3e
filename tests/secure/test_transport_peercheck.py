"""The one-handshake check the credential-compromise drill runs through a site's executors: real processes over
loopback — a good credential is accepted, a revoked one is refused by the honest side whichever role it has,
and no acceptance is claimed without a completed handshake."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from ringfence.secure import pki

JOB = "spiffe://lab/job/train-b"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pair(low: Path, high: Path, revoked: Path, *, honest: str, group: str = "g1",
          timeout: float = 10.0) -> tuple[Any, Any]:
    """rank 0 (``low``) listens, rank 1 (``high``) connects; both outcomes as printed. Only the ``honest``
    side (``accept`` or ``connect``) reads the revocation list: a thief's copy honours none."""
    port = _free_port()
    common = ["--world", "2", "--group", group, "--port", str(port), "--timeout", str(timeout)]
    crl = {r: (["--revoked", str(revoked)] if r == honest else []) for r in ("accept", "connect")}
    cmd = [sys.executable, "-m", "ringfence.secure.transport.peercheck"]
    acc = subprocess.Popen([*cmd, "accept", "--dir", str(low), "--rank", "0", "--bind", "127.0.0.1", *common,
                            *crl["accept"]], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    con = subprocess.run([*cmd, "connect", "--dir", str(high), "--rank", "1", "--peer", "0", "--host", "127.0.0.1",
                          *common, *crl["connect"]], capture_output=True, timeout=timeout + 30)
    out, err = acc.communicate(timeout=timeout + 30)
    assert out, err.decode()
    return json.loads(out), json.loads(con.stdout)


def test_a_good_credential_is_accepted_and_a_revoked_one_refused_by_either_side(tmp_path: Path) -> None:
    pki.init_ca(tmp_path, "lab")
    life = timedelta(hours=1)
    r0 = pki.issue(tmp_path, f"{JOB}/rank/0", lifetime=life).directory
    r1 = pki.issue(tmp_path, f"{JOB}/rank/1", lifetime=life).directory
    revoked = tmp_path / "ca" / "revoked.txt"
    acc, con = _pair(r0, r1, revoked, honest="connect")
    assert acc["ok"] and con["ok"], (acc, con)
    assert acc["peer_identity"] == f"{JOB}/rank/1" and con["peer_identity"] == f"{JOB}/rank/0"
    # the listener's credential revoked: the connecting (honest) side refuses it at its handshake
    fp0 = pki.revoke(tmp_path, r0 / "cert.pem")
    acc, con = _pair(r0, r1, revoked, honest="connect", group="g2")
    assert not con["ok"] and "is revoked" in con["error"] and fp0 in con["error"], con
    assert not acc["ok"], acc  # and the thief's side learns nothing completed


def test_the_connecting_side_revoked_is_refused_by_the_listener(tmp_path: Path) -> None:
    pki.init_ca(tmp_path, "lab")
    life = timedelta(hours=1)
    r0 = pki.issue(tmp_path, f"{JOB}/rank/0", lifetime=life).directory
    r1 = pki.issue(tmp_path, f"{JOB}/rank/1", lifetime=life).directory
    pki.revoke(tmp_path, r1 / "cert.pem")
    acc, con = _pair(r0, r1, tmp_path / "ca" / "revoked.txt", honest="accept")
    assert not acc["ok"] and "is revoked" in acc["error"], acc
    assert not con["ok"] and "refused" in con["error"], con


def test_no_peer_is_no_acceptance(tmp_path: Path) -> None:
    pki.init_ca(tmp_path, "lab")
    r1 = pki.issue(tmp_path, f"{JOB}/rank/1", lifetime=timedelta(hours=1)).directory
    got = subprocess.run([sys.executable, "-m", "ringfence.secure.transport.peercheck", "connect", "--dir", str(r1),
                          "--rank", "1", "--world", "2", "--group", "g", "--host", "127.0.0.1",
                          "--port", str(_free_port()), "--timeout", "1"], capture_output=True, timeout=30)
    out = json.loads(got.stdout)
    assert got.returncode == 1 and out["ok"] is False and "in time" in out["error"], out
