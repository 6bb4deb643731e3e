"""``ringfence discover CAPTURES... --inventory P [-o proposed.yaml] [--diff existing.yaml]``.

Proposes the least-path approved matrix for the observed flows (docs/discover.md). The proposal (a
complete policy file) goes to ``--output`` or, without ``--diff``, to stdout; its sidecar evidence
document next to ``--output`` (``<name>.evidence.json``) or to ``--evidence``. ``--diff`` prints
what the proposal adds to, removes from and changes in an existing policy. Flagged flows — never
approved — and notes go to stderr. Exit 0 when a proposal was made (flagged flows included: they
are for a human to decide, not a failure); 2 for bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ringfence.cli.engine_arg import add_engine_argument, engine_spec

if TYPE_CHECKING:
    from ringfence.analyze.discover import Proposal


def _port_range(text: str) -> tuple[int, int]:
    lo_s, _, hi_s = text.partition("-")
    if not (lo_s.strip().isdigit() and (hi_s.strip().isdigit() or not hi_s)):
        raise argparse.ArgumentTypeError(f"{text!r} is not a port range like 32768-60999")
    lo, hi = int(lo_s), int(hi_s or lo_s)
    if not 1 <= lo <= hi <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not inside 1-65535")
    return lo, hi


def _rendezvous(text: str) -> tuple[str, int]:
    job, sep, port = text.rpartition("=")
    if not sep or not job or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not JOB=PORT (e.g. train-a=29500)")
    return job, int(port)


def _report(proposal: Proposal, quiet: bool) -> None:
    err = sys.stderr
    if not quiet:
        print(f"proposed {len(proposal.rules)} approved entries from {proposal.flows} flows", file=err)
    if proposal.flagged:
        print(f"{len(proposal.flagged)} flagged, NOT approved (a human decides):", file=err)
        for f in proposal.flagged:
            print(f"  flagged: {f.describe()} — {f.evidence.flows} flow(s)", file=err)
    for note in proposal.notes:
        print(f"note: {note}", file=err)


def _run(args: argparse.Namespace) -> int:
    from ringfence.analyze.discover import (
        DEFAULT_EPHEMERAL,
        TORCH_MASTER_PORT,
        DiscoverOptions,
        diff_approved,
        discover,
        evidence_document,
        render_diff,
        render_yaml,
    )
    from ringfence.atomic import write_atomic
    from ringfence.cli.flow_inputs import read_flow_inputs
    from ringfence.policy import load_policy

    inventory = load_policy(args.inventory)
    existing = load_policy(args.diff) if args.diff else None
    options = DiscoverOptions(
        ephemeral=args.ephemeral_range or DEFAULT_EPHEMERAL,
        admin_zones=tuple(args.admin_zone) if args.admin_zone else None,
        rendezvous=tuple(args.rendezvous or ()),
        assume_rendezvous=None if args.no_assume_rendezvous else TORCH_MASTER_PORT,
    )
    flows = read_flow_inputs(args.captures, progress=not args.quiet)
    proposal = discover(flows, inventory, options, engine=engine_spec(args))
    header = [
        f"Proposed by `ringfence discover` from {proposal.flows} flows of: {', '.join(map(str, args.captures))}",
        f"Inventory: {args.inventory}. Review the flagged flows at the end of `approved:` before use.",
    ]
    text = render_yaml(proposal, header)
    out = Path(args.output) if args.output else None
    evidence = Path(args.evidence) if args.evidence else (out.with_suffix(".evidence.json") if out else None)
    if out is not None:
        write_atomic(out, text.encode())
    if evidence is not None:
        doc: dict[str, Any] = evidence_document(proposal, [str(c) for c in args.captures])
        write_atomic(evidence, (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode())
    _report(proposal, args.quiet)
    if existing is not None:
        diff = diff_approved(existing, proposal.policy)
        sys.stdout.write(render_diff(diff, existing, proposal.policy, names=(str(args.diff), str(out or "proposal"))))
    elif out is None:
        sys.stdout.write(text)
    if not args.quiet:
        for path in (out, evidence):
            if path is not None:
                print(f"wrote {path}", file=sys.stderr)
    return 0


def register(sub: Any) -> None:
    """Add the ``discover`` verb."""
    p = sub.add_parser("discover", help="propose the least-path approved matrix from observed flows")
    p.add_argument("captures", nargs="+", metavar="CAPTURE",
                   help="pcap/pcapng captures or flow logs (Zeek, Hubble, VPC, NetFlow); format detected by content")
    p.add_argument("--inventory", required=True, metavar="POLICY",
                   help="policy giving zones, nodes, jobs, services and classes (its approved: may be empty)")
    p.add_argument("-o", "--output", metavar="FILE", help="write the proposed policy here (default: stdout)")
    p.add_argument("--evidence", metavar="FILE",
                   help="write the evidence document here (default: next to --output, NAME.evidence.json)")
    p.add_argument("--diff", metavar="EXISTING",
                   help="print what the proposal adds/removes/changes against this policy (instead of the YAML)")
    p.add_argument("--ephemeral-range", type=_port_range, metavar="LO-HI",
                   help="the cluster's OS ephemeral port range, net.ipv4.ip_local_port_range "
                   "(default: Linux's default range)")
    p.add_argument("--admin-zone", action="append", metavar="ZONE",
                   help="a zone allowed to use administrative services (repeatable; default: the zone 'admin')")
    p.add_argument("--rendezvous", action="append", type=_rendezvous, metavar="JOB=PORT",
                   help="a job's rendezvous port when it was not captured (repeatable)")
    p.add_argument("--no-assume-rendezvous", action="store_true",
                   help="do not assume torch's default rendezvous port (MASTER_PORT) for a job whose "
                   "rendezvous was not observed")
    add_engine_argument(p)
    p.add_argument("-q", "--quiet", action="store_true", help="only flagged flows and notes on stderr")
    p.set_defaults(func=_run)


__all__ = ["register"]

