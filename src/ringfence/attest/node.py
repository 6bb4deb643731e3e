"""The node side: tpm2-tools on a node's TPM, run through an executor (a lab namespace, an SSH host).

The boundary of this family for tpm2-tools: a command that cannot run, times out or exits non-zero is a
:class:`TpmUnreachable` naming the node and the tool's last words. The same scripts reach swtpm in the
lab (``TPM2TOOLS_TCTI=swtpm:path=…``) and ``/dev/tpmrm0`` on a real host (``device:/dev/tpmrm0``).

The EK and AK are kept at persistent handles, so nothing secret lives in files on the node, and
transient objects and sessions are flushed around every step: swtpm has no resource manager, and a
leaked object context fills the TPM's few slots within a handful of runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ringfence.attest.ekcert import EK_CERT_INDICES
from ringfence.attest.interface import AK_HANDLE, EK_HANDLE, Evidence, TpmUnreachable
from ringfence.targets.interface import Executor, TargetError
from ringfence.targets.ops import write_file

#: the TCTI of a real host's TPM through the kernel's resource manager
DEVICE_TCTI = "device:/dev/tpmrm0"

_HEX = "od -An -tx1 -v \"$1\" | tr -d ' \\n'; echo"
_FLUSH = "tpm2_flushcontext -t >/dev/null 2>&1; tpm2_flushcontext -s >/dev/null 2>&1; "
_KEYS = (
    'set -e; d="$0"; mkdir -p "$d"; cd "$d"; hex() { ' + _HEX + '; }; ' + _FLUSH
    # an EK already persistent is kept whatever its algorithm (the verifier reads that from its public area)
    + f"if ! tpm2_readpublic -c {EK_HANDLE} -o ek.pub >/dev/null 2>&1; then "
    'tpm2_createek -c ek.ctx -G "$1" -u ek.pub >/dev/null; '
    f"tpm2_evictcontrol -C o -c ek.ctx {EK_HANDLE} >/dev/null; "
    f"rm -f ek.ctx; fi; {_FLUSH}"
    f"tpm2_evictcontrol -C o -c {AK_HANDLE} >/dev/null 2>&1 || true; "
    f"tpm2_createak -C {EK_HANDLE} -c ak.ctx -G ecc -g sha256 -s ecdsa -u ak.pub -n ak.name >/dev/null; "
    f"tpm2_evictcontrol -C o -c ak.ctx {AK_HANDLE} >/dev/null; rm -f ak.ctx; {_FLUSH}"
    "hex ek.pub; hex ak.pub; hex ak.name"
)
_ACTIVATE = (
    'set -e; d="$0"; cd "$d"; hex() { ' + _HEX + '; }; ' + _FLUSH
    + "trap 'rm -f cred.bin secret.out s.ctx' EXIT; "
    "tpm2_startauthsession --policy-session -S s.ctx >/dev/null; tpm2_policysecret -S s.ctx -c e >/dev/null; "
    f"tpm2_activatecredential -c {AK_HANDLE} -C {EK_HANDLE} -i cred.bin -o secret.out -P session:s.ctx >/dev/null; "
    "tpm2_flushcontext s.ctx >/dev/null 2>&1 || true; hex secret.out"
)
_EK_CERTS = (
    'set -e; d="$0"; mkdir -p "$d"; cd "$d"; hex() { ' + _HEX + '; }; ' + _FLUSH
    + "trap 'rm -f ekcert.der' EXIT; "
    # one line per NV index asked for, empty where the TPM holds none: the verifier refuses a TPM without
    # a certificate of its EK when it requires one
    'for i in "$@"; do if tpm2_nvread "$i" -o ekcert.der >/dev/null 2>&1; then hex ekcert.der; else echo; fi; '
    "rm -f ekcert.der; done"
)
_QUOTE = (
    'set -e; d="$0"; log="$3"; ima="$4"; mkdir -p "$d"; cd "$d"; hex() { ' + _HEX + '; }; ' + _FLUSH
    + "trap 'rm -f q.msg q.sig' EXIT; "
    f'tpm2_quote -c {AK_HANDLE} -l "$1" -q "$2" -m q.msg -s q.sig -g sha256 >/dev/null; {_FLUSH}'
    'hex q.msg; hex q.sig; if [ -r "$log" ]; then hex "$log"; else echo; fi; '
    # an IMA list asked for but unreadable is an error, never an empty list (read after the quote, it may
    # end with measurements the quote does not cover: the verifier judges only the covered prefix)
    'if [ -n "$ima" ]; then [ -r "$ima" ] || { echo "cannot read the IMA list $ima" >&2; exit 3; }; '
    'hex "$ima"; else echo; fi'
)


@dataclass(frozen=True)
class NodeTpm:
    """How to reach one node's TPM: the executor, the TCTI, a work directory and its event log's path."""

    executor: Executor
    tcti: str
    workdir: str  # on the node: transient files of the tools (public areas, the credential blob)
    event_log: str  # on the node: the measured-boot log (JSON, or binary_bios_measurements on a real host)
    ima_list: str = ""  # on the node: the IMA ASCII list (ascii_runtime_measurements); empty: not read
    # the EK created when none is persistent: rsa (RSA 2048, TCG template L-1) or ecc (NIST P-256, L-2)
    ek_alg: Literal["rsa", "ecc"] = "rsa"

    @property
    def node(self) -> str:
        """The node's name."""
        return self.executor.name

    def _run(self, script: str, args: list[str], what: str, timeout: float) -> list[bytes]:
        env = {"TPM2TOOLS_TCTI": self.tcti}
        try:
            res = self.executor.run(["sh", "-c", script, self.workdir, *args], env=env, timeout=timeout)
        except TargetError as exc:
            raise TpmUnreachable(f"{self.node}: {what}: {exc.message}") from exc
        if res.timed_out:
            raise TpmUnreachable(f"{self.node}: {what}: no answer within {timeout:g}s")
        if res.returncode != 0:
            tail = res.stderr.decode(errors="replace").strip().splitlines()[-3:]
            raise TpmUnreachable(f"{self.node}: {what} failed (exit {res.returncode}): {' / '.join(tail)[-400:]}",
                                 hint=f"is the TPM reachable through TCTI {self.tcti}?")
        try:
            return [bytes.fromhex(line) for line in res.stdout.decode().splitlines()]
        except (UnicodeDecodeError, ValueError) as exc:
            raise TpmUnreachable(f"{self.node}: {what}: unreadable output from the node") from exc

    def keys(self, timeout: float = 60.0) -> tuple[bytes, bytes, bytes]:
        """(EK TPM2B_PUBLIC, AK TPM2B_PUBLIC, AK name): the EK kept (or created), a fresh AK under it."""
        out = self._run(_KEYS, [self.ek_alg], "creating the EK and AK", timeout)
        if len(out) != 3:
            raise TpmUnreachable(f"{self.node}: creating the EK and AK: expected 3 outputs, got {len(out)}")
        return out[0], out[1], out[2]

    def ek_certificates(self, kind: str, timeout: float = 60.0) -> dict[str, bytes]:
        """What the TPM holds at each NV index of a ``kind`` (rsa, ecc) EK's certificate: index → bytes,
        empty where it holds none (the TCG EK Credential Profile's indices, ringfence.attest.ekcert)."""
        indices = EK_CERT_INDICES[kind]
        out = self._run(_EK_CERTS, list(indices), "reading the EK certificate", timeout)
        if len(out) != len(indices):
            raise TpmUnreachable(f"{self.node}: reading the EK certificate: expected {len(indices)} outputs, "
                                 f"got {len(out)}")
        return dict(zip(indices, out, strict=True))

    def activate(self, credential: bytes, timeout: float = 60.0) -> bytes:
        """The secret of ``credential`` (from ``tpm2_makecredential``), as only this TPM's EK can recover it."""
        try:
            write_file(self.executor, f"{self.workdir}/cred.bin", credential)
        except TargetError as exc:
            raise TpmUnreachable(f"{self.node}: sending the credential: {exc.message}") from exc
        out = self._run(_ACTIVATE, [], "activating the credential", timeout)
        return out[0] if len(out) == 1 else b""

    def quote(self, nonce: bytes, pcrs: tuple[int, ...], timeout: float = 60.0) -> Evidence:
        """A quote of ``pcrs`` (sha256 bank) over ``nonce`` by the AK, with the node's event log."""
        selection = "sha256:" + ",".join(str(p) for p in sorted(pcrs))
        out = self._run(_QUOTE, [selection, nonce.hex(), self.event_log, self.ima_list], "quoting", timeout)
        if len(out) != 4:
            raise TpmUnreachable(f"{self.node}: quoting: expected 4 outputs, got {len(out)}")
        return Evidence(self.node, nonce, out[0], out[1], out[2], out[3] if self.ima_list else None)


__all__ = ["DEVICE_TCTI", "NodeTpm"]
