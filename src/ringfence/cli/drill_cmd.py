"""``ringfence drill list`` and ``ringfence drill run SCENARIO --target lab|ssh -o FILE``.

A drill plays an incident for real — the attacker's side acts through the site's executors — then
detects, contains and proves it, records every step in the evidence store and measures the bystander
job throughout. Exit 0 when every attempt was stopped and proven, 1 when any part got through (or
containment did not hold, or the bystander left its budget), 3 when the drill could not prove either,
2 on bad input or a cluster the drill cannot be played on.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

from ringfence.errors import InputError

#: the scenarios, named without importing them (ringfence.drill.registry.NAMES; a test keeps them equal)
SCENARIOS = ("credential-compromise", "malicious-job", "exfiltration", "management-plane-failure")
#: the scenarios ``--node`` names a node of, and the option each reads it from
NODE_OPTION = {"exfiltration": "node", "management-plane-failure": "suspect"}


def _list(args: argparse.Namespace) -> int:
    from ringfence.drill.registry import NAMES, scenarios

    table = scenarios()
    for name in NAMES:
        s = table.get(name)
        print(f"{name:26} {s.summary if s is not None else '(not available in this build)'}")
    return 0


def scenario_options(args: argparse.Namespace) -> dict[str, Any]:
    """The scenario's options from the command line (``--node``, ``--telemetry-dir``); :class:`InputError`
    for one the scenario or the target does not take."""
    options: dict[str, Any] = {}
    if args.node is not None:
        if args.scenario not in NODE_OPTION:
            raise InputError("--node", f"the {args.scenario} drill chooses its own actors",
                             hint=f"--node applies to {' and '.join(NODE_OPTION)}")
        options[NODE_OPTION[args.scenario]] = args.node
    if args.telemetry_dir is not None:
        if args.target != "ssh":
            raise InputError("--telemetry-dir", "the lab keeps its telemetry where it knows it",
                             hint="--telemetry-dir applies to --target ssh")
        if not args.telemetry_dir.startswith("/"):
            raise InputError("--telemetry-dir", f"{args.telemetry_dir!r} is not an absolute path on the hosts")
        options["telemetry_dir"] = args.telemetry_dir
    return options


def _run(args: argparse.Namespace) -> int:
    from ringfence.drill.interface import DrillContext
    from ringfence.drill.record import record
    from ringfence.drill.registry import scenario
    from ringfence.evidence import EvidenceStore
    from ringfence.evidence.store import default_store_path

    play = scenario(args.scenario)
    cluster: Any
    options = scenario_options(args)
    if args.target == "lab":
        from ringfence.lab import Lab
        from ringfence.policy import load_policy

        lab = Lab.attach(args.name)
        policy = load_policy(args.target_policy) if args.target_policy else lab.policy()
        cluster, target = lab, f"lab:{lab.name}"
        options["lab"] = lab
    elif args.target == "ssh":
        from ringfence.cli._targets import site_for
        from ringfence.targets.cluster import SiteCluster

        site, policy = site_for(args)
        cluster, target = SiteCluster(site, policy), f"ssh:{args.hosts}"
    else:
        raise InputError("--target", f"unknown target {args.target!r}", hint="lab, or ssh with --hosts")
    store = EvidenceStore.open(Path(args.store) if args.store else default_store_path())
    with tempfile.TemporaryDirectory(prefix="ringfence-drill-") as work:
        ctx = DrillContext(cluster, policy, store, Path(work), target,
                           progress=lambda m: print(f"drill {args.scenario}: {m}", file=sys.stderr),
                           timeout=args.timeout, options=options)
        report = play.run(ctx)
    ev, body = record(report, store, Path(args.output) if args.output else None)
    if not args.output:
        sys.stdout.write(body.decode())
    verdict = report.verdict.value
    print(f"drill {args.scenario}: {verdict} — {report.why()} (evidence {ev} in {store.path})", file=sys.stderr)
    return {"pass": 0, "fail": 1}.get(verdict, 3)


def register(sub: Any) -> None:
    """Add the ``drill`` verb (``list``, ``run``)."""
    from ringfence.cli._targets import add_target_arguments

    p = sub.add_parser("drill", help="play an incident scenario for real: attack, detect, contain, prove")
    verbs = p.add_subparsers(dest="drill_verb", metavar="ACTION", required=True)
    ls = verbs.add_parser("list", help="the scenarios, one line each")
    ls.set_defaults(func=_list)
    run = verbs.add_parser("run", help="play one scenario on a running cluster and record it")
    run.add_argument("scenario", choices=SCENARIOS, help="which incident")
    add_target_arguments(run)
    run.add_argument("-o", "--output", help="write the drill report (JSON, facts for assess --drill) here")
    run.add_argument("--store", "--evidence", dest="store",
                     help="evidence store directory (default $RINGFENCE_EVIDENCE or .ringfence/evidence)")
    run.add_argument("--timeout", type=float, default=30.0, help="seconds any one wait of the drill may take")
    run.add_argument("--node", help="exfiltration: the node that streams the checkpoint; management-plane-failure: "
                                    "the node contained (default: the last rank of the last job)")
    run.add_argument("--telemetry-dir", metavar="DIR",
                     help="--target ssh: where each host keeps ulogd.json, objects.json and the egress gateway's "
                          "log (default /var/log/ringfence/telemetry); {host} stands for the host's inventory "
                          "name, for hosts that share one filesystem")
    run.set_defaults(func=_run)
