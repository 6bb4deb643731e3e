"""The drills' response: contain the actor with ringfence's own containment, time it, and always release it.

The containment is :func:`ringfence.enforce.contain.contain` itself (snapshot, isolation at the subject's own
ruleset and at the fabric, proof by probes, the fabric alone proven by lifting the node's part, the other
jobs' progress). It is called without ``drill`` and released here in a ``finally`` — the same steps as
``contain --drill``, but the clock stops when the isolation is *proven*, not after the release, and a
failure half-way (an exception after isolating) still releases the subject.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ringfence.drill.interface import DrillContext
from ringfence.enforce.contain import (
    ContainError,
    ContainmentReport,
    contain,
    control_addresses,
    release,
    resolve_subject,
    verify_release,
)
from ringfence.enforce.facts import CONTAIN_SOURCE
from ringfence.evidence import RecordKind
from ringfence.targets.cluster import steps_of
from ringfence.targets.interface import Executor

_RELEASED = {True: ", its approved paths work again", False: ", but its approved paths did NOT come back",
             None: " (no approved path is probed from it, so the release was not re-checked)"}
#: seconds of capture in the containment's snapshot (short: the drill's whole run must stay quick)
SNAPSHOT_S = 2.0


@dataclass(frozen=True)
class Response:
    """How the containment went: held (None: not attempted), in words, how long, and its evidence."""

    contained: bool | None
    text: str
    seconds: float | None  # detection → isolation proven (None: not proven)
    evidence: tuple[str, ...]
    report: ContainmentReport | None = None


def _collectors(ctx: DrillContext, points: Mapping[str, Executor],
                nodes: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(collectors, kept): mgmt, the evidence collector (as ``contain`` defaults); and over SSH the control host's
    address, which drives the containment and must stay reachable — kept, not a collector, as ``contain
    --target ssh`` does: no path to it is approved that a probe could show, so probing it would fail the
    containment for a path the policy never had."""
    mgmt = ctx.policy.node("mgmt")
    collectors = tuple(mgmt.addresses) if mgmt is not None else ()
    kept: tuple[str, ...] = ()
    if ctx.cluster.site().kind == "ssh":
        kept = tuple(a for a in control_addresses(points, nodes) if a not in collectors)
    return collectors, kept


def respond(ctx: DrillContext, points: Mapping[str, Executor], *, detected_at: float | None,
            node: str | None = None, job: str | None = None) -> Response:
    """Contain ``node`` or ``job``, prove it, release it (always) and prove the release; never raises for a
    containment that cannot be made (that is ``contained=False`` with the reason: the drill fails closed)."""
    subject = resolve_subject(ctx.policy, node=node, job=job)
    try:
        collectors, kept = _collectors(ctx, points, subject.nodes)
    except ContainError as exc:  # the control host's own address unknown: containing would cut it off
        return Response(False, f"containment of {subject.describe()} was not made: {exc.message}", None, ())

    def capture(seconds: float, path: Path) -> Path:
        ctx.cluster.capture(seconds, path)
        return path

    def steps() -> dict[str, int]:
        return steps_of(ctx.cluster.agent_status())

    ctx.progress(f"containing {subject.describe()} (collectors {', '.join(collectors) or 'none'}"
                 f"{'; kept reachable: ' + ', '.join(kept) if kept else ''})")
    t0 = time.time()
    report: ContainmentReport | None = None
    failure = ""
    proven_at = t0
    rel: str | None = None
    try:
        report = contain(ctx.policy, subject, points, ctx.store, target=ctx.target, collectors=collectors,
                         workdir=ctx.workdir, capture=capture, steps=steps, snapshot_seconds=SNAPSHOT_S,
                         progress=ctx.progress, keep=kept)
        proven_at = time.time()
    except ContainError as exc:
        failure = exc.message
    finally:
        # released whatever happened above: a drill never leaves a subject isolated
        ctx.progress(f"releasing {subject.describe()}")
        try:
            rel = release(subject, points, ctx.store, target=ctx.target)
        except ContainError as exc:
            failure = failure or f"release failed: {exc.message}"
    if report is None:
        return Response(False, f"containment of {subject.describe()} could not be made: {failure}", None,
                        (rel,) if rel else ())
    again = verify_release(ctx.policy, subject, points, ctx.store, target=ctx.target) if rel else None
    # a subject none of whose nodes is the probing source of an approved path has nothing of its own to re-check
    restored: bool | None = None if again is not None and not again.results else bool(
        again is not None and all(p.outcome == "connected" for p in again.results))
    report = dataclasses.replace(report, released_evidence=rel, release_probes=again.results if again else ())
    doc = {k: v for k, v in report.to_json().items() if k not in ("probes", "release_probes")}
    rec = str(ctx.store.append(RecordKind.OBSERVATION, CONTAIN_SOURCE, subject.describe(), doc))
    evidence = [*(e for e in doc["evidence"] if isinstance(e, str)), rec]
    since = detected_at if detected_at is not None else t0
    seconds = round(proven_at - since, 3) if report.isolated else None
    at = ", ".join(k for k, v in report.points.items() if v) or "no point"
    denied = len([p for p in report.probes if p.expected == "deny" and p.by_policy])
    text = (f"{subject.describe()} ({', '.join(subject.nodes)}) isolated at {at} (proven by {denied} denied "
            f"probe(s)); collectors {'reachable' if report.collector_reachable else 'NOT reachable'}; other jobs "
            f"training: {report.training.get('others_training')}; {report.seconds}s from isolating to proof, "
            f"{proven_at - t0:.1f}s with the {SNAPSHOT_S:g}s snapshot; released"
            f"{_RELEASED[restored]}"
            f"{'; ' + failure if failure else ''}")
    return Response(report.ok and not failure, text, seconds, tuple(dict.fromkeys(evidence)), report)


__all__ = ["SNAPSHOT_S", "Response", "respond"]
