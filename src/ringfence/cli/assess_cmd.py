"""``ringfence assess POLICY --captures FILE... --output DIR [--probes F …] [--allow-unknown]``.

Exit codes: 0 only when every control is pass or exempt; 1 when any fails; 3 when none fails but some
are not proven (``--allow-unknown`` accepts them — and says so loudly); 2 on bad input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ringfence.cli._lazy import OneOf
from ringfence.cli.engine_arg import add_engine_argument, engine_spec  # --engine (issue 12)
from ringfence.errors import InputError

# The assessment (DuckDB, pyarrow, the controls) is imported inside _run, never while the parser is
# built: `ringfence --version` and `ringfence assess --help` must start in a fraction of a second.

#: CLI option (dest) → Facts field, for the facts files other verbs write.
FACT_OPTIONS = {"probes": "probes", "ruleset": "ruleset", "changes": "changes", "containment": "containment",
                "keys": "keys", "bench": "bench", "attestation": "attestation", "traces": "traces",
                "drills": "drills", "gateway_logs": "gateway", "partitions": "partitions"}


def _paths(args: argparse.Namespace, dest: str) -> list[str]:
    value = getattr(args, dest)
    return [] if value is None else [value] if isinstance(value, str) else list(value)


def _run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from ringfence.assess import DEFAULT_FORMATS, FactsInput, assess, assess_from_store
    from ringfence.evidence.report import exit_code
    from ringfence.evidence.report.terminal import print_summary

    err = Console(stderr=True)
    output = Path(args.output)
    store = Path(args.store) if args.store else output / "evidence"

    def progress(msg: str) -> None:
        if not args.quiet:
            err.print(f"[dim]{msg}[/dim]")

    files = tuple(FactsInput(field, Path(p)) for dest, field in FACT_OPTIONS.items() for p in _paths(args, dest))
    formats = args.format or list(DEFAULT_FORMATS)
    if args.evidence:
        if args.captures or files or args.jobs:
            raise InputError("--evidence",
                             "judges from the store alone: give no --captures, --jobs or facts files with it")
        result = assess_from_store(Path(args.policy), Path(args.evidence), output=output, formats=formats,
                                   progress=progress)
    elif not args.captures:
        raise InputError("--captures", "give the captures or flow logs to judge (or --evidence STORE)")
    else:
        jobs: tuple[Any, ...] = ()
        if args.jobs:
            from ringfence.jobs import load_jobs

            jobs = load_jobs([Path(p) for p in args.jobs]).spans()
        result = assess(Path(args.policy), [Path(p) for p in args.captures], store_dir=store, output=output,
                        formats=formats, progress=progress, fact_files=files, engine=engine_spec(args), jobs=jobs)
    print_summary(result.assessment, Console(file=sys.stdout))
    for path in result.reports:
        err.print(f"wrote {path}")
    code = exit_code(result.assessment, allow_unknown=args.allow_unknown)
    unproven = result.assessment.summary.controls.unknown
    if args.allow_unknown and unproven and code == 0:
        err.print(f"[bold red]WARNING: --allow-unknown: {unproven} control(s) NOT PROVEN were accepted; "
                  "this run proves less than it exits with[/bold red]")
    return code


def register(sub: Any) -> None:
    """Add the ``assess`` verb."""
    p = sub.add_parser("assess", help="judge the ten control points from captures, flow logs and gathered facts")
    p.add_argument("policy", help="the policy file (ringfence.yaml)")
    p.add_argument("--captures", "--flows", nargs="+", metavar="FILE",
                   help="pcap/pcapng captures or flow logs (Zeek, Hubble, VPC, NetFlow); format detected by content")
    p.add_argument("-o", "--output", default="out", help="directory for the reports (default: out)")
    p.add_argument("--store", help="evidence store directory (default: OUTPUT/evidence)")
    p.add_argument("--evidence", metavar="STORE",
                   help="judge again from this store's last recorded assessment (its flows, facts and clock)")
    p.add_argument("--format", action="append", metavar="FORMAT",
                   type=OneOf("ringfence.evidence.report", "RENDERERS", exclude=frozenset({"terminal"})),
                   help="report format to write (repeatable; default: json, html, junit; a wrong one lists them)")
    p.add_argument("--probes", action="append", metavar="FILE", help="probe results from `ringfence probe -o`")
    p.add_argument("--ruleset", metavar="FILE", help="live ruleset facts from `ringfence probe --ruleset`")
    p.add_argument("--trace", dest="traces", metavar="FILE", action="append",
                   help="a reconstructed flow from `ringfence trace` (repeat: the allowed and the denied sample)")
    p.add_argument("--changes", metavar="FILE", help="applied-version history from `ringfence probe --changes`")
    p.add_argument("--containment", nargs="+", metavar="FILE", help="containment reports from `ringfence contain -o`")
    p.add_argument("--drill", dest="drills", action="append", metavar="FILE",
                   help="an incident drill report from `ringfence drill run SCENARIO -o` (repeat: one per scenario)")
    p.add_argument("--gateway-log", dest="gateway_logs", action="append", metavar="FILE",
                   help="the egress gateway's access log (tinyproxy), when the policy routes egress through one")
    p.add_argument("--keys", metavar="FILE", help="key-management results from `ringfence verify keys -o`")
    p.add_argument("--partitions", metavar="FILE",
                   help="job partitions probed both ways on the fabric, from `ringfence partition prove -o`")
    p.add_argument("--attestation", metavar="FILE",
                   help="node attestation verdicts and fabric probes from `ringfence attest verify --probe -o`")
    p.add_argument("--bench", action="append", metavar="FILE",
                   help="a budget-gate result from `ringfence bench compare --json -o` (repeatable: one per layer)")
    p.add_argument("--jobs", nargs="+", metavar="FILE",
                   help="scheduler records (squeue/sacct --json, jobcomp/filetxt, kubectl get pods -o json): "
                        "flows are attributed to the job and user holding each node at the time")
    p.add_argument("--allow-unknown", action="store_true",
                   help="exit 0 even when controls are not proven (printed loudly; default: exit 3)")
    add_engine_argument(p)  # --engine duckdb|spark[=URL], --memory-limit, --spill-dir (issue 12)
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=_run)


__all__ = ["FACT_OPTIONS", "register"]
