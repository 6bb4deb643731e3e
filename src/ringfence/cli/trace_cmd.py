"""``ringfence trace --sample allowed|denied [--flow 5-TUPLE] [--since TIME] [--object served|refused] --target lab|ssh
-o FILE [--html PAGE]``.

Collects every enforcement point's telemetry (ulogd decisions, conntrack events, dnsmasq answers, the
object server's access log, the TLS sidecars' connection logs) through the target's executors,
reconstructs one flow end to end and writes the trace JSON (and, with ``--html``, a self-contained
HTML timeline); the timeline goes to stderr. ``--object served`` traces a flow that carried a dataset or
checkpoint request the object server served (``refused``: one it refused). Exit 0: reconstructed and
both ends attributed; 1: an end cannot be attributed; 3: no such flow in the telemetry (unknown: the hint
says what to run).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ringfence.atomic import write_atomic
from ringfence.cli._targets import add_target_arguments
from ringfence.errors import InputError
from ringfence.observe.flows.events.deploy import DEFAULT_DIR

if TYPE_CHECKING:
    from ringfence.policy import Policy
    from ringfence.targets.interface import Executor


def _sources(args: argparse.Namespace) -> tuple[str, str, dict[str, Executor], dict[str, str], Policy]:
    """(target label, site name, point → executor, point → telemetry directory, policy)."""
    if args.target == "lab":
        from ringfence.lab import Lab
        from ringfence.lab.points import lab_points
        from ringfence.lab.telemetry import point_dir

        lab = Lab.attach(args.name)
        points = lab_points(lab)
        return (f"lab:{lab.name}", lab.site().name, dict(points),
                {p: str(point_dir(lab.telemetry_dir, p)) for p in points}, lab.policy())
    from ringfence.cli._targets import points_for, site_for

    label, points, _ = points_for(args, precheck=False)
    site, policy = site_for(args)
    return label, site.name, dict(points), dict.fromkeys(points, args.telemetry_dir), policy


def _since(text: str) -> datetime:
    """``--since``: an ISO 8601 time with its timezone (a naive time would be read in an unknown zone)."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise InputError("--since", f"{text!r} is not an ISO 8601 time (e.g. 2026-12-02T21:30:00+00:00)") from None
    if when.tzinfo is None:
        raise InputError("--since", f"{text!r} has no timezone: give one (e.g. +00:00 or Z)")
    return when


def _run(args: argparse.Namespace) -> int:
    from ringfence.evidence import EvidenceStore
    from ringfence.evidence.store import default_store_path
    from ringfence.trace.collect import collect, sidecar_logs
    from ringfence.trace.html import render_html
    from ringfence.trace.jobs_file import SpanFile
    from ringfence.trace.reconstruct import FlowSpec, NoSample, load, reconstruct
    from ringfence.trace.timeline import render

    spec = FlowSpec.parse(args.flow) if args.flow else None
    since = _since(args.since) if args.since else None
    jobs = SpanFile(Path(args.jobs)) if args.jobs else None
    target, site, points, dirs, policy = _sources(args)
    store = EvidenceStore.open(Path(args.evidence) if args.evidence else default_store_path())
    sidecars, sidecar_problems = sidecar_logs(site, points)
    with tempfile.TemporaryDirectory(prefix="rf-trace-") as tmp:
        got = collect(points, dirs, Path(tmp), extra=sidecars)
        for problem in (*sidecar_problems, *got.problems):
            print(f"warning: {problem}", file=sys.stderr)
        tel = load(got.files, [Path(h) for h in args.hubble])
    for w in tel.warnings[:20]:
        print(f"warning: {w}", file=sys.stderr)
    try:
        trace = reconstruct(tel, policy, args.sample, spec=spec, store=store, target=target, jobs=jobs,
                            objects=args.object, since=since)
    except NoSample as exc:
        print(exc.diagnostics(), file=sys.stderr)
        return 3
    write_atomic(args.output, (json.dumps(trace.model_dump(mode="json"), indent=2) + "\n").encode())
    if args.html:
        write_atomic(args.html, render_html(trace).encode())
    print(render(trace), file=sys.stderr)
    return 0 if trace.attributed else 1


def register(sub: Any) -> None:
    """Add ``trace``."""
    p = sub.add_parser("trace", help="reconstruct one allowed or denied flow end to end from the telemetry",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sample", required=True, choices=("allowed", "denied"))
    p.add_argument("--flow", help="SRC:SPORT-DST:DPORT[/PROTO] (SPORT may be *): this flow, not a sample")
    p.add_argument("--since", metavar="TIME", help="only a flow decided at or after TIME (ISO 8601 with a "
                   "timezone): the flows since a change, not an earlier policy's")
    p.add_argument("--object", choices=("served", "refused"),
                   help="a flow that carried an object request (dataset read, checkpoint write) the object server "
                        "served, or refused — joined from its access log")
    add_target_arguments(p)
    p.add_argument("-o", "--output", required=True, help="the trace JSON")
    p.add_argument("--html", metavar="PAGE", help="also write the timeline as one self-contained HTML page")
    p.add_argument("--evidence", help="evidence store directory (default $RINGFENCE_EVIDENCE or .ringfence/evidence)")
    p.add_argument("--jobs", help="job spans (JSON); without one, job and user are null")
    p.add_argument("--hubble", action="append", default=[], metavar="FILE",
                   help="Hubble flow export(s) (hubble observe -o json) feeding the same decisions")
    p.add_argument("--telemetry-dir", default=DEFAULT_DIR,
                   help="--target ssh: where each host keeps ulogd.json, conntrack.log, dnsmasq.log, objects.json")
    p.set_defaults(func=_run)


__all__ = ["register"]
