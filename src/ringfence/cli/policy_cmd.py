"""``ringfence policy schema|check``."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from typing import Any


def _schema(args: argparse.Namespace) -> int:
    from ringfence.policy import policy_schema

    text = policy_schema()
    if args.output:
        from ringfence.atomic import write_atomic

        write_atomic(args.output, text.encode() + b"\n")
    else:
        sys.stdout.write(text + "\n")
    return 0


def _check(args: argparse.Namespace) -> int:
    from ringfence.policy import load_policy

    policy = load_policy(args.policy)
    # An expired exception exempts nothing any more: say so, and do not call the policy clean.
    expired = policy.expired_exceptions(datetime.now(UTC).date())
    for exc in expired:
        print(
            f"{args.policy}: exception {exc.id} ({exc.control}, {exc.subject}) expired on {exc.expires.isoformat()}; "
            f"owner {exc.owner} must renew or remove it",
            file=sys.stderr,
        )
    print(
        f"{args.policy}: ok — {len(policy.zones)} zones, {len(policy.nodes)} nodes, {len(policy.jobs)} jobs, "
        f"{len(policy.services)} services, {len(policy.approved)} approved flows, "
        f"{len(policy.exceptions)} exceptions" + (f" ({len(expired)} expired)" if expired else "")
    )
    return 1 if expired else 0


def register(sub: Any) -> None:
    """Add the ``policy`` verb."""
    p = sub.add_parser("policy", help="policy file tools: JSON Schema, validation")
    psub = p.add_subparsers(dest="policy_cmd", required=True, metavar="CMD")
    s = psub.add_parser("schema", help="print the policy JSON Schema")
    s.add_argument("-o", "--output", help="write to this file instead of stdout")
    s.set_defaults(func=_schema)
    c = psub.add_parser("check", help="validate a policy file")
    c.add_argument("policy")
    c.set_defaults(func=_check)
