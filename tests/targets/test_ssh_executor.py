"""The OpenSSH executor against the lab's real sshd, from the jump host's namespace."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from ringfence.lab import Lab
from ringfence.targets.interface import TargetError
from ringfence.targets.ssh import SshExecutor

pytestmark = [pytest.mark.privileged]


def test_runs_commands_on_mgmt_from_jump(lab: Lab) -> None:
    ssh = lab.ssh_executor()
    result = ssh.run(["ip", "-o", "-4", "addr", "show"], timeout=30)
    assert result.returncode == 0, result.stderr
    assert b"10.77.3.10/24" in result.stdout  # the session runs on mgmt, not where the client is
    assert result.argv[:4] == ("ip", "netns", "exec", f"{lab.name}-jump")
    assert ssh.run(["uptime"]).returncode == 0
    # arguments arrive intact (quoted once), environment and stdin pass through, exit codes too
    assert ssh.run(["printf", "%s|", "a b", "$HOME", "'q'"]).stdout == b"a b|$HOME|'q'|"
    assert ssh.run(["sh", "-c", 'echo "$RF_Y"'], env={"RF_Y": "z z"}).stdout == b"z z\n"
    assert ssh.run(["cat"], stdin=b"over ssh").stdout == b"over ssh"
    assert ssh.run(["sh", "-c", "exit 3"]).returncode == 3


def test_copies_both_ways(lab: Lab, tmp_path: Path) -> None:
    ssh = lab.ssh_executor()
    src = tmp_path / "up.bin"
    src.write_bytes(bytes(range(256)) * 64)
    remote = f"/tmp/ringfence-ssh-test-{lab.name}.bin"
    try:
        ssh.copy_to(src, remote)
        back = tmp_path / "sub" / "down.bin"
        ssh.copy_from(remote, back)
        assert back.read_bytes() == src.read_bytes()
    finally:
        ssh.run(["rm", "-f", remote])
    with pytest.raises(TargetError, match="scp"):
        ssh.copy_from("/nonexistent/file", tmp_path / "x")


def test_spawned_remote_process_is_stopped_remotely(lab: Lab, tmp_path: Path) -> None:
    ssh = lab.ssh_executor()
    seconds = f"61.{time.monotonic_ns() % 10**6:06d}"  # an argument no other process has
    proc = ssh.spawn(["sleep", seconds], stdout=tmp_path / "o", stderr=tmp_path / "e")
    pattern = f"[s]leep {seconds}"  # so the remote shell running pgrep does not match itself
    deadline = time.monotonic() + 15
    while ssh.run(["pgrep", "-f", pattern]).returncode != 0:
        assert time.monotonic() < deadline, (tmp_path / "e").read_text()
        time.sleep(0.2)
    proc.stop(timeout=3)
    assert proc.poll() is not None
    assert ssh.run(["pgrep", "-f", pattern]).returncode == 1  # nothing left on the remote side


def test_wrong_key_or_unknown_host_fails_loudly(lab: Lab, tmp_path: Path) -> None:
    good = lab.ssh_executor()
    stranger = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    prefix = ("ip", "netns", "exec", f"{lab.name}-jump")
    bad_key = SshExecutor(good.host, user=good.user, key=stranger, known_hosts=good.known_hosts, prefix=prefix)
    with pytest.raises(TargetError, match="Permission denied"):
        bad_key.run(["true"])
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    unknown = SshExecutor(good.host, user=good.user, key=good.key, known_hosts=empty, prefix=prefix)
    with pytest.raises(TargetError, match="[Hh]ost key"):
        unknown.run(["true"])


#: the pid of the sshd process serving this session's connection (the nearest sshd ancestor): one per connection
_CONNECTION = ('p=$$; while [ "$p" -gt 1 ]; do case "$(cat /proc/$p/comm)" in sshd*) break;; esac; '
               'p=$(awk \'/^PPid/ {print $2}\' /proc/$p/status); done; echo $p')


def _connections(ex: SshExecutor, n: int) -> set[str]:
    """The connections ``n`` commands of ``ex`` ran over, one after another."""
    return {ex.run(["sh", "-c", _CONNECTION]).stdout.decode().strip() for _ in range(n)}


def _masters(path: str) -> list[str]:
    """Local ssh processes serving the control socket ``path`` (the shared connections)."""
    out = subprocess.run(["pgrep", "-af", "ssh"], capture_output=True, text=True).stdout.splitlines()
    return [line for line in out if path in line and "pgrep" not in line]


def test_commands_share_one_connection_checked_as_their_own_and_closed_after(lab: Lab) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from ringfence.targets import ssh as ssh_mod

    ssh_mod.close_masters()
    shared = lab.ssh_executor()
    # six commands, one connection (one key exchange): each session's sshd ancestor is the same process
    # (counting sshd's "Accepted" lines would also count the lab's own administrative SSH traffic)
    assert len(_connections(shared, 6)) == 1
    # more commands at once than the shared connection takes: the rest open their own, none fails
    with ThreadPoolExecutor(max_workers=ssh_mod.MUX_SESSIONS + 4) as pool:
        codes = list(pool.map(lambda i: shared.run(["sh", "-c", "sleep 0.5; exit $0", str(i % 3)]).returncode,
                              range(ssh_mod.MUX_SESSIONS + 4)))
    assert codes == [i % 3 for i in range(ssh_mod.MUX_SESSIONS + 4)]
    # a shared connection never stands in for another executor's host-key check: same host, nothing pinned
    empty = lab.paths.directory / "ssh" / "empty_known_hosts"
    empty.write_text("")
    unknown = SshExecutor(shared.host, user=shared.user, key=shared.key, known_hosts=empty,
                           prefix=("ip", "netns", "exec", f"{lab.name}-jump"))
    with pytest.raises(TargetError, match="[Hh]ost key"):
        unknown.run(["true"])
    # nor after the executor's own known_hosts changed: the open connection was checked against the old one
    pinned = lab.paths.directory / "ssh" / "pinned_known_hosts"
    pinned.write_bytes(Path(shared.known_hosts).read_bytes())
    moving = SshExecutor(shared.host, user=shared.user, key=shared.key, known_hosts=pinned,
                         prefix=("ip", "netns", "exec", f"{lab.name}-jump"))
    assert moving.run(["true"]).returncode == 0
    pinned.write_text("")
    with pytest.raises(TargetError, match="[Hh]ost key"):
        moving.run(["true"])
    # a single connection per command when asked
    own = SshExecutor(shared.host, user=shared.user, key=shared.key, known_hosts=shared.known_hosts,
                      prefix=("ip", "netns", "exec", f"{lab.name}-jump"), multiplex=False)
    assert len(_connections(own, 2)) == 2
    paths = list(ssh_mod._masters)
    assert paths and all(_masters(p) for p in paths if Path(p).exists())
    ssh_mod.close_masters()
    deadline = time.monotonic() + 15
    while any(_masters(p) for p in paths) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_masters(p) for p in paths)
