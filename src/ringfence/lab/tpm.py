"""A software TPM per lab node, and the node's measured boot emulated on it.

This kernel has no TPM driver (no ``/dev/tpm0``), so each node gets its own ``swtpm`` (state under the
lab's directory), reached by tpm2-tools through the swtpm socket TCTI. The TCTI opens the control
channel at the data socket's path plus ``.ctrl``, so the two sockets are named that way. swtpm starts
lazily, the first time attestation needs a node's TPM: a lab that never attests pays nothing.

A node's "boot" is emulated by extending PCRs with the sha256 digests of what the node actually runs —
this kernel's version string (PCR 9), the python interpreter, torch, ringfence, sshd and wireguard-go
(PCR 10), and the Secure Boot state (PCR 7: disabled, there is no firmware) — and writing the matching
event log. That is an emulation: a software TPM is not a hardware root of trust, and nothing here was
measured by firmware before it ran.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import ringfence
from ringfence.lab.topology import LabError

PCR_SECURE_BOOT, PCR_KERNEL, PCR_STACK = 7, 9, 10


@dataclass(frozen=True)
class TpmPaths:
    """Where one node's software TPM keeps its state, sockets, event log and the tools' work files."""

    directory: Path

    @property
    def state(self) -> Path:
        """swtpm's NVRAM (``--tpmstate dir=``): the EK and AK survive a restart of the daemon."""
        return self.directory / "state"

    @property
    def socket(self) -> Path:
        """The data socket (the TCTI's ``path``)."""
        return self.directory / "tpm.sock"

    @property
    def ctrl(self) -> Path:
        """The control socket, where the swtpm TCTI looks for it: the data socket's path plus ``.ctrl``."""
        return self.directory / "tpm.sock.ctrl"

    @property
    def event_log(self) -> Path:
        """The emulated boot's event log."""
        return self.directory / "eventlog.json"

    @property
    def work(self) -> Path:
        """The work directory of tpm2-tools on this node."""
        return self.directory / "work"

    @property
    def tcti(self) -> str:
        """``swtpm:path=…``: how tpm2-tools reach this TPM."""
        return f"swtpm:path={self.socket}"


def swtpm_argv(p: TpmPaths) -> list[str]:
    """The swtpm command line (its paths name the lab's directory, the marker of our processes)."""
    return ["swtpm", "socket", "--tpm2", "--tpmstate", f"dir={p.state}",
            "--server", f"type=unixio,path={p.socket}", "--ctrl", f"type=unixio,path={p.ctrl}",
            "--flags", "not-need-init,startup-clear"]


@dataclass(frozen=True)
class Measured:
    """One thing the node runs: its event fields and the path measured."""

    pcr: int
    name: str
    kind: str
    version: str
    digest: str
    path: str


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _tree_digest(root: Path) -> str:
    """sha256 over (relative path, file sha256) of every .py file under ``root``, sorted: a package's code."""
    h = hashlib.sha256()
    for f in sorted(root.rglob("*.py")):
        h.update(f"{f.relative_to(root)}\0{_file_digest(f)}\n".encode())
    return h.hexdigest()


def _which(name: str) -> Path:
    found = shutil.which(name) or (f"/usr/sbin/{name}" if Path(f"/usr/sbin/{name}").exists() else None)
    if not found:
        raise LabError(f"{name} is not installed: the lab's measured stack includes it")
    return Path(found).resolve()


@functools.cache
def _stack() -> tuple[Measured, ...]:
    """What every lab node runs (they share this machine's file system), measured once per process."""
    uname = os.uname()
    kernel = f"{uname.sysname} {uname.release} {uname.version}".encode()
    out = [
        Measured(PCR_SECURE_BOOT, "secure-boot", "secure-boot", "disabled",
                 hashlib.sha256(b"SecureBoot=disabled").hexdigest(), ""),
        Measured(PCR_KERNEL, "kernel", "host-kernel", uname.release, hashlib.sha256(kernel).hexdigest(),
                 "uname"),
    ]
    py = Path(sys.executable).resolve()
    out.append(Measured(PCR_STACK, "python", "binary", platform.python_version(), _file_digest(py), str(py)))
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        raise LabError("torch is not installed: the lab's measured stack includes it")
    torch_c = sorted(Path(spec.origin).parent.glob("_C*.so"))
    if not torch_c:
        raise LabError("torch's extension module _C is missing")
    out.append(Measured(PCR_STACK, "torch", "python-package", "", _file_digest(torch_c[0]), str(torch_c[0])))
    pkg = Path(ringfence.__file__).resolve().parent
    out.append(Measured(PCR_STACK, "ringfence", "python-package", ringfence.__version__, _tree_digest(pkg),
                        str(pkg)))
    for name in ("sshd", "wireguard-go"):
        path = _which(name)
        out.append(Measured(PCR_STACK, name, "binary", "", _file_digest(path), str(path)))
    return tuple(out)


def measurements(replace: Mapping[str, Path] | None = None) -> tuple[Measured, ...]:
    """The stack's measurements; ``replace`` maps a component name to another file measured in its place
    (a node running a changed binary)."""
    out = []
    for m in _stack():
        alt = (replace or {}).get(m.name)
        out.append(m if alt is None else Measured(m.pcr, m.name, m.kind, m.version, _file_digest(alt), str(alt)))
    return tuple(out)


def reference_allowlist(interval: str = "60s") -> dict[str, object]:
    """The lab's ``attestation`` policy section: this machine's stack is the approved stack."""
    return {
        "interval": interval,
        "pcrs": [PCR_SECURE_BOOT, PCR_KERNEL, PCR_STACK],
        "secure_boot": "not-required",  # the lab has no firmware; real fleets keep the default, required
        "components": [
            {"name": m.name, "kind": m.kind, "pcr": m.pcr, "digests": [f"sha256:{m.digest}"],
             **({"versions": [m.version]} if m.version else {})}
            for m in _stack()
        ],
    }


def _tool(argv: list[str], tcti: str, what: str) -> None:
    env = {**os.environ, "TPM2TOOLS_TCTI": tcti}
    try:
        res = subprocess.run(argv, capture_output=True, timeout=30, check=False, env=env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LabError(f"{what}: {exc}") from exc
    if res.returncode != 0:
        raise LabError(f"{what} failed: {res.stderr.decode(errors='replace').strip()[-300:]}")


def boot(p: TpmPaths, *, replace: Mapping[str, Path] | None = None, reset: bool = False,
         extra: tuple[Measured, ...] = ()) -> None:
    """Emulate a measured boot: (``reset``: power-cycle the TPM first) extend each measurement, then
    write the event log. ``extra`` events are extended *and* logged after the stack (a test's tampering)."""
    if reset:  # an orderly reboot: Shutdown(CLEAR) first, so the TPM still vouches for its clock
        _tool(["tpm2_shutdown", "-c"], p.tcti, "shutting the TPM down")
        _tool(["swtpm_ioctl", "--unix", str(p.ctrl), "-i"], p.tcti, "resetting the TPM")
        _tool(["tpm2_startup", "-c"], p.tcti, "starting the TPM up")
    events = [*measurements(replace), *extra]
    _tool(["tpm2_pcrextend", *(f"{m.pcr}:sha256={m.digest}" for m in events)], p.tcti, "extending PCRs")
    log = {"format": "ringfence-eventlog-1",
           "events": [{"pcr": m.pcr, "name": m.name, "kind": m.kind, "version": m.version, "digest": m.digest,
                       "path": m.path} for m in events]}
    tmp = p.event_log.with_suffix(".tmp")
    tmp.write_text(json.dumps(log, indent=1))
    tmp.replace(p.event_log)


__all__ = ["Measured", "TpmPaths", "boot", "measurements", "reference_allowlist", "swtpm_argv"]
