"""``ringfence inventory from-slurm|from-k8s|from-hosts``: a policy skeleton from the cluster's records.

The skeleton (zones, nodes, addresses, workloads; no approved flows) goes to ``--output`` or stdout;
``ringfence discover CAPTURES --inventory SKELETON`` then proposes the approved matrix. Hosts that could
not be included (no IP address, a clashing address) are listed on stderr and at the top of the file.
Exit 0 when a skeleton was written, 2 for unreadable or malformed input (naming file and line).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ringfence.atomic import write_atomic

if TYPE_CHECKING:  # the inventory models pull in pydantic and the policy: imported when a verb runs
    from ringfence.inventory.interface import Host, Skeleton, Workload


def _read(path: str) -> str:
    from ringfence.inventory.interface import InventoryError

    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise InventoryError(path, f"cannot read: {exc.strerror or exc}") from exc
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InventoryError(f"{path}@{exc.start}", "not UTF-8 text") from exc


def _slurm(args: argparse.Namespace) -> tuple[list[Host], list[Workload]]:
    from ringfence.inventory.interface import InventoryError
    from ringfence.inventory.slurm import (
        parse_scontrol_nodes,
        parse_scontrol_partitions,
        parse_sinfo_json,
        parse_squeue_json,
        with_partitions,
    )

    if not args.scontrol and not args.sinfo:
        raise InventoryError("from-slurm", "give --scontrol (scontrol show nodes) and/or --sinfo (sinfo --json)")
    hosts: dict[str, Host] = {}
    # sinfo first, then scontrol: scontrol's NodeAddr is the more precise fact and replaces sinfo's
    for path, parse in ((args.sinfo, parse_sinfo_json), (args.scontrol, parse_scontrol_nodes)):
        if path:
            hosts.update((h.name, h) for h in parse(_read(path), path))
    found = list(hosts.values())
    if args.partitions:
        found = with_partitions(found, parse_scontrol_partitions(_read(args.partitions), args.partitions))
    jobs = parse_squeue_json(_read(args.squeue), args.squeue, args.cluster) if args.squeue else []
    return found, jobs


def _k8s(args: argparse.Namespace) -> tuple[list[Host], list[Workload]]:
    from ringfence.inventory.k8s import K8sOptions, parse_kubectl

    opt = K8sOptions(
        trust_domain=args.trust_domain,
        node_zone_label=args.node_zone_label,
        zone_label=args.zone_label,
        job_label=args.job_label,
    )
    return parse_kubectl([(_read(p), p) for p in args.files], opt)


def _hosts(args: argparse.Namespace) -> tuple[list[Host], list[Workload]]:
    from ringfence.inventory.hosts import parse_hosts_file

    return parse_hosts_file(_read(args.file), args.file), []


def _runner(gather: Callable[[argparse.Namespace], tuple[list[Host], list[Workload]]]) -> Callable[..., int]:
    def run(args: argparse.Namespace) -> int:
        from ringfence.inventory.interface import build_skeleton, parse_etc_hosts

        hosts, jobs = gather(args)
        resolve = parse_etc_hosts(_read(args.etc_hosts), args.etc_hosts) if args.etc_hosts else None
        skeleton = build_skeleton(args.cluster, hosts, jobs, resolve, source=f"<inventory {args.inventory_verb}>")
        _write(skeleton, args)
        return 0

    return run


def _write(skeleton: Skeleton, args: argparse.Namespace) -> None:
    header = [
        f"Policy skeleton from `ringfence inventory {args.inventory_verb}`: zones, nodes, addresses, workloads.",
        "No flow is approved: run `ringfence discover CAPTURES --inventory THIS-FILE` to propose them.",
    ]
    text = skeleton.render(header)
    if args.output:
        write_atomic(Path(args.output), text.encode())
    else:
        sys.stdout.write(text)
    p = skeleton.policy
    print(f"{len(p.nodes)} nodes in {len(p.zones)} zones, {len(p.jobs)} jobs", file=sys.stderr)
    for u in skeleton.unresolved:
        print(f"warning: not included: {u}", file=sys.stderr)
    if args.output:
        print(f"wrote {args.output}", file=sys.stderr)


def _common(p: Any) -> None:
    p.add_argument("--cluster", default="cluster", help="the cluster name in the skeleton (default: cluster)")
    p.add_argument("--etc-hosts", metavar="FILE",
                   help="/etc/hosts-format file resolving host names to addresses (no DNS is queried)")
    p.add_argument("-o", "--output", metavar="FILE", help="write the skeleton here (default: stdout)")


def register(sub: Any) -> None:
    """Add the ``inventory`` verb and its three sources."""
    p = sub.add_parser("inventory", help="a policy skeleton from Slurm, Kubernetes or an Ansible hosts file")
    verbs = p.add_subparsers(dest="inventory_verb", metavar="SOURCE", required=True)
    s = verbs.add_parser("from-slurm", help="scontrol show nodes / sinfo --json (+ partitions, squeue --json)")
    s.add_argument("--scontrol", metavar="FILE", help="output of `scontrol show nodes` (or --oneliner)")
    s.add_argument("--sinfo", metavar="FILE", help="output of `sinfo --json`")
    s.add_argument("--partitions", metavar="FILE", help="output of `scontrol show partitions`: zones by partition")
    s.add_argument("--squeue", metavar="FILE", help="output of `squeue --json`: running jobs become workloads")
    _common(s)
    s.set_defaults(func=_runner(_slurm))
    k = verbs.add_parser("from-k8s", help="kubectl get nodes,pods,namespaces,serviceaccounts -o json")
    k.add_argument("files", nargs="+", metavar="FILE", help="kubectl JSON output (a List, PodList or NodeList)")
    k.add_argument("--trust-domain", default="cluster.local", help="SPIFFE trust domain of service-account identities")
    k.add_argument("--zone-label", metavar="LABEL", help="namespace label naming its pods' zone (default: namespace)")
    k.add_argument("--node-zone-label", default="topology.kubernetes.io/zone", metavar="LABEL",
                   help="node label naming a node's zone")
    k.add_argument("--job-label", default="training.kubeflow.org/job-name", metavar="LABEL",
                   help="pod label whose value names a training job")
    _common(k)
    k.set_defaults(func=_runner(_k8s))
    h = verbs.add_parser("from-hosts", help="an Ansible-style inventory (INI or YAML)")
    h.add_argument("file", metavar="FILE", help="the inventory file")
    _common(h)
    h.set_defaults(func=_runner(_hosts))


__all__ = ["register"]
