"""``ringfence assess POLICY --captures FILE... --output DIR``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from ringfence.assess import DEFAULT_FORMATS, assess
from ringfence.evidence.report import RENDERERS, exit_code
from ringfence.evidence.report.terminal import print_summary


def _run(args: argparse.Namespace) -> int:
    err = Console(stderr=True)
    output = Path(args.output)
    store = Path(args.store) if args.store else output / "evidence"

    def progress(msg: str) -> None:
        if not args.quiet:
            err.print(f"[dim]{msg}[/dim]")

    result = assess(
        Path(args.policy),
        [Path(p) for p in args.captures],
        store_dir=store,
        output=output,
        formats=args.format or list(DEFAULT_FORMATS),
        progress=progress,
    )
    print_summary(result.assessment, Console(file=sys.stdout))
    for path in result.reports:
        err.print(f"wrote {path}")
    return exit_code(result.assessment)


def register(sub: Any) -> None:
    """Add the ``assess`` verb."""
    p = sub.add_parser("assess", help="judge the ten control points from captures and flow logs")
    p.add_argument("policy", help="the policy file (ringfence.yaml)")
    p.add_argument("--captures", "--flows", nargs="+", required=True, metavar="FILE",
                   help="pcap/pcapng captures or flow logs (Zeek, Hubble, VPC, NetFlow); format detected by content")
    p.add_argument("-o", "--output", default="out", help="directory for the reports (default: out)")
    p.add_argument("--store", help="evidence store directory (default: OUTPUT/evidence)")
    p.add_argument("--format", action="append", choices=sorted(set(RENDERERS) - {"terminal"}),
                   help="report format to write (repeatable; default: json, html, junit)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=_run)
