"""A transport peer refuses a revoked certificate at its next handshake — even one revoked while it waits —
and accepts the reissued one (real handshakes over loopback sockets, ranks as threads)."""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ringfence.secure import pki
from ringfence.secure.transport import Group, TransportConfig, TransportError
from ringfence.secure.transport.engine import ring_allreduce
from ringfence.secure.transport.reduce import make_reducer

JOB = "spiffe://lab/job/train-a"
_SUM = make_reducer("float32", "SUM")


def _allreduce(rank: int, g: Group) -> object:
    a = np.full(16, rank + 1, dtype=np.float32)
    g.run(*ring_allreduce(a.data.cast("B"), 4, rank, g.world, g.chunk), _SUM)
    return a


def _config(d: Path, ca: Path, revoked: Path | None) -> TransportConfig:
    return TransportConfig(cert=d / "cert.pem", key=d / "key.pem", ca=ca, revoked=revoked, timeout=10.0,
                           chunk_bytes=64 << 10)


def test_a_certificate_revoked_while_a_rank_waits_is_refused_and_its_reissue_accepted(
    tmp_path: Path, store: Any, ranks: Any
) -> None:
    pki.init_ca(tmp_path, "lab")
    life = timedelta(hours=1)
    r0 = pki.issue(tmp_path, f"{JOB}/rank/0", lifetime=life).directory
    old = pki.issue(tmp_path, f"{JOB}/rank/1", lifetime=life, out_dir=tmp_path / "old").directory
    ca, revoked = tmp_path / "ca" / "ca.pem", tmp_path / "ca" / "revoked.txt"
    # the control: before revocation, the old certificate is good
    out = ranks([_config(r0, ca, revoked), _config(old, ca, None)], _allreduce)
    assert all(isinstance(o, np.ndarray) and float(o[0]) == 3.0 for o in out), out

    # rank 0 loads its credentials (the list is empty) and waits for rank 1 ...
    result: list[Any] = []

    def rank0() -> None:
        try:
            result.append(Group.connect(store, 0, 2, _config(r0, ca, revoked), timeout=10))
        except TransportError as exc:
            result.append(exc)

    t = threading.Thread(target=rank0, daemon=True)
    t.start()
    store.get("ringfence/addr/0")  # listening
    # ... the CA revokes the old certificate meanwhile; the thief's copy has no revocation list of its own
    fp = pki.revoke(tmp_path, old / "cert.pem")
    with pytest.raises(TransportError, match="is revoked") as thief:
        Group.connect(store, 1, 2, _config(old, ca, None), timeout=10)
    t.join(15)
    assert isinstance(result[0], TransportError) and "is revoked" in result[0].message and fp in result[0].message
    assert "rank 0 refused this rank" in thief.value.message

    # a group formed afterwards refuses it as well, and accepts the certificate reissued with a new key
    out = ranks([_config(r0, ca, revoked), _config(old, ca, None)], _allreduce)
    assert isinstance(out[0], TransportError) and "is revoked" in out[0].message
    new = pki.rotate(tmp_path, old, lifetime=life)[1].directory
    assert pki.show(new).fingerprint != fp
    out = ranks([_config(r0, ca, revoked), _config(new, ca, revoked)], _allreduce)
    assert all(isinstance(o, np.ndarray) and float(o[0]) == 3.0 for o in out), out


def test_an_unreadable_revocation_list_refuses_the_handshake(tmp_path: Path, store: Any) -> None:
    pki.init_ca(tmp_path, "lab")
    life = timedelta(hours=1)
    dirs = [pki.issue(tmp_path, f"{JOB}/rank/{r}", lifetime=life).directory for r in range(2)]
    ca, bad = tmp_path / "ca" / "ca.pem", tmp_path / "revoked.txt"
    result: list[Any] = []

    def rank0() -> None:
        try:
            result.append(Group.connect(store, 0, 2, _config(dirs[0], ca, bad), timeout=10))
        except TransportError as exc:
            result.append(exc)

    t = threading.Thread(target=rank0, daemon=True)
    t.start()
    store.get("ringfence/addr/0")
    bad.write_text("not a fingerprint\n")  # corrupted after rank 0 started: fail closed, not "nothing revoked"
    with pytest.raises(TransportError, match="refused this rank"):
        Group.connect(store, 1, 2, _config(dirs[1], ca, None), timeout=10)
    t.join(15)
    assert isinstance(result[0], TransportError) and "revocation list" in result[0].message
