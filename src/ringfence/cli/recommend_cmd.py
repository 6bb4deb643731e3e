"""``ringfence recommend POLICY [--facts FILE …] [--format table|json]``: the layer per class and link, explained.

``--facts`` takes NIC capability facts (``format: ringfence.nic/1``) and canary comparisons
(``bench compare --json``); each file is recognised by its ``format``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ringfence.errors import InputError


def _facts(paths: list[str]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    from ringfence.bounded import BoundedInputError, loads_json
    from ringfence.facts import bench, nic
    from ringfence.facts.interface import read_bytes

    nics: dict[str, Any] = {}
    comparisons: list[dict[str, Any]] = []
    for p in paths:
        data = read_bytes(p, "facts")
        try:
            doc = loads_json(data, p)
        except BoundedInputError as exc:
            raise InputError(exc.where, exc.message.removeprefix(f"{exc.where}: ")) from exc
        fmt = doc.get("format") if isinstance(doc, dict) else None
        if fmt == nic.NIC_FORMAT:
            nics.update(nic.load(p, data).value)
        elif fmt == bench.BENCH_FORMAT:
            comparisons.append(bench.load(p, data).value)
        else:
            raise InputError(p, f"format {fmt!r}: give NIC facts ({nic.NIC_FORMAT}) or canary comparisons "
                                f"({bench.BENCH_FORMAT})")
    return nics, comparisons


def _table(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'class':<12} {'link':<34} {'recommended':<20} {'expected cost':<40} why"]
    for r in rows:
        c = r["cost"]
        lo, hi = c["busbw_loss_pct"]
        cost = f"{lo:g}–{hi:g} % busbw ({c['source']})" if lo != hi else f"{lo:g} % busbw ({c['source']})"
        lines.append(f"{r['class']:<12} {r['link'][:34]:<34} {r['recommended']:<20} {cost:<40} {r['why'][-1]}")
        lines.extend(f"{'':<12} plan: {step}" for step in r["plan"])
    return "\n".join(lines)


def _recommend(args: argparse.Namespace) -> int:
    from ringfence.policy import load_policy
    from ringfence.recommend import measured_costs, recommend

    policy = load_policy(Path(args.policy))
    nics, comparisons = _facts(args.facts or [])
    rows = [r.to_dict() for r in recommend(policy, nics, measured_costs(comparisons))]
    if args.format == "json":
        sys.stdout.write(json.dumps({"policy": args.policy, "budget_busbw_loss_pct": policy.budget.busbw_loss_pct,
                                     "recommendations": rows}, indent=1) + "\n")
    else:
        print(_table(rows))
    return 0


def register(sub: Any) -> None:
    """Add the ``recommend`` verb."""
    p = sub.add_parser("recommend", help="which layer per class and link, its expected cost, why, the rollout plan")
    p.add_argument("policy", help="the policy (ringfence.yaml)")
    p.add_argument("--facts", action="append", help="NIC capability facts or canary comparisons (repeatable)")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.set_defaults(func=_recommend)


__all__ = ["register"]
