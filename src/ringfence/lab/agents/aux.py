"""Auxiliary node: a telemetry pod that pushes metrics — and, compromised, tries paths it should not have.

Every ``--interval`` it POSTs metrics to the management API (approved). Every ``--lateral-interval``
it makes the lateral attempts a compromised pod makes: read a dataset from storage, and open the
management node's sshd and read its banner. Each attempt's outcome is recorded as ``ok``, ``timeout``,
``refused``, ``reset`` or ``error`` — the difference matters: only a timeout or reset can be the
work of a filtering policy; a refusal is just a closed port.
"""

from __future__ import annotations

import json
import os
import socket
import time
from typing import Any

from ringfence.lab.agents.common import HttpClient, Status, base_parser, resolve_endpoint, stop_event


def classify(exc: BaseException) -> str:
    """``timeout``, ``refused``, ``reset`` or ``error`` for a failed connection attempt."""
    if isinstance(exc, TimeoutError | socket.timeout):
        return "timeout"
    if isinstance(exc, ConnectionRefusedError):
        return "refused"
    if isinstance(exc, ConnectionResetError | BrokenPipeError):
        return "reset"
    return "error"


def ssh_banner(host: str, port: int, timeout: float) -> str:
    """Connect and read the server's identification line."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        data = b""
        while b"\n" not in data and len(data) < 256:
            chunk = s.recv(256)
            if not chunk:
                break
            data += chunk
    return data.split(b"\n", 1)[0].decode(errors="replace").strip()


def main(argv: list[str] | None = None) -> int:
    """Telemetry and lateral attempts until SIGTERM."""
    p = base_parser(__doc__ or "")
    p.add_argument("--mgmt", required=True, help="host:port of the job API")
    p.add_argument("--storage", required=True, help="host:port of the object server")
    p.add_argument("--ssh", required=True, help="host:port of the management sshd")
    p.add_argument("--fallback-address", action="append", default=[], metavar="NAME=ADDR",
                   help="the address to use when NAME does not resolve (repeatable)")
    p.add_argument("--interval", type=float, default=1.0)
    p.add_argument("--lateral-interval", type=float, default=3.0)
    p.add_argument("--connect-timeout", type=float, default=3.0)
    args = p.parse_args(argv)
    stop = stop_event()
    status = Status(args.status_file, "aux")
    args.storage = resolve_endpoint(args.storage, dict(f.split("=", 1) for f in args.fallback_address), status)
    client = HttpClient(args, timeout=args.connect_timeout)
    scheme = client.scheme()
    ssh_host, ssh_port = args.ssh.rsplit(":", 1)
    lateral: dict[str, Any] = {}
    status.set("ready", True)
    next_lateral = 0.0
    while not stop.is_set():
        metrics = {"node": "aux", "load": os.getloadavg()[0], "ts": time.time()}
        try:
            client.request("POST", f"{scheme}://{args.mgmt}/metrics", json.dumps(metrics).encode(),
                           {"Content-Type": "application/json"})
            status.count("metrics_sent")
        except OSError as exc:
            status.error("metrics", exc)
        if time.monotonic() >= next_lateral:
            next_lateral = time.monotonic() + args.lateral_interval
            try:
                code, _ = client.request("GET", f"{scheme}://{args.storage}/datasets/train-a/shard-0")
                lateral["storage"] = {"result": "ok", "detail": f"HTTP {code}", "at": time.time()}
            except OSError as exc:
                lateral["storage"] = {"result": classify(exc), "detail": str(exc), "at": time.time()}
            try:
                banner = ssh_banner(ssh_host, int(ssh_port), args.connect_timeout)
                lateral["ssh"] = {"result": "ok", "detail": banner, "at": time.time()}
            except OSError as exc:
                lateral["ssh"] = {"result": classify(exc), "detail": str(exc), "at": time.time()}
            for what, outcome in lateral.items():
                status.count(f"lateral_{what}_{outcome['result']}")
            status.set("lateral", dict(lateral))
        stop.wait(args.interval)
    status.set("ready", False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
