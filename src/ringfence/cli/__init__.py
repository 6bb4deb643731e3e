"""``ringfence VERB``: thin argument parsing over library functions.

Data goes to stdout or ``--output``; progress and logs to stderr. Exit codes: 0 all pass/exempt,
1 a finding failed, 2 usage or input error (a :class:`RingfenceError`, printed without traceback).
Verbs are registered explicitly in :data:`VERBS`; each verb module has ``register(subparsers)``
which sets ``func`` (``(args) -> int``) on its parser.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from ringfence import __version__
from ringfence.errors import RingfenceError

#: verb name → module under ringfence.cli providing ``register(subparsers)``. One place, explicit.
VERBS: dict[str, str] = {
    "assess": "ringfence.cli.assess_cmd",
    "flows": "ringfence.cli.flows_cmd",
    "discover": "ringfence.cli.discover_cmd",
    "policy": "ringfence.cli.policy_cmd",
    "compile": "ringfence.cli.compile_cmd",
    "apply": "ringfence.cli.apply_cmd",
    "probe": "ringfence.cli.probe_cmd",
    "contain": "ringfence.cli.contain_cmd",
    "pki": "ringfence.cli.pki_cmd",
    "encrypt": "ringfence.cli.encrypt_cmd",
    "verify": "ringfence.cli.verify_cmd",
    "bench": "ringfence.cli.bench_cmd",
    "rollout": "ringfence.cli.rollout_cmd",
    "lab": "ringfence.cli.lab_cmd",
    "evidence": "ringfence.cli.evidence_cmd",
    "inventory": "ringfence.cli.inventory_cmd",
}


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser, with every registered verb."""
    parser = argparse.ArgumentParser(
        prog="ringfence",
        description="Network-security assurance for AI training clusters.",
    )
    parser.add_argument("--version", action="version", version=f"ringfence {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="show tracebacks of errors")
    sub = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    for module in VERBS.values():
        importlib.import_module(module).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit code (tests call it in-process)."""
    parser = build_parser()
    args = parser.parse_args(list(argv) if argv is not None else None)
    try:
        code: int = args.func(args)
    except RingfenceError as exc:
        if args.verbose:
            raise
        print(exc.diagnostics(), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return code


__all__ = ["VERBS", "build_parser", "main"]
