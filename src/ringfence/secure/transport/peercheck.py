"""One handshake of the ringfence transport between two hosts, as a check: does a peer accept a credential now?

A collective group is more than a handshake, but the handshake is where a peer decides: the certificate
against the cluster CA, its validity, the identity of the rank it claims and the revocation list *as it is
then* (re-read for every handshake, :func:`ringfence.secure.transport.handshake.current_revocations`). The
credential-compromise drill runs it from the victim's own address with the stolen copy, once before the
revocation (the copy must be accepted, or a refusal afterwards proves nothing) and once after (an honest rank
must refuse it) — through the site's executors, so on a lab and on SSH hosts alike::

    python -m ringfence.secure.transport.peercheck accept  --dir D --rank R --world W --group G \\
        --bind ADDR --port P [--revoked FILE] [--timeout S]
    python -m ringfence.secure.transport.peercheck connect --dir D --rank R --world W --group G \\
        --host ADDR --port P [--revoked FILE] [--timeout S]

As in a group, the higher rank connects and initiates; the lower one listens and responds. Each side prints
one JSON object: ``{"role", "rank", "ok", "error", "peer_identity", "peer_fingerprint", "at"}`` — ``ok`` is
true only when the whole handshake completed (FINISHED verified), ``at`` the epoch seconds it ended. Exit code
0 when it completed, 1 when it was refused or failed. Nothing is ever sent in plaintext but the handshake.
"""

from __future__ import annotations

import argparse
import errno
import json
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ringfence.errors import RingfenceError
from ringfence.secure.transport.config import TransportConfig
from ringfence.secure.transport.handshake import initiate, load_credentials, respond

#: pause between connection attempts while the listening side starts (it is started first, but on another host)
_RETRY = 0.1


def _config(args: argparse.Namespace) -> TransportConfig:
    d = Path(args.dir)
    return TransportConfig(cert=d / "cert.pem", key=d / "key.pem", ca=d / "ca.pem",
                           revoked=Path(args.revoked) if args.revoked else None, switch_interval=0.0)


def _connect(host: str, port: int, deadline: float) -> socket.socket:
    """Connect, retrying while nothing listens yet, until ``deadline``."""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"nothing accepted a connection at {host}:{port} in time")
        try:
            return socket.create_connection((host, port), timeout=left)
        except ConnectionRefusedError:
            time.sleep(min(_RETRY, max(0.0, deadline - time.monotonic())))


def check(args: argparse.Namespace) -> dict[str, Any]:
    """Run one side of the handshake; the outcome as printed."""
    out: dict[str, Any] = {"role": args.role, "rank": args.rank, "ok": False, "error": None,
                           "peer_identity": None, "peer_fingerprint": None, "at": None}
    deadline = time.monotonic() + args.timeout
    group = args.group.encode()
    try:
        config = _config(args)
        creds = load_credentials(config, args.rank)
        if args.role == "accept":
            with socket.create_server((args.bind, args.port)) as server:
                server.settimeout(args.timeout)
                sock, addr = server.accept()
            sock.settimeout(max(0.1, deadline - time.monotonic()))
            link = respond(sock, creds, config, rank=args.rank, world=args.world, group=group, taken=set(),
                           addr=f"{addr[0]}:{addr[1]}")
        else:
            sock = _connect(args.host, args.port, deadline)
            sock.settimeout(max(0.1, deadline - time.monotonic()))
            link = initiate(sock, creds, config, rank=args.rank, peer=args.peer, world=args.world, group=group)
        out.update(ok=True, peer_identity=link.peer_identity, peer_fingerprint=link.peer_fingerprint)
        link.close()
    except RingfenceError as exc:  # TransportError among them: a refusal, by either side
        out["error"] = exc.message
    except OSError as exc:  # timeouts included: no handshake is no acceptance
        out["error"] = ("address already in use: " if exc.errno == errno.EADDRINUSE else "") + str(exc)
    out["at"] = time.time()
    return out


def build_parser() -> argparse.ArgumentParser:
    """The command line (see the module docstring)."""
    p = argparse.ArgumentParser(prog="python -m ringfence.secure.transport.peercheck")
    p.add_argument("role", choices=("accept", "connect"))
    p.add_argument("--dir", required=True, help="cert.pem, key.pem, ca.pem of the rank")
    p.add_argument("--revoked", help="the revocation list (sha256:<hex> a line), re-read at the handshake")
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--peer", type=int, default=0, help="connect: the rank listening")
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--group", required=True, help="a name both sides share (a fresh one per check)")
    p.add_argument("--bind", default="0.0.0.0")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--timeout", type=float, default=10.0)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: print the outcome, exit 0 when the handshake completed."""
    args = build_parser().parse_args(argv)
    out = check(args)
    print(json.dumps(out), flush=True)
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["build_parser", "check", "main"]
