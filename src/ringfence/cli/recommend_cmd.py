"""``ringfence recommend POLICY [--facts FILE …] [--gather --target lab|ssh [--nic-out F]] [--format table|json]``:
the layer per class and link, explained.

``--facts`` takes NIC capability facts (``format: ringfence.nic/1``) and canary comparisons
(``bench compare --json``); each file is recognised by its ``format``. ``--gather`` reads the NIC facts
from the nodes themselves through the target's executors (``ringfence.recommend.gather``); they are
validated as a facts file would be, take precedence over a file's for the same node, and ``--nic-out``
keeps them (a facts file for the record, or for a later ``--facts``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ringfence.cli._targets import add_target_arguments
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


def _gather(args: argparse.Namespace) -> dict[str, Any]:
    from ringfence.atomic import write_atomic
    from ringfence.cli._targets import site_for
    from ringfence.facts import nic
    from ringfence.recommend.gather import gather_nic

    site, _ = site_for(args)
    doc = gather_nic(site)
    data = (json.dumps(doc, indent=1) + "\n").encode()
    where = args.nic_out or f"<gathered from {site.kind} {site.name}>"
    gathered: dict[str, Any] = nic.load(where, data).value  # the strict reader of a facts file, on what the nodes said
    for node, why in sorted(nic.unreadable(where, data).items()):
        print(f"recommend: NIC facts of {node} unknown: {why}", file=sys.stderr)
    for row in doc["nodes"]:
        for note in row.get("notes", []):
            print(f"recommend: {row['node']}: {note}", file=sys.stderr)
    if args.nic_out:
        write_atomic(args.nic_out, data)
    print(f"recommend: NIC facts gathered from {len(gathered)} of {len(doc['nodes'])} nodes of {site.kind} "
          f"{site.name}", file=sys.stderr)
    return gathered


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
    if args.gather:
        nics.update(_gather(args))
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
    p.add_argument("--gather", action="store_true",
                   help="also read the NIC facts from the nodes (ethtool -k, ip -d link, devlink) through --target")
    p.add_argument("--nic-out", help="with --gather: write the gathered NIC facts here (ringfence.nic/1)")
    add_target_arguments(p)
    p.set_defaults(func=_recommend)


__all__ = ["register"]
