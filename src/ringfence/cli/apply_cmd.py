"""``ringfence apply POLICY --target lab [--audit] [--name LAB]`` and ``ringfence apply --rollback``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ringfence.errors import InputError


def _apply(args: argparse.Namespace) -> int:
    from ringfence.change.decide import Refused
    from ringfence.change.live import record_live
    from ringfence.cli._apply_gate import change_gate
    from ringfence.cli._targets import fabric_ports_for, points_for
    from ringfence.enforce.apply import apply_policy, rollback
    from ringfence.evidence import EvidenceStore
    from ringfence.evidence.store import default_store_path
    from ringfence.policy import load_policy

    if not args.rollback and not args.policy:
        raise InputError("apply", "give a POLICY file, or --rollback")
    target, points, inventory = points_for(args)
    store = EvidenceStore.open(Path(args.evidence) if args.evidence else default_store_path())
    if args.rollback:
        version = rollback(points, store, target=target)
    else:
        policy = load_policy(args.policy)
        try:
            change = change_gate(args, policy, store)
        except Refused as exc:
            print(exc.diagnostics(), file=sys.stderr)
            return 1
        approved_by = change.get("approved_by", args.approved_by) if change else args.approved_by
        version = apply_policy(policy, points, store, target=target, audit=args.audit, inventory=inventory,
                               approved_by=approved_by, ticket=(change or {}).get("ticket", args.ticket),
                               change=change, fabric_ports=fabric_ports_for(args))
    live = record_live(store, points, version)  # the live ruleset's hash: drift's baseline
    print(f"{target}: {'rolled back to' if args.rollback else 'applied'} version {version.version[:16]} "
          f"(evidence {version.evidence}, live ruleset {live})", file=sys.stderr)
    sys.stdout.write(json.dumps({"target": target, "version": version.version, "previous": version.previous,
                                 "evidence": version.evidence, "scopes": list(version.scopes),
                                 "audit": version.audit, "live": live}, indent=2) + "\n")
    return 0


def register(sub: Any) -> None:
    """Add the ``apply`` verb."""
    p = sub.add_parser("apply", help="apply a policy's rulesets atomically to a target (or roll back)")
    p.add_argument("policy", nargs="?", help="policy file (YAML)")
    p.add_argument("--target", default="lab", choices=("lab", "ssh"), help="where to apply (default: lab)")
    p.add_argument("--name", help="the lab (optional when only one exists)")
    p.add_argument("--hosts", help="--target ssh: the hosts inventory (YAML, e.g. from `ringfence lab hosts`)")
    p.add_argument("--audit", action="store_true", help="staged: count and log would-be drops, accept them")
    p.add_argument("--rollback", action="store_true", help="restore the version applied before the current one")
    p.add_argument("--approved-by", help="who approved this change (recorded; change control fails changes without)")
    p.add_argument("--ticket", help="the change ticket (recorded with the version)")
    p.add_argument("--request", help="the approved change request to deploy (ringfence change propose/approve); "
                   "required when the policy's change_control.required is set")
    p.add_argument("--emergency", action="store_true", help="deploy without prior approval (needs --by and "
                   "--ticket); a finding until reviewed with `ringfence change review`")
    p.add_argument("--by", help="who deploys (recorded; an emergency change is reviewed by someone else)")
    p.add_argument("--evidence", help="evidence store directory (default $RINGFENCE_EVIDENCE or .ringfence/evidence)")
    p.set_defaults(func=_apply)
