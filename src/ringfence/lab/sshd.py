"""The management node's real OpenSSH server: keys, config, known_hosts — all inside the lab's directory.

The lab logs in as ``root`` with the lab's generated ``admin`` key: creating an ``admin`` account would
change the host's ``/etc/passwd``, which a lab must not touch. The server accepts only that key
(``AuthorizedKeysFile`` points into the lab's directory), no passwords, and listens only on the
management address. ``/run/sshd`` (the privilege-separation directory sshd insists on) is created
if missing; it is the one path outside the lab directory the lab writes.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from ringfence.lab.topology import LabError

SSHD = "/usr/sbin/sshd"
PRIVSEP_DIR = Path("/run/sshd")
LOGIN_USER = "root"


@dataclass(frozen=True)
class SshMaterial:
    """Paths of the lab's SSH keys and files."""

    directory: Path

    @property
    def host_key(self) -> Path:
        """The sshd host key (ed25519)."""
        return self.directory / "ssh_host_ed25519_key"

    @property
    def admin_key(self) -> Path:
        """The administrator's private key (ed25519, no passphrase)."""
        return self.directory / "admin_ed25519"

    @property
    def authorized_keys(self) -> Path:
        """The only keys sshd accepts."""
        return self.directory / "authorized_keys"

    @property
    def known_hosts(self) -> Path:
        """The management node's host key, pinned for clients."""
        return self.directory / "known_hosts"

    @property
    def config(self) -> Path:
        """The sshd configuration."""
        return self.directory / "sshd_config"


def _keygen(path: Path, comment: str) -> None:
    try:
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                       check=True, capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        raise LabError(f"ssh-keygen failed for {path}: {exc}") from exc


def prepare(directory: Path, listen: str, port: int = 22) -> SshMaterial:
    """Generate keys and write the sshd config, authorized_keys and known_hosts for a server at ``listen``."""
    m = SshMaterial(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        PRIVSEP_DIR.mkdir(mode=0o755, exist_ok=True)
    except OSError as exc:
        raise LabError(f"cannot create {directory} or {PRIVSEP_DIR}: {exc.strerror or exc}") from exc
    _keygen(m.host_key, "ringfence-lab-mgmt-host")
    _keygen(m.admin_key, "ringfence-lab-admin")
    host_pub = m.host_key.with_suffix(".pub").read_text().split()
    m.authorized_keys.write_text(m.admin_key.with_suffix(".pub").read_text())
    m.authorized_keys.chmod(0o600)
    host = listen if port == 22 else f"[{listen}]:{port}"
    m.known_hosts.write_text(f"{host} {host_pub[0]} {host_pub[1]}\n")
    m.config.write_text(
        "\n".join([
            "# ringfence lab sshd: key-only logins with the lab's admin key, nothing else",
            f"ListenAddress {listen}",
            f"Port {port}",
            f"HostKey {m.host_key}",
            f"AuthorizedKeysFile {m.authorized_keys}",
            "PidFile none",
            "PermitRootLogin prohibit-password",
            f"AllowUsers {LOGIN_USER}",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "StrictModes yes",
            "PrintMotd no",
            "PrintLastLog no",
            "X11Forwarding no",
            "AllowTcpForwarding no",
            "LogLevel INFO",
            "Subsystem sftp internal-sftp",  # scp in OpenSSH >= 9 speaks SFTP
            "",
        ])
    )
    return m


def prepare_node(base: Path, node: str, listen: str, port: int = 22) -> SshMaterial:
    """An sshd of its own for ``node`` (its host key and config under ``base/nodes/<node>``), accepting only the
    lab's admin key (``base/authorized_keys``, made by :func:`prepare`). Idempotent: an existing key is kept."""
    shared = SshMaterial(base)
    m = SshMaterial(base / "nodes" / node)
    try:
        m.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        PRIVSEP_DIR.mkdir(mode=0o755, exist_ok=True)
    except OSError as exc:
        raise LabError(f"cannot create {m.directory} or {PRIVSEP_DIR}: {exc.strerror or exc}") from exc
    if not m.host_key.exists():
        _keygen(m.host_key, f"ringfence-lab-{node}-host")
    host_pub = m.host_key.with_suffix(".pub").read_text().split()
    host = listen if port == 22 else f"[{listen}]:{port}"
    m.known_hosts.write_text(f"{host} {host_pub[0]} {host_pub[1]}\n")
    text = shared.config.read_text()
    lines = [
        f"ListenAddress {listen}" if ln.startswith("ListenAddress ") else
        f"Port {port}" if ln.startswith("Port ") else
        f"HostKey {m.host_key}" if ln.startswith("HostKey ") else ln
        for ln in text.splitlines()
    ]
    m.config.write_text("\n".join(lines) + "\n")
    return m


def sshd_argv(m: SshMaterial) -> list[str]:
    """Run in the foreground, logging to stderr (the process log)."""
    return [SSHD, "-D", "-e", "-f", str(m.config)]


__all__ = ["LOGIN_USER", "PRIVSEP_DIR", "SSHD", "SshMaterial", "prepare", "prepare_node", "sshd_argv"]
