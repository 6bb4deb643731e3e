"""Jump node: an administrator running commands on the management node over real OpenSSH."""

from __future__ import annotations

import subprocess

from ringfence.lab.agents.common import Status, base_parser, run_forever, stop_event


def ssh_argv(target: str, user: str, key: str, known_hosts: str, command: str, port: int = 22) -> list[str]:
    """The ``ssh`` command line: key only, no prompts, the lab's own known_hosts, no user or system config."""
    return [
        "ssh", "-F", "/dev/null", "-i", key, "-p", str(port),
        "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", "-o", "StrictHostKeyChecking=yes",
        "-o", f"UserKnownHostsFile={known_hosts}", "-o", "ConnectTimeout=5", "-o", "LogLevel=ERROR",
        f"{user}@{target}", command,
    ]


def main(argv: list[str] | None = None) -> int:
    """Run ``--command`` on the target every ``--interval`` seconds until SIGTERM."""
    p = base_parser(__doc__ or "")
    p.add_argument("--target", required=True)
    p.add_argument("--port", type=int, default=22)
    p.add_argument("--user", default="root")
    p.add_argument("--key", required=True)
    p.add_argument("--known-hosts", required=True)
    p.add_argument("--command", default="uptime")
    p.add_argument("--interval", type=float, default=3.0)
    args = p.parse_args(argv)
    stop = stop_event()
    status = Status(args.status_file, "jump")
    cmd = ssh_argv(args.target, args.user, args.key, args.known_hosts, args.command, args.port)
    status.set("ready", True)

    def step() -> None:
        try:
            proc = subprocess.run(cmd, capture_output=True, timeout=20, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            status.error("ssh", exc)
            return
        if proc.returncode == 0:
            status.count("ssh_ok")
            status.set("last_output", proc.stdout.decode(errors="replace").strip()[:200])
        else:
            status.error("ssh", RuntimeError(f"exit {proc.returncode}: {proc.stderr.decode(errors='replace')[:300]}"))

    run_forever(stop, args.interval, step)
    status.set("ready", False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
