"""How the credential drill reads a transport handshake: only the honest rank's refusal of *this* certificate as
revoked stops the copy; a timeout, another refusal, or the honest rank's own certificate being revoked does not."""

from __future__ import annotations

from typing import Any

from ringfence.drill._transport import Handshake

FP = "sha256:" + "ab" * 32
OTHER = "sha256:" + "cd" * 32


def _hs(honest: dict[str, Any]) -> Handshake:
    return Handshake(honest, {"ok": False}, "worker-2", 65535, FP)


def test_only_a_refusal_of_this_certificate_as_revoked_counts() -> None:
    refused = _hs({"ok": False, "error": f"refused connection from 10.77.1.12:4000 claiming rank 0: certificate "
                                        f"of spiffe://lab/job/train-b/rank/0 ({FP}) is revoked"})
    assert refused.refused_as_revoked and not refused.accepted
    own = _hs({"ok": False, "error": f"rank 1: own certificate unusable: certificate of spiffe://lab/job/train-b/"
                                    f"rank/1 ({OTHER}) is revoked"})
    assert not own.refused_as_revoked  # the honest rank could not even start: nothing was refused
    for error in ("timed out", "nothing accepted a connection at 10.77.1.12:65535 in time",
                  f"identity spiffe://lab/job/train-a/rank/0 ({FP}) is not the expected one"):
        assert not _hs({"ok": False, "error": error}).refused_as_revoked
    assert _hs({"ok": True, "error": None}).accepted
    assert not _hs({"ok": None, "error": "worker-3: unreachable"}).accepted
