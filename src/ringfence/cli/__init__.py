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
import traceback
from collections.abc import Callable, Sequence

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
    "drill": "ringfence.cli.drill_cmd",
    "pki": "ringfence.cli.pki_cmd",
    "encrypt": "ringfence.cli.encrypt_cmd",
    "verify": "ringfence.cli.verify_cmd",
    "bench": "ringfence.cli.bench_cmd",
    "rollout": "ringfence.cli.rollout_cmd",
    "lab": "ringfence.cli.lab_cmd",
    "evidence": "ringfence.cli.evidence_cmd",
    "inventory": "ringfence.cli.inventory_cmd",
    "change": "ringfence.cli.change_cmd",
    "drift": "ringfence.cli.drift_cmd",
    "attest": "ringfence.cli.attest_cmd",
    "rdma": "ringfence.cli.rdma_cmd",
    "trace": "ringfence.cli.trace_cmd",
    "recommend": "ringfence.cli.recommend_cmd",
    "partition": "ringfence.cli.partition_cmd",
}


def build_parser(verbs: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The argument parser with every registered verb, or only ``verbs`` (each a key of :data:`VERBS`)."""
    parser = argparse.ArgumentParser(
        prog="ringfence",
        description="Network-security assurance for AI training clusters.",
    )
    parser.add_argument("--version", action="version", version=f"ringfence {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="show tracebacks of errors")
    sub = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    for name, module in VERBS.items():
        if verbs is None or name in verbs:
            importlib.import_module(module).register(sub)
    return parser


def _parser_for(argv: Sequence[str]) -> argparse.ArgumentParser:
    """The parser ``argv`` needs: only its verb's when it names one (each verb module imports its own
    dependencies and builds its own sub-commands, 24 of them: ~0.2 s a start that one verb does not need);
    the whole parser for ``--help``, a mistyped verb or none, so those list every verb as before."""
    for arg in argv:
        if arg in ("-h", "--help"):
            break
        if arg == "--version":
            return build_parser(())
        if not arg.startswith("-"):
            return build_parser((arg,)) if arg in VERBS else build_parser()
    return build_parser()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit code (tests call it in-process)."""
    args_in = list(argv) if argv is not None else sys.argv[1:]
    parser = _parser_for(args_in)
    args = parser.parse_args(args_in)
    try:
        return run_verb(args.func, args, verbose=bool(args.verbose))
    finally:
        # a command leaves no SSH connection behind: end the shared ones it opened (only if it used SSH)
        ssh = sys.modules.get("ringfence.targets.ssh")
        if ssh is not None:
            ssh.close_masters()
        # nor an analytical database or its spill directory (only if it analysed flows)
        duck = sys.modules.get("ringfence.analyze.engine.duck")
        if duck is not None:
            duck.close_databases()


def run_verb(func: Callable[[argparse.Namespace], int], args: argparse.Namespace, *, verbose: bool) -> int:
    """Run one verb behind the CLI's last line of defence; returns the exit code.

    A :class:`RingfenceError` is the user's to act on: its diagnostics, exit 2. Anything else that
    escapes is a bug of ours, but an operator piping ``ringfence`` into a review must still get one
    line and exit 2, never a traceback on a hostile input; ``-v`` shows the traceback for the report.
    """
    try:
        code: int = func(args)
    except RingfenceError as exc:
        if verbose:
            raise
        print(exc.diagnostics(), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except RecursionError:
        # Named apart: it means an input nested deeper than a reader's bound, a bug to fix at the reader.
        if verbose:
            traceback.print_exc(file=sys.stderr)
        print("internal error: RecursionError: input nested too deeply (please report this)", file=sys.stderr)
        return 2
    except Exception as exc:  # the last line of defence: the one place that catches everything
        if verbose:
            traceback.print_exc(file=sys.stderr)
        print(f"internal error: {_one_line(exc)} (please report this; -v shows the traceback)", file=sys.stderr)
        return 2
    return code


def _one_line(exc: BaseException) -> str:
    """``Type: first line of the message``, cut short: a hostile input must not flood stderr."""
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    if len(first) > 200:
        first = first[:200] + "…"
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


__all__ = ["VERBS", "build_parser", "main", "run_verb"]
