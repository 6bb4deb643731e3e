"""``ringfence lab up|status|down|capture|exec|policy``: the namespace lab from the command line.

Everything except ``lab policy --workers N`` needs root and iproute2; without them the verb fails
with exit 2 and says so. ``--name`` may be left out whenever exactly one lab exists.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from ringfence.errors import RingfenceError


def _lab_module() -> Any:
    # imported on use: ``ringfence --help`` should not pay for the lab's imports
    import ringfence.lab as lab_pkg

    return lab_pkg


def _attach(args: argparse.Namespace) -> Any:
    from ringfence.lab.netns import require_privileges

    require_privileges()
    return _lab_module().Lab.attach(args.name)


def _up(args: argparse.Namespace) -> int:
    lab_pkg = _lab_module()
    print(f"bringing up a lab with {args.workers} workers, {args.jobs} job(s)…", file=sys.stderr)
    lab = lab_pkg.Lab.up(workers=args.workers, jobs=args.jobs, name=args.name, traffic=not args.no_traffic,
                         scheduler=not args.no_scheduler, egress_gateway=args.egress_gateway)
    print(f"lab {lab.name} is up{'' if args.no_traffic else ' and traffic is flowing'}", file=sys.stderr)
    print(lab.name)
    return 0


def _status_table(st: Any) -> str:
    lines = [
        f"lab {st.name}: {st.phase}, created {st.created}, {st.workers} workers, "
        f"traffic {'running' if st.traffic_running else 'stopped'}",
        f"fabric namespace {st.fabric_namespace}; state {st.state_file}",
        "",
        f"{'ZONE':<11} {'SUBNET':<15} {'BRIDGE':<15} {'GATEWAY':<11} TRUST",
    ]
    lines += [f"{z.name:<11} {z.subnet:<15} {z.bridge:<15} {z.gateway:<11} {z.trust}" for z in st.zones]
    lines += ["", f"{'NODE':<10} {'ZONE':<11} {'ADDRESS':<11} {'NAMESPACE':<18} {'UP':<3} {'SERVICES':<32} PROCESSES"]
    for n in st.nodes:
        services = ", ".join(
            f"{s.name}:{s.port}{'/tls' if s.tls else ''}{'' if s.listening else ' (down)'}" for s in n.services
        ) or "-"
        processes = ", ".join(f"{p.label}[{p.pid}]{'' if p.alive else ' (dead)'}" for p in n.processes) or "-"
        lines.append(
            f"{n.name:<10} {n.zone:<11} {n.addresses[0]:<11} {n.namespace:<18} {'yes' if n.present else 'no':<3} "
            f"{services:<32} {processes}"
        )
    lines += ["", "JOBS"]
    lines += [f"{j.name}: ranks {', '.join(j.members)}; rendezvous {j.master_addr}:{j.master_port}" for j in st.jobs]
    return "\n".join(lines)


def _status(args: argparse.Namespace) -> int:
    st = _attach(args).status()
    if args.format == "json":
        print(json.dumps(st.to_json(), indent=2))
    else:
        print(_status_table(st))
    return 0


def _down(args: argparse.Namespace) -> int:
    from ringfence.lab.netns import require_privileges

    require_privileges()
    lab_pkg = _lab_module()
    if args.all:
        reports = lab_pkg.down_all()
    else:
        reports = (lab_pkg.Lab.attach(args.name).down(),)
    for r in reports:
        print(f"lab {r.name}: stopped {len(r.processes_stopped)} processes, "
              f"deleted {len(r.namespaces_deleted)} namespaces", file=sys.stderr)
        if r.leftover_pids:
            print(f"lab {r.name}: unrecorded processes were still inside its namespaces: {list(r.leftover_pids)}",
                  file=sys.stderr)
    if not reports:
        print("no labs to remove", file=sys.stderr)
    return 0


def _capture(args: argparse.Namespace) -> int:
    lab = _attach(args)
    print(f"capturing {args.seconds}s on lab {lab.name}…", file=sys.stderr)
    r = lab.capture(args.seconds, Path(args.output), snaplen=args.snaplen)
    print(f"{r.path}: {r.packets} packets from {len(r.interfaces)} ports, {r.dropped} dropped by the kernel",
          file=sys.stderr)
    return 0


def _exec(args: argparse.Namespace) -> int:
    lab = _attach(args)
    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise RingfenceError("lab exec needs a command after the node name", hint="ringfence lab exec mgmt -- ss -ltn")
    ex = lab.executor(args.node)
    try:
        # stdio inherited: an interactive shell in a node works too
        return subprocess.call([*ex.prefix, *cmd])
    except OSError as exc:
        raise RingfenceError(f"cannot run {cmd[0]!r} in {args.node}: {exc.strerror or exc}") from exc


def _hosts(args: argparse.Namespace) -> int:
    from ringfence.atomic import write_atomic
    from ringfence.lab.hosts import hosts_document
    from ringfence.lab.netns import require_privileges
    from ringfence.targets.hosts import dump_hosts, parse_hosts

    require_privileges()
    nodes = [n.strip() for n in (args.nodes or "").split(",") if n.strip()] or None
    text = dump_hosts(hosts_document(_attach(args), nodes))
    parse_hosts(text, "<generated>")  # what we write must load: the same strict schema as any hosts file
    if args.output:
        write_atomic(args.output, text.encode())
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def _policy(args: argparse.Namespace) -> int:
    lab_pkg = _lab_module()
    if args.workers is not None or args.jobs is not None:
        topo = lab_pkg.build_topology(args.name or "rflab", args.workers or 2, args.jobs or 1)
        text = lab_pkg.render_policy(topo)
    else:
        text = _attach(args).policy_yaml()
    if args.output:
        from ringfence.atomic import write_atomic

        write_atomic(args.output, text.encode())
    else:
        sys.stdout.write(text)
    return 0


def register(sub: Any) -> None:
    """Add the ``lab`` verb."""
    p = sub.add_parser("lab", help="a real miniature training cluster in network namespaces (root)")
    lsub = p.add_subparsers(dest="lab_cmd", required=True, metavar="CMD")

    def named(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
        parser.add_argument("--name", help="the lab (optional when only one exists)")
        return parser

    up = named(lsub.add_parser("up", help="build a lab and start its services and traffic"))
    up.add_argument("--workers", type=int, default=2, help="worker nodes (default 2)")
    up.add_argument("--jobs", type=int, default=1, help="training jobs sharing the workers (default 1)")
    up.add_argument("--no-traffic", action="store_true", help="start only the servers")
    up.add_argument("--no-scheduler", action="store_true",
                    help="start the training ranks directly, without the lab's Slurm")
    up.add_argument("--egress-gateway", action="store_true",
                    help="also run the egress gateway (tinyproxy on mgmt, rendered from the policy)")
    up.set_defaults(func=_up)

    st = named(lsub.add_parser("status", help="show a lab's nodes, services and processes"))
    st.add_argument("--format", choices=("table", "json"), default="table")
    st.set_defaults(func=_status)

    down = named(lsub.add_parser("down", help="remove a lab completely"))
    down.add_argument("--all", action="store_true", help="remove every lab that has a state file")
    down.set_defaults(func=_down)

    cap = named(lsub.add_parser("capture", help="capture all of a lab's traffic into one pcap"))
    cap.add_argument("--seconds", type=float, default=8.0)
    cap.add_argument("-o", "--output", required=True, help="pcap file to write")
    cap.add_argument("--snaplen", type=int, default=256, help="bytes kept per packet (0: all; default 256)")
    cap.set_defaults(func=_capture)

    ex = named(lsub.add_parser("exec", help="run a command inside a node's namespace"))
    ex.add_argument("node")
    ex.add_argument("cmd", nargs=argparse.REMAINDER, help="-- COMMAND ARGS…")
    ex.set_defaults(func=_exec)

    pol = named(lsub.add_parser("policy", help="print the as-found policy YAML of a lab"))
    pol.add_argument("--workers", type=int, help="render for this size without a running lab")
    pol.add_argument("--jobs", type=int, help="with --workers: jobs")
    pol.add_argument("-o", "--output", help="write to this file instead of stdout")
    pol.set_defaults(func=_policy)

    ho = named(lsub.add_parser("hosts", help="run sshd on the lab's nodes and write them as an SSH hosts inventory"))
    ho.add_argument("-o", "--output", help="the hosts file to write (default: stdout)")
    ho.add_argument("--nodes", help="comma-separated nodes (default: every node but jump)")
    ho.set_defaults(func=_hosts)


__all__ = ["register"]
