"""Capture a site's traffic through its executors: one egress-only tcpdump per host, merged into one pcap.

Every host records what *leaves* its interface (``tcpdump -Q out``) for the same ``seconds``, its
pcap streamed back over the executor's stdout; the parts are merged by time (``mergecap``). Each
packet is thus recorded once, where its sender handed it to the network — the same rule as the lab's
fabric capture, which records each packet where it entered the fabric.

A host's part leaves out the one connection it is streamed back on: over SSH, that is the session
``$SSH_CONNECTION`` names (with a shared connection, every session of this run), whose packets would
otherwise carry the capture of themselves — a feedback that, in the lab, added ~32 MB of opaque
"management" bytes to a 6 s capture. What was left out is recorded in :attr:`SiteCapture.left_out`.

A partial capture is refused, never judged: a host whose part is missing (unreachable, no tcpdump,
no interface) could be the one sending plaintext, so :class:`TargetError` names every such host.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ringfence.targets.interface import FABRIC_HOST, Host, Site, TargetError
from ringfence.targets.ssh import SshExecutor

_MAGICS = (b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4", b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d")
#: exit status of ``timeout`` when it ended the capture (the normal end of a timed capture)
_TIMED_OUT = 124
#: The stderr line of a part whose own session was left out: this prefix, then the filter.
_LEFT_OUT = "ringfence-capture: left out "
#: Runs the capture command given as its arguments, with a filter that leaves out the session it runs in
#: when sshd named it (``client-ip client-port server-ip server-port``), and says so on stderr.
_LEAVE_OUT_OWN_SESSION = (
    'x=${SSH_CONNECTION:-}; c=${x%% *}; x=${x#* }; cp=${x%% *}; x=${x#* }; s=${x%% *}; sp=${x#* }; '
    '[ "$c $cp $s $sp" = "${SSH_CONNECTION:-}" ] || exec "$@"; case "$cp:$sp" in *[!0-9:]*|:*|*:) exec "$@";; esac; '
    'f="not (tcp and src host $s and src port $sp and dst host $c and dst port $cp)"; '
    'printf "' + _LEFT_OUT + '%s\\n" "$f" >&2; exec "$@" "$f"'
)


@dataclass(frozen=True)
class SiteCapture:
    """One merged capture: where it is, which hosts it covers, and each host's share in bytes."""

    path: Path
    nodes: tuple[str, ...]
    bytes_per_node: dict[str, int]
    #: per host, the filter that left out the connection its part was streamed back on (none: nothing left out)
    left_out: dict[str, str] = field(default_factory=dict)


def _one(host: Host, seconds: float, snaplen: int) -> tuple[str, bytes | None, str]:
    """(host, its pcap or None, why it is missing — or, with a pcap, the filter that left its own session out)."""
    if not host.interface:
        return host.name, None, f"{host.name}: no interface is known (set interface: in the hosts file)"
    argv = ["timeout", "-s", "INT", f"{seconds:g}", "tcpdump", "-i", host.interface, "-Q", "out", "-n", "-U",
            "-Z", "root", "-s", str(snaplen), "-w", "-"]
    if isinstance(host.executor, SshExecutor):  # streamed back over the network: leave that stream out
        # (only there: a local executor inherits this process's environment, whose $SSH_CONNECTION, if any,
        # is the user's own login — traffic to judge, not ours to hide)
        argv = ["sh", "-c", _LEAVE_OUT_OWN_SESSION, "sh", *argv]
    try:
        res = host.executor.run(argv, timeout=seconds + 30)
    except TargetError as exc:
        return host.name, None, exc.message
    err = res.stderr.decode(errors="replace")
    if res.timed_out or res.returncode not in (0, _TIMED_OUT) or res.stdout[:4] not in _MAGICS:
        why = err.strip()[-300:] or f"exit {res.returncode}"
        return host.name, None, f"{host.name}: tcpdump on {host.interface} gave no capture: {why}"
    left = next((ln[len(_LEFT_OUT):] for ln in err.splitlines() if ln.startswith(_LEFT_OUT)), "")
    return host.name, res.stdout, left


def capture_site(site: Site, seconds: float, out_path: Path, *, nodes: Sequence[str] | None = None,
                 snaplen: int = 256) -> SiteCapture:
    """Capture ``seconds`` of every host (or ``nodes``) of ``site`` into one classic pcap at ``out_path``.

    The fabric host (:data:`FABRIC_HOST`) is left out by default: it forwards what the nodes send, and
    each packet is recorded once, where its sender handed it to the network.
    """
    if seconds <= 0:
        raise TargetError(f"capture length must be positive, not {seconds:g}")
    chosen = sorted(nodes or [n for n in site.hosts if n != FABRIC_HOST])
    hosts = [site.host(n) for n in chosen]
    # All at once, whatever the fan-out: the parts must cover the same window to be one capture.
    with ThreadPoolExecutor(max_workers=max(1, len(hosts))) as pool:
        parts = list(pool.map(lambda h: _one(h, seconds, snaplen), hosts))
    missing = [why for _, data, why in parts if data is None]
    if missing:
        raise TargetError(f"capture of {site.kind} site {site.name} is incomplete, so it is not used: "
                          + "; ".join(missing))
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ringfence-capture-", dir=out_path.parent) as tmp:
        files = []
        for node, data, _ in parts:
            f = Path(tmp) / f"{node}.pcap"
            f.write_bytes(data or b"")
            files.append(str(f))
        merged = Path(tmp) / "merged.pcap"
        try:
            proc = subprocess.run(["mergecap", "-F", "pcap", "-w", str(merged), *files], capture_output=True,
                                  text=True, timeout=120, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise TargetError(f"cannot merge the capture parts: {exc}") from exc
        if proc.returncode != 0:
            raise TargetError(f"mergecap failed: {proc.stderr.strip()}")
        os.replace(merged, out_path)
    return SiteCapture(out_path, tuple(chosen), {node: len(data or b"") for node, data, _ in parts},
                       {node: left for node, _, left in parts if left})


__all__ = ["SiteCapture", "capture_site"]
