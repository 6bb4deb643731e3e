"""A throwaway swtpm for unit tests (no root, no lab): start one, boot it with chosen measurements, stop it."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from ringfence.attest.node import NodeTpm
from ringfence.targets.local import LocalExecutor

#: (pcr, name, kind, version, measured bytes) of the test stack
STACK = (
    (7, "secure-boot", "secure-boot", "enabled", b"SecureBoot=enabled"),
    (9, "kernel", "host-kernel", "6.1.0-test", b"Linux 6.1.0-test"),
    (10, "libcuda", "nvidia-user-library", "550.54", b"libcuda.so.550.54 bytes"),
    (10, "mofed", "mofed", "24.10", b"mlx5_core 24.10"),
)


def policy_doc(**over: object) -> dict[str, object]:
    """The attestation section approving :data:`STACK`."""
    doc: dict[str, object] = {
        "interval": "60s", "pcrs": [7, 9, 10], "secure_boot": "required",
        "components": [{"name": n, "kind": k, "pcr": p, "versions": [v],
                        "digests": [f"sha256:{hashlib.sha256(b).hexdigest()}"]} for p, n, k, v, b in STACK],
    }
    doc.update(over)
    return doc


def require_swtpm() -> None:
    """Skip when swtpm or tpm2-tools are missing."""
    missing = [t for t in ("swtpm", "tpm2_quote", "tpm2_makecredential") if shutil.which(t) is None]
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)}")


@contextmanager
def swtpm(directory: Path, name: str = "node-a") -> Iterator[NodeTpm]:
    """A running swtpm in ``directory``; yields its NodeTpm (local executor); stopped (by pid) at exit."""
    require_swtpm()
    (directory / "state").mkdir(parents=True, exist_ok=True)  # exist_ok: a manufactured state (EK cert)
    sock = directory / "tpm.sock"
    proc = subprocess.Popen(
        ["swtpm", "socket", "--tpm2", "--tpmstate", f"dir={directory / 'state'}", "--server",
         f"type=unixio,path={sock}", "--ctrl", f"type=unixio,path={sock}.ctrl", "--flags",
         "not-need-init,startup-clear"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not Path(f"{sock}.ctrl").exists():  # observed: the control socket comes last
            assert proc.poll() is None, "swtpm exited"
            assert time.monotonic() < deadline, "swtpm did not start"
            time.sleep(0.02)
        yield NodeTpm(LocalExecutor(name), f"swtpm:path={sock}", str(directory / "work"),
                      str(directory / "eventlog.json"))
    finally:
        proc.terminate()
        proc.wait(10)


def boot(tpm: NodeTpm, events: tuple[tuple[int, str, str, str, bytes], ...] = STACK, *,
         log_only: tuple[tuple[int, str, str, str, bytes], ...] = (),
         pcr_only: tuple[tuple[int, str, str, str, bytes], ...] = ()) -> None:
    """Extend ``events`` (+ ``pcr_only``) and log them (+ ``log_only``): the two extras make log and PCRs disagree."""
    env = {**os.environ, "TPM2TOOLS_TCTI": tpm.tcti}
    extend = [f"{p}:sha256={hashlib.sha256(b).hexdigest()}" for p, *_, b in (*events, *pcr_only)]
    subprocess.run(["tpm2_pcrextend", *extend], check=True, env=env, capture_output=True)
    log = {"format": "ringfence-eventlog-1", "events": [
        {"pcr": p, "name": n, "kind": k, "version": v, "digest": hashlib.sha256(b).hexdigest()}
        for p, n, k, v, b in (*events, *log_only)]}
    Path(tpm.event_log).write_text(json.dumps(log))
