"""``ringfence partition prove POLICY --target lab [-o partitions.json]``: each job's partition, proven both ways.

The policy is the one applied (``ringfence apply POLICY --target lab`` installs a partition for every job that
declares ``jobs[].partition``). Every partitioned job is probed at L2 (ARP) and L3 (TCP to its rendezvous port)
from one of its own ranks and from a rank of every other job, and its ranks' step counters are read around
the probes. The facts go into the evidence store and, with ``-o``, to a file for ``ringfence assess --partitions``.
Exit 0 when every partition is proven both ways, 1 when any is not, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from ringfence.errors import InputError


def _prove(args: argparse.Namespace) -> int:
    from ringfence.atomic import write_atomic
    from ringfence.controls import training_traffic
    from ringfence.controls.interface import Facts, Verdict
    from ringfence.enforce.partition_nft import partition_jobs
    from ringfence.enforce.partition_probe import prove_partitions, record_partitions
    from ringfence.evidence import EvidenceStore
    from ringfence.evidence.store import default_store_path
    from ringfence.lab import Lab
    from ringfence.lab.points import lab_fabric_ports, lab_partition_inputs
    from ringfence.policy import load_policy

    if args.target != "lab":
        raise InputError("--target", "partitions are proven on the lab's bridge fabric; on a real fabric the switch "
                         "holds them (PKEY/VLAN), judged from the wire by training_traffic")
    if args.timeout <= 0:
        raise InputError("--timeout", f"must be positive, not {args.timeout}")
    policy = load_policy(args.policy)
    if not any(j.partition is not None for j in policy.jobs):
        raise InputError(args.policy, "no job declares a partition (jobs[].partition): nothing to prove")
    lab = Lab.attach(args.name)
    jobs = partition_jobs(policy, lab_fabric_ports(lab))
    store = EvidenceStore.open(Path(args.evidence) if args.evidence else default_store_path())
    doc = record_partitions(store, prove_partitions(jobs, lab_partition_inputs(lab), target=f"lab:{lab.name}",
                                                    timeout=args.timeout))
    if args.output:
        write_atomic(args.output, json.dumps(doc, indent=2).encode() + b"\n")
    facts = Facts(partitions=doc, taken={"partitions": datetime.fromisoformat(doc["taken"])})
    findings = training_traffic.job_partitions(policy, facts)
    for f in findings:
        print(f"{f.verdict.value:7} {f.subject}: {f.message}", file=sys.stderr)
    return 0 if findings and all(f.verdict is Verdict.PASS for f in findings) else 1


def register(sub: Any) -> None:
    """Add the ``partition`` verb."""
    p = sub.add_parser("partition", help="prove each job's fabric partition both ways (lab)")
    verbs = p.add_subparsers(dest="partition_verb", required=True)
    s = verbs.add_parser("prove", help="probe every partitioned job at L2 and L3, from inside and outside it")
    s.add_argument("policy", help="the policy applied (its jobs[].partition)")
    s.add_argument("--target", default="lab", choices=("lab",), help="where (default: lab)")
    s.add_argument("--name", help="the lab (optional when only one exists)")
    s.add_argument("-o", "--output", help="write the partitions facts here (for `ringfence assess --partitions`)")
    s.add_argument("--timeout", type=float, default=1.5, help="seconds each probe waits for an answer")
    s.add_argument("--evidence", help="evidence store directory (default $RINGFENCE_EVIDENCE or .ringfence/evidence)")
    s.set_defaults(func=_prove)
