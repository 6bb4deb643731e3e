"""The probe matrix at fleet scale: one sampled probe class per (source zone or job, destination class,
verdict) instead of every pair, and the choice between the two.

:func:`ringfence.analyze.probe_plan.plan_fleet_probes` says which probes no rule can tell apart; this turns
its classes into the :class:`~ringfence.enforce.probe_matrix.ProbeSpec` probes the matrix runs (each one
proves its class's verdict the same way an all-pairs probe does: a permitted path connects and answers, a
denied one is dropped by policy on a listening port) and into the record of what each class stands for
and how many of its probes were run — so a reader of the evidence sees the sample, not just the results.

:class:`PlanMode`: ``pairs`` — the all-pairs matrix (every approved flow, every zone pair × sensitive port,
every job × other job's collective); ``classes`` — the sampled class plan; ``auto`` (default) — ``pairs`` up
to :data:`CLASSES_FROM` nodes, ``classes`` beyond, where all pairs stop being runnable.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping
from enum import StrEnum
from typing import Any

from ringfence.analyze.probe_plan import FleetPlan, plan_fleet_probes
from ringfence.enforce.probe_matrix import ProbePlan, ProbeSpec
from ringfence.errors import InputError
from ringfence.policy import Policy

#: From this many nodes on, ``auto`` plans probe classes: the lab and small clusters keep all pairs.
CLASSES_FROM = 200
#: Probes per class when none is asked for: two sources, so a single odd node cannot stand for its class.
DEFAULT_SAMPLE = 2
_APPS = ("http", "https", "ssh")


class PlanMode(StrEnum):
    """How the probe matrix chooses its probes."""

    AUTO = "auto"
    PAIRS = "pairs"
    CLASSES = "classes"


def resolve_mode(mode: PlanMode, policy: Policy) -> PlanMode:
    """``auto`` → ``pairs`` or ``classes`` by the size of the inventory; the others as they are."""
    if mode is not PlanMode.AUTO:
        return mode
    return PlanMode.CLASSES if len(policy.nodes) >= CLASSES_FROM else PlanMode.PAIRS


def class_probe_plan(
    policy: Policy, listening: Mapping[str, frozenset[int]], *, sample: int = DEFAULT_SAMPLE, seed: int = 0,
    reachable: Collection[str] | None = None,
) -> tuple[ProbePlan, FleetPlan]:
    """The sampled class plan of ``policy`` as the matrix's probes, and the fleet plan behind it.

    ``listening`` (node → listening TCP ports) picks each job's rendezvous port. Only TCP is probed (the
    probe program opens TCP connections); a UDP class is kept in the record as not probed.
    """
    if sample < 1:
        raise InputError("--sample", f"must be at least 1, not {sample}")
    fleet = plan_fleet_probes(policy, sample=sample, seed=seed, listening=listening, reachable=reachable)
    apps = {(s.node, s.port_range[0]): s.application for s in policy.services}
    probes: list[ProbeSpec] = []
    skipped = list(fleet.skipped)
    for c in fleet.classes:
        if c.proto != "tcp":
            skipped.append(f"{c.group} → {c.destination}: only TCP is probed ({c.proto})")
            continue
        why = f"class {c.group} → {c.destination} ({c.verdict}; {len(c.probes)} of {c.sources} source node(s))"
        for p in c.probes:
            app = apps.get((p.destination, p.port), "") if c.verdict == "allow" else ""
            probes.append(
                ProbeSpec(p.source, p.destination, p.host, p.port, c.verdict, app if app in _APPS else "", c.rule,
                          why)
            )  # fmt: skip
    return ProbePlan(tuple(probes), tuple(skipped)), fleet


def class_record(fleet: FleetPlan) -> dict[str, Any]:
    """What the evidence keeps about a class plan: the sample asked for, and per class what it stands for
    (source nodes, destination services) and how many probes were sampled from it."""
    sizes = Counter(len(c.probes) for c in fleet.classes)
    return {
        "mode": PlanMode.CLASSES.value,
        "sample": fleet.sample,
        "seed": fleet.seed,
        "classes": len(fleet.classes),
        "sample_sizes": {str(k): v for k, v in sorted(sizes.items())},
        "per_class": [
            {"group": c.group, "destination": c.destination, "proto": c.proto, "port": c.port,
             "verdict": c.verdict, "rule": c.rule, "sources": c.sources, "services": c.services,
             "sampled": len(c.probes), "port_assumed": c.port_assumed}
            for c in fleet.classes
        ],
    }  # fmt: skip


def describe(fleet: FleetPlan, *, limit: int = 40) -> list[str]:
    """Lines for the terminal: the plan's size and sample, then up to ``limit`` classes with theirs."""
    sizes = Counter(len(c.probes) for c in fleet.classes)
    allow = sum(c.verdict == "allow" for c in fleet.classes)
    lines = [
        f"plan: {len(fleet.classes):,} probe classes ({allow:,} allow, {len(fleet.classes) - allow:,} deny), "
        f"sample {fleet.sample} per class; classes by probes sampled: "
        + ", ".join(f"{k}: {v:,}" for k, v in sorted(sizes.items()))
    ]
    lines += [
        f"  {c.verdict:5} {c.group} → {c.destination} ({c.proto}/{c.port}): {len(c.probes)} of {c.sources} "
        f"source node(s), {c.services} service(s){' [port assumed]' if c.port_assumed else ''}"
        for c in fleet.classes[:limit]
    ]
    if len(fleet.classes) > limit:
        lines.append(f"  … and {len(fleet.classes) - limit:,} more (every class is in the evidence record)")
    return lines


__all__ = ["CLASSES_FROM", "DEFAULT_SAMPLE", "PlanMode", "class_probe_plan", "class_record", "describe",
           "resolve_mode"]  # fmt: skip
