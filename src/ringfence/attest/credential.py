"""The verifier's half of credential activation: ``tpm2_makecredential -T none`` (no TPM needed here).

The credential wraps a fresh random secret to the node's EK and binds it to the AK's *name* (which
hashes the AK's public area and its attributes): only the TPM holding that EK can recover the secret,
and it releases it only for a loaded key of exactly that name. Getting the secret back therefore proves
the AK lives in the same TPM as the EK. Subprocess and OS errors are translated here.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

from ringfence.attest.interface import AttestError
from ringfence.errors import EnvironmentProblem


def make_credential(ek_public: bytes, ak_name: bytes, secret: bytes, *, timeout: float = 30.0) -> bytes:
    """The credential blob for ``secret``, wrapped to ``ek_public`` (TPM2B_PUBLIC) for the AK ``ak_name``."""
    with tempfile.TemporaryDirectory(prefix="rf-makecred-") as tmp:
        d = Path(tmp)
        (d / "ek.pub").write_bytes(ek_public)
        (d / "secret").write_bytes(secret)
        argv = ["tpm2_makecredential", "-T", "none", "-u", str(d / "ek.pub"), "-s", str(d / "secret"),
                "-n", ak_name.hex(), "-o", str(d / "cred")]
        try:
            res = subprocess.run(argv, capture_output=True, timeout=timeout, check=False)
        except FileNotFoundError as exc:
            raise EnvironmentProblem("tpm2_makecredential is not installed on the verifier",
                                     hint="install tpm2-tools (scripts/sysdeps.sh)") from exc
        except subprocess.TimeoutExpired as exc:
            raise AttestError(f"tpm2_makecredential did not finish within {timeout:g}s") from exc
        if res.returncode != 0:
            why = res.stderr.decode(errors="replace").strip().splitlines()[-1:]
            raise AttestError(f"tpm2_makecredential refused the node's EK or AK name: {' '.join(why)[:300]}")
        return (d / "cred").read_bytes()


__all__ = ["make_credential"]
