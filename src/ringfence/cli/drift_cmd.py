"""``ringfence drift POLICY --target lab|ssh [--hosts FILE] -o FILE``: live rulesets against the approved version.

Exit 0 when every node matches, 1 on any live difference (each naming the node and the rule), 3 when
it cannot be told (nothing deployed through ringfence, no recorded baseline, a node unreachable).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def _drift(args: argparse.Namespace) -> int:
    from ringfence.change.drift import drift
    from ringfence.cli._targets import points_for
    from ringfence.enforce.facts import write_json
    from ringfence.evidence import EvidenceStore
    from ringfence.evidence.store import default_store_path
    from ringfence.policy import load_policy

    policy = load_policy(args.policy)
    target, points, _ = points_for(args, precheck=False)  # an unreachable host is reported, not fatal
    store = EvidenceStore.open(Path(args.evidence) if args.evidence else default_store_path())
    report = drift(policy, points, store, target=target)
    if args.output:
        write_json(args.output, report)
    else:
        sys.stdout.write(json.dumps(report, indent=1) + "\n")
    for f in report["findings"]:
        print(f"  {f['verdict'].upper()} {f['subject']}: {f['detail']}", file=sys.stderr)
    print(f"drift: {target}: {report['verdict']} ({len(report['nodes'])} nodes read)", file=sys.stderr)
    return {"pass": 0, "fail": 1}.get(str(report["verdict"]), 3)


def register(sub: Any) -> None:
    """Add the ``drift`` verb."""
    p = sub.add_parser("drift", help="compare every node's live ruleset with the approved, deployed version")
    p.add_argument("policy", help="the approved policy file (YAML)")
    p.add_argument("--target", default="lab", choices=("lab", "ssh"), help="where (default: lab)")
    p.add_argument("--name", help="the lab (optional when only one exists)")
    p.add_argument("--hosts", help="--target ssh: the hosts inventory (YAML, e.g. from `ringfence lab hosts`)")
    p.add_argument("-o", "--output", help="the drift report (JSON; default stdout)")
    p.add_argument("--evidence", help="evidence store directory (default $RINGFENCE_EVIDENCE or .ringfence/evidence)")
    p.set_defaults(func=_drift)
