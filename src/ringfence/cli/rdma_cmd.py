"""``ringfence rdma FILE... [--format table|json] [-o OUT]``: RDMA key hygiene (ReDMArk) from captures.

Exit codes: 1 when any capture shows a finding; 0 when none does and RDMA traffic was seen; 3 when no capture
held RDMA traffic (nothing is proven by its absence); 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from ringfence.rdma import RdmaSummary

#: Exit code when no RDMA traffic was seen: not a pass.
EXIT_UNPROVEN: Final = 3


def _json(summaries: list[RdmaSummary]) -> bytes:
    doc = {"captures": [s.model_dump(mode="json") for s in summaries],
           "findings": sum(len(s.findings) for s in summaries)}  # fmt: skip
    return (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode()


def _table(summaries: list[RdmaSummary]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(file=sys.stdout, width=200)
    for s in summaries:
        t = Table(title=f"{s.source}: {s.packets} RDMA packets, {s.connections} connections, {s.keys} rkeys, "
                  f"{len(s.findings)} finding(s)")  # fmt: skip
        for col in ("id", "name", "src", "dst", "pattern"):
            t.add_column(col)
        for f in s.findings:
            t.add_row(f.id.value, f.name, f.src, f.dst, f.pattern)
        console.print(t)
    for s in summaries:
        for w in s.warnings:
            print(f"warning: {w}", file=sys.stderr)


def _run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ringfence.rdma import check_captures

    summaries = check_captures([Path(f) for f in args.files])
    if args.format == "json":
        data = _json(summaries)
        if args.output:
            from ringfence.atomic import write_atomic

            write_atomic(args.output, data)
        else:
            sys.stdout.buffer.write(data)
            sys.stdout.flush()
    else:
        _table(summaries)
    if any(s.findings for s in summaries):
        return 1
    if not any(s.connections for s in summaries):
        print("no RDMA traffic (RoCEv2 or InfiniBand BTH) in the capture(s): nothing is proven", file=sys.stderr)
        return EXIT_UNPROVEN
    return 0


def register(sub: Any) -> None:
    """Add the ``rdma`` verb."""
    p = sub.add_parser("rdma", help="RDMA key hygiene from captures: ReDMArk's predictable keys, QPNs, PSNs")
    p.add_argument("files", nargs="+", metavar="FILE", help="pcap or pcapng captures (RoCEv2, InfiniBand, ERF)")
    p.add_argument("--format", choices=("table", "json"), default="table", help="output format")
    p.add_argument("-o", "--output", help="write the JSON to this file instead of stdout")
    p.set_defaults(func=_run)


__all__ = ["EXIT_UNPROVEN", "register"]
