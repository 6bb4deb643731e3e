"""``ringfence contain (--node N | --job J | --identity I) [--release | --drill] --target lab|ssh``.

Snapshots the evidence, isolates the subject at its own ruleset and at the fabric, proves with probes
that it reaches nothing but the evidence collector and that the other jobs keep training; ``--drill``
then releases it and checks its approved paths work again; ``--release`` lifts a containment.
Exit 0 when every check held, 1 when one did not, 2 on bad input.

``--target ssh --hosts FILE --policy POLICY`` contains on a cluster's hosts over SSH: the points are
the hosts (the one named ``fabric`` is the fabric's), the snapshot a capture of every host, and the
other jobs' progress their ranks' progress files (``progress:`` in the hosts file).

``--identity SPIFFE-ID`` contains a workload identity where it is checked, not where it sits: its certificates
are revoked and reissued, the revocation list pushed to every TLS sidecar, and every gate proven to refuse
the old certificate from its holder's own address while the holder's job trains on
(:mod:`ringfence.enforce.revoke`). A revocation is permanent: ``--release`` (and ``--drill``) are refused for
an identity, exit 2 — the reissued certificate is the recovery.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from ringfence.errors import InputError


def _collectors(policy: Any, names: list[str]) -> tuple[str, ...]:
    out = []
    for name in names:
        node = policy.node(name)
        if node is not None:
            out += list(node.addresses)
            continue
        try:
            out.append(str(ipaddress.ip_address(name)))
        except ValueError:
            raise InputError("--collector", f"{name!r} is neither a node of the policy nor an address") from None
    return tuple(out)


def _contain(args: argparse.Namespace) -> int:
    from ringfence.enforce.contain import contain, control_addresses, release, resolve_subject
    from ringfence.evidence import EvidenceStore
    from ringfence.evidence.store import default_store_path
    from ringfence.lab import Lab
    from ringfence.lab.points import lab_points
    from ringfence.policy import load_policy, parse_policy
    from ringfence.targets.cluster import steps_of

    if args.release and args.drill:
        raise InputError("contain", "--release and --drill exclude each other")
    if args.identity and (args.release or args.drill):
        from ringfence.enforce.revoke import PERMANENT

        flag = "--release" if args.release else "--drill"
        raise InputError(flag, f"{flag} is not possible for an identity: {PERMANENT}",
                         hint="rehearse it with `ringfence drill run credential-compromise --target lab`")
    cluster: Any
    if args.target == "lab":
        lab = Lab.attach(args.name)
        policy = load_policy(args.policy) if args.policy else parse_policy(lab.policy_yaml(), f"lab {lab.name}")
        points = lab_points(lab)
        target = f"lab:{lab.name}"
        cluster = lab
    elif args.target == "ssh":
        from ringfence.cli._targets import site_for
        from ringfence.targets.cluster import SiteCluster

        if not args.policy:
            raise InputError("--policy", "--target ssh needs the cluster's policy file")
        site, policy = site_for(argparse.Namespace(target="ssh", hosts=args.hosts, target_policy=args.policy,
                                                   name=None))
        points = {n: site.executor(n) for n in sorted(site.hosts)}
        target = f"ssh:{site.name}"
        cluster = SiteCluster(site, policy)
    else:
        raise InputError("--target", f"unknown target {args.target!r}", hint="lab, or ssh with --hosts")
    store = EvidenceStore.open(Path(args.store) if args.store else default_store_path())
    if args.identity:
        return _revoke(args, cluster, policy, store, target)
    subject = resolve_subject(policy, node=args.node, job=args.job, identity=args.identity)
    if args.release:
        ev = release(subject, points, store, target=target)
        print(f"contain: released {subject.describe()} (evidence {ev})", file=sys.stderr)
        return 0
    collectors = _collectors(policy, args.collector or (["mgmt"] if policy.node("mgmt") else []))
    keep: list[str] = []
    if args.target == "ssh":
        # ringfence acts on the contained node through SSH from this control host: isolating it from the
        # control host too would cut the containment off half-way, so its address stays reachable — kept,
        # not a collector: the policy approves no path to it that a probe could show
        keep = [a for a in control_addresses(points, subject.nodes) if a not in collectors]
        print(f"contain: the control host {', '.join(keep) or '(a collector)'} stays reachable "
              "(it drives the containment)", file=sys.stderr)

    def steps() -> dict[str, int]:
        return steps_of(cluster.agent_status())

    with tempfile.TemporaryDirectory(prefix="ringfence-contain-") as work:
        report = contain(policy, subject, points, store, target=target, collectors=collectors, workdir=Path(work),
                         capture=lambda s, p: cluster.capture(s, p).path, steps=steps, snapshot_seconds=args.seconds,
                         drill=args.drill, progress=lambda m: print(f"contain: {m}", file=sys.stderr),
                         approved_by=args.approved_by, ticket=args.ticket, keep=keep)
    _emit(report, args)
    print(f"contain: {subject.describe()}: isolated={report.isolated} collector={report.collector_reachable} "
          f"points={dict(report.points)} others_training={report.training.get('others_training')} "
          f"released={report.released_evidence is not None}", file=sys.stderr)
    return 0 if report.ok else 1


def _emit(report: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Write the report (``-o`` or stdout) and its notes (stderr); its JSON form."""
    from ringfence.enforce.facts import write_json

    doc: dict[str, Any] = report.to_json()
    if args.output:
        write_json(args.output, doc)
    else:
        sys.stdout.write(json.dumps(doc, indent=1) + "\n")
    for note in report.notes:
        print(f"contain: note: {note}", file=sys.stderr)
    return doc


def _revoke(args: argparse.Namespace, cluster: Any, policy: Any, store: Any, target: str) -> int:
    """``--identity``: revoke, reissue, publish, prove (:func:`ringfence.enforce.revoke.contain_identity_on`)."""
    from ringfence.enforce.revoke import contain_identity_on

    report = contain_identity_on(cluster.site(), policy, args.identity, store, target=target,
                                 status=cluster.agent_status, timeout=args.timeout,
                                 progress=lambda m: print(f"contain: {m}", file=sys.stderr),
                                 approved_by=args.approved_by, ticket=args.ticket)
    doc = _emit(report, args)
    rev = doc["revocation"]
    print(f"contain: identity {args.identity}: {rev['verdict']} (revoked {len(rev['certificates'])} certificate(s), "
          f"refused by {sum(1 for r in rev['refusals'] if r['proven'])}/{len(rev['gates'])} gate(s), latency "
          f"{rev['latency_s']}s) — {rev['why']}", file=sys.stderr)
    return 0 if report.ok else 1


def register(sub: Any) -> None:
    """Add the ``contain`` verb."""
    p = sub.add_parser("contain", help="isolate a node, job or identity (snapshot, two points, proof), or release it")
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--node", help="contain this node")
    who.add_argument("--job", help="contain every rank of this job")
    who.add_argument("--identity", metavar="SPIFFE-ID",
                     help="revoke this workload identity's certificate(s), reissue them, prove every TLS gate "
                     "refuses the old one (no node is isolated; permanent: no --release)")
    p.add_argument("--release", action="store_true", help="lift the containment of the subject (recorded)")
    p.add_argument("--drill", action="store_true", help="contain, prove, then release and check it again")
    p.add_argument("--policy", help="policy file (default: the lab's own policy)")
    p.add_argument("--collector", action="append", metavar="NODE|ADDR",
                   help="evidence collector the subject may still reach (repeatable; default: mgmt)")
    p.add_argument("--approved-by", help="who authorised the containment (recorded with the action)")
    p.add_argument("--ticket", help="incident or change ticket (recorded with the action)")
    p.add_argument("--seconds", type=float, default=4.0, help="length of the capture in the snapshot")
    p.add_argument("--timeout", type=float, default=20.0,
                   help="--identity: seconds each gate, and the recovery, may take to show it (default 20)")
    p.add_argument("--target", default="lab", choices=("lab", "ssh"), help="where to contain (default: lab)")
    p.add_argument("--hosts", help="--target ssh: the hosts inventory (YAML, e.g. from `ringfence lab hosts`)")
    p.add_argument("--name", help="the lab (optional when only one exists)")
    p.add_argument("-o", "--output", help="write the containment facts (JSON) here")
    p.add_argument("--store", "--evidence", dest="store",
                   help="evidence store directory (default $RINGFENCE_EVIDENCE or .ringfence/evidence)")
    p.set_defaults(func=_contain)
