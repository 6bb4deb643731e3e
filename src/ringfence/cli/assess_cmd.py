"""``ringfence assess POLICY --captures FILE... --output DIR``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from ringfence.assess import DEFAULT_FORMATS, assess
from ringfence.cli.engine_arg import add_engine_argument  # --engine (issue 12)
from ringfence.controls.interface import Facts
from ringfence.errors import InputError
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
        facts=_gathered_facts(args),
        engine=args.engine,
    )
    print_summary(result.assessment, Console(file=sys.stdout))
    for path in result.reports:
        err.print(f"wrote {path}")
    return exit_code(result.assessment)


def load_key_facts(path: str) -> dict[str, Any]:
    """Key-management facts (`ringfence verify keys -o FILE`): one JSON object, as the controls read it."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(path, f"cannot read key facts: {exc.strerror or exc}") from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(path, f"key facts are not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise InputError(path, "key facts must be one JSON object")
    keys = doc.get("keys", doc)
    if not isinstance(keys, dict):
        raise InputError(path, "key facts: 'keys' must be an object")
    return keys


def _gathered_facts(args: argparse.Namespace) -> Facts:
    """Facts gathered by other verbs (probe, apply, contain, verify) and passed in as files."""
    from ringfence.enforce.facts import (
        load_change_facts,
        load_containment_facts,
        load_probe_facts,
        load_ruleset_facts,
    )

    probes = tuple(p for path in args.probes for p in load_probe_facts(path)) if args.probes else None
    return Facts(
        probes=probes,
        ruleset=load_ruleset_facts(args.ruleset) if args.ruleset else None,
        changes=load_change_facts(args.changes) if args.changes else None,
        containment=load_containment_facts(*args.containment) if args.containment else None,
        keys=load_key_facts(args.keys) if args.keys else None,
    )


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
    p.add_argument("--probes", action="append", metavar="FILE", help="probe results from `ringfence probe -o`")
    p.add_argument("--ruleset", metavar="FILE", help="live ruleset facts from `ringfence probe --ruleset`")
    p.add_argument("--changes", metavar="FILE", help="applied-version history from `ringfence probe --changes`")
    p.add_argument("--containment", nargs="+", metavar="FILE", help="containment reports from `ringfence contain -o`")
    p.add_argument("--keys", metavar="FILE", help="key-management results from `ringfence verify keys -o`")
    add_engine_argument(p)  # --engine duckdb|spark[=URL] (issue 12)
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=_run)
