"""``ringfence change propose|approve|review|rollback|pubkey``: change control from request to rollback.

Exit codes: 0 done; 1 refused by change control (separation of duties, a request edited after it was
proposed or approved, no earlier approved version); 2 a usage or input error (a malformed request
file names the file and the field).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ringfence.cli._targets import add_target_arguments


def _store(args: argparse.Namespace) -> Any:
    from ringfence.evidence import EvidenceStore
    from ringfence.evidence.store import default_store_path

    return EvidenceStore.open(Path(args.evidence) if args.evidence else default_store_path())


def _signer(args: argparse.Namespace) -> Any:
    from ringfence.change.approval import default_approver_key
    from ringfence.evidence.checkpoint import load_signer

    return load_signer(Path(args.key) if args.key else default_approver_key())


def _propose(args: argparse.Namespace) -> int:
    from ringfence.atomic import write_atomic
    from ringfence.change.request import propose, request_bytes

    doc = propose(Path(args.policy), by=args.by, ticket=args.ticket, store=_store(args))
    write_atomic(Path(args.output), request_bytes(doc))
    req = doc.request
    print(f"change {doc.request_sha256[:16]}: {req.policy_path}@{req.commit[:12]} requested by {req.requested_by} "
          f"({req.ticket}); policy diff {len(req.policy_diff.splitlines())} lines, rulesets diff "
          f"{len(req.ruleset_diff.splitlines())} lines → {args.output}", file=sys.stderr)
    return 0


def _approve(args: argparse.Namespace) -> int:
    from ringfence.atomic import write_atomic
    from ringfence.change.decide import Refused, approve
    from ringfence.change.request import load_request, request_bytes

    doc = load_request(args.request)
    try:
        approved, ev = approve(doc, by=args.by, signer=_signer(args), store=_store(args))
    except Refused as exc:
        print(exc.diagnostics(), file=sys.stderr)
        return 1
    write_atomic(Path(args.request), request_bytes(approved))
    print(f"change {doc.request_sha256[:16]} approved by {args.by} (evidence {ev})", file=sys.stderr)
    return 0


def _review(args: argparse.Namespace) -> int:
    from ringfence.change.decide import Refused, review

    try:
        ev = review(_store(args), args.change, by=args.by, note=args.note or "")
    except Refused as exc:
        print(exc.diagnostics(), file=sys.stderr)
        return 1
    print(f"change {args.change} reviewed by {args.by} (evidence {ev})", file=sys.stderr)
    return 0


def _rollback(args: argparse.Namespace) -> int:
    from ringfence.change.live import record_live
    from ringfence.cli._targets import points_for
    from ringfence.enforce.apply import rollback
    from ringfence.enforce.interface import EnforceError

    target, points, _ = points_for(args)
    store = _store(args)
    try:
        version = rollback(points, store, target=target, approved_only=True, by=args.by)
    except EnforceError as exc:
        if "no earlier approved version" not in exc.message:
            raise
        print(exc.diagnostics(), file=sys.stderr)
        return 1
    live = record_live(store, points, version)
    print(f"{target}: rolled back to approved version {version.version[:16]} (evidence {version.evidence}, "
          f"live ruleset {live})", file=sys.stderr)
    sys.stdout.write(json.dumps({"target": target, "version": version.version, "previous": version.previous,
                                 "evidence": version.evidence, "live": live}, indent=2) + "\n")
    return 0


def _pubkey(args: argparse.Namespace) -> int:
    from ringfence.evidence.checkpoint import public_bytes

    sys.stdout.write(public_bytes(_signer(args).public_key).hex() + "\n")
    return 0


def register(sub: Any) -> None:
    """Add the ``change`` verb and its subcommands."""
    p = sub.add_parser("change", help="change control: propose, approve, review and roll back policy changes")
    verbs = p.add_subparsers(dest="change_verb", metavar="SUBCOMMAND", required=True)

    def common(q: argparse.ArgumentParser) -> None:
        q.add_argument("--evidence", help="evidence store directory (default $RINGFENCE_EVIDENCE or "
                       ".ringfence/evidence)")

    q = verbs.add_parser("propose", help="record a change request for the committed POLICY")
    q.add_argument("policy", help="the policy file, committed in its git repository")
    q.add_argument("--by", required=True, help="the requester's identity")
    q.add_argument("--ticket", required=True, help="the change ticket")
    q.add_argument("-o", "--output", required=True, help="the request file to write (JSON)")
    common(q)
    q.set_defaults(func=_propose)
    q = verbs.add_parser("approve", help="approve REQUEST (signed; refused for the requester)")
    q.add_argument("request", help="the request file (the approval is added to it)")
    q.add_argument("--by", required=True, help="the approver's identity")
    q.add_argument("--key", help="the approver's Ed25519 key (default $RINGFENCE_APPROVER_KEY or "
                   "~/.config/ringfence/approver-signing.key)")
    common(q)
    q.set_defaults(func=_approve)
    q = verbs.add_parser("review", help="record the after-the-fact review of a deployed (emergency) change")
    q.add_argument("change", help="the deployed change's evidence id (ringfence apply prints it)")
    q.add_argument("--by", required=True, help="the reviewer (not whoever deployed it)")
    q.add_argument("--note", help="what the review found")
    common(q)
    q.set_defaults(func=_review)
    q = verbs.add_parser("rollback", help="restore the previous approved version on a target")
    add_target_arguments(q)
    q.add_argument("--by", help="who rolls back (recorded)")
    common(q)
    q.set_defaults(func=_rollback)
    q = verbs.add_parser("pubkey", help="print an approver key's public half (for change_control.approvers)")
    q.add_argument("--key", help="the approver's key file (created when missing)")
    q.set_defaults(func=_pubkey)
