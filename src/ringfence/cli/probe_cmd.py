"""``ringfence probe POLICY --target lab [-o probes.json] [--plan auto|pairs|classes] [--sample N] [--ruleset FILE] …``.

Proves both sides of a policy on a running target: every approved flow connects (and answers), every
denied path between zones is dropped *by policy* (its own drop counter moved, on a port that listens).
At fleet scale (``--plan classes``, or ``auto`` from 200 nodes) one sampled probe class per (source zone or
job, destination class, verdict) replaces all pairs; the sample size per class is printed and recorded.
Exit 0 when every expected behaviour was shown, 1 when any was not, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ringfence.errors import InputError


def _probe(args: argparse.Namespace) -> int:
    from ringfence.cli._targets import points_for
    from ringfence.enforce.apply import FABRIC
    from ringfence.enforce.facts import (
        change_facts,
        changes_document,
        probes_document,
        ruleset_facts,
        write_json,
    )
    from ringfence.enforce.probe_matrix import behaviour_failed, probe_policy
    from ringfence.evidence import EvidenceStore
    from ringfence.evidence.store import default_store_path
    from ringfence.policy import load_policy

    if args.timeout <= 0:
        raise InputError("--timeout", f"must be positive, not {args.timeout}")
    if args.sample is not None and args.sample < 1:
        raise InputError("--sample", f"must be at least 1, not {args.sample}")
    mode = args.plan or ("classes" if args.sample is not None else "auto")
    if args.sample is not None and mode == "pairs":
        raise InputError("--sample", "samples probe classes; it does not go with --plan pairs")
    if args.via_ssh and args.target != "lab":
        raise InputError("--via-ssh", "is for the lab; with --target ssh every node is reached over SSH already")
    policy = load_policy(args.policy)
    target, points, _ = points_for(args, precheck=False)  # an unreachable host's probes: unknown
    if args.via_ssh:
        from ringfence.lab import Lab

        lab = Lab.attach(args.name)
        for node in args.via_ssh:
            if node not in points or node == FABRIC:
                raise InputError("--via-ssh", f"no node {node!r} in lab {lab.name}")
            points[node] = lab.ssh_executor(target=node)  # a real OpenSSH session from jump, as on a cluster
    store = EvidenceStore.open(Path(args.store) if args.store else default_store_path())

    def say(msg: str) -> None:
        print(f"probe: {msg}", file=sys.stderr)

    run = probe_policy(policy, points, store, target=target, timeout=args.timeout, progress=say, mode=mode,
                       sample=args.sample)
    doc = probes_document(run.results, target=target, evidence=run.evidence)
    if args.output:
        write_json(args.output, doc)
    else:
        sys.stdout.write(json.dumps(doc, indent=1) + "\n")
    if args.ruleset:
        write_json(args.ruleset, ruleset_facts(policy, points, target=target, store=store))
    if args.changes:
        write_json(args.changes, changes_document(change_facts(store, target), target=target))
    allows = sum(1 for r in run.results if r.expected == "allow")
    failed = [r for r in run.results if behaviour_failed(r)]
    print(f"probe: {len(run.results)} probes ({allows} permitted, {len(run.results) - allows} denied) in "
          f"{run.seconds:.1f}s; {len(failed)} not as expected; evidence {run.evidence}", file=sys.stderr)
    for r in failed:
        print(f"  FAIL {r.expected} {r.source} → {r.destination}: {r.outcome}; {r.detail}", file=sys.stderr)
    for why in run.plan.skipped:
        print(f"  not probed: {why}", file=sys.stderr)
    return 1 if failed else 0


def register(sub: Any) -> None:
    """Add the ``probe`` verb."""
    p = sub.add_parser("probe", help="prove a policy on a target: permitted paths connect, denied ones are dropped")
    p.add_argument("policy", help="policy file (YAML)")
    p.add_argument("--target", default="lab", choices=("lab", "ssh"), help="where to probe (default: lab)")
    p.add_argument("--name", help="the lab (optional when only one exists)")
    p.add_argument("--hosts", help="--target ssh: the hosts inventory (YAML, e.g. from `ringfence lab hosts`)")
    p.add_argument("-o", "--output", help="write the probe results (JSON facts for `assess --probes`) here")
    p.add_argument("--ruleset", help="also write the live-ruleset facts (JSON) here")
    p.add_argument("--changes", help="also write the applied-version history (JSON) here")
    p.add_argument("--via-ssh", action="append", metavar="NODE",
                   help="run NODE's probes and rule reads over OpenSSH from the jump host (repeatable)")
    p.add_argument("--timeout", type=float, default=1.5, help="seconds before a probe counts as timed out")
    p.add_argument("--plan", choices=("auto", "pairs", "classes"), default=None,
                   help="pairs: every approved flow, zone pair x sensitive port and job x other job's collective; "
                        "classes: each (source zone or job, destination class, verdict) once, sampled; "
                        "auto (default): pairs below 200 nodes, classes from 200 on")
    p.add_argument("--sample", type=int, metavar="N",
                   help="probes per class with the class plan (default 2; implies --plan classes)")
    p.add_argument("--store", "--evidence", dest="store",
                   help="evidence store directory (default $RINGFENCE_EVIDENCE or .ringfence/evidence)")
    p.set_defaults(func=_probe)
