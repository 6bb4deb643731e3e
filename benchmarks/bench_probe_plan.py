"""Probe planning at fleet scale: every (source zone or job, destination class, verdict) once, in < 10 s.

Builds the synthetic cluster of ``bench_classify.py`` with 10,000 nodes in 500 jobs (the workers split
into 500 jobs of 18; 1,000 storage nodes, management, users, jump hosts, external replicas; one
collective, storage and API rule per job), then times :func:`ringfence.analyze.probe_plan.plan_fleet_probes`
— the policy compile included — median of N runs, against the size of the all-pairs matrix it replaces
(every source node × every destination service); and, interleaved with it, what ``ringfence probe --plan
classes`` builds before it probes (:func:`ringfence.enforce.probe_classes.class_probe_plan`: the same plan turned
into the matrix's probe specs, plus the evidence record of every class). Prints classes, probes, the sample
size per class, and checks that every (group, destination class) pair got at least one class.

Usage: ``python benchmarks/bench_probe_plan.py [--nodes 10000] [--jobs 500] [--sample 2] [--repeats 3]``.
Exit status 1 when the target (< 10 s) is missed or a pair is uncovered.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_classify import build_policy_dict  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print a markdown table; exit 1 if a target is missed."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=10_000)
    ap.add_argument("--jobs", type=int, default=500)
    ap.add_argument("--sample", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)

    from ringfence.analyze.probe_plan import plan_fleet_probes
    from ringfence.enforce.probe_classes import class_probe_plan, class_record
    from ringfence.policy import Policy

    policy = Policy.model_validate_json(json.dumps(build_policy_dict(args.nodes, jobs=args.jobs)))
    wall: list[float] = []
    cpu: list[float] = []
    probe_wall: list[float] = []
    probe_cpu: list[float] = []
    plan = None
    for _ in range(args.repeats):
        fresh = policy.model_copy()  # no cached compile: what one CLI run pays
        c0, t0 = time.process_time(), time.perf_counter()
        plan = plan_fleet_probes(fresh, sample=args.sample, seed=1)
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        fresh = policy.model_copy()
        c0, t0 = time.process_time(), time.perf_counter()
        specs, fleet = class_probe_plan(fresh, {}, sample=args.sample, seed=1)
        class_record(fleet)
        probe_wall.append(time.perf_counter() - t0)
        probe_cpu.append(time.process_time() - c0)
    assert plan is not None
    groups = len(policy.zones) + len(policy.jobs)
    pairs = {(c.group, c.destination) for c in plan.classes}
    dests = {c.destination for c in plan.classes}
    all_pairs = len(policy.nodes) * (len(policy.services) + len(policy.jobs))
    sizes = sorted({len(c.probes) for c in plan.classes})
    print(
        f"\n{len(policy.nodes):,} nodes, {len(policy.jobs)} jobs, {len(policy.services):,} services, "
        f"{len(policy.approved):,} approved flows; sample {args.sample} per class; median of {args.repeats}\n"
    )
    print("| classes | allow | deny | probes | all-pairs probes replaced | median wall s | runs | median CPU s |")
    print("|---:|---:|---:|---:|---:|---:|---|---:|")
    allow = sum(c.verdict == "allow" for c in plan.classes)
    print(
        f"| {len(plan.classes):,} | {allow:,} | {len(plan.classes) - allow:,} | {len(plan.probes):,} | {all_pairs:,} "
        f"| {statistics.median(wall):.2f} | {', '.join(f'{w:.2f}' for w in wall)} | {statistics.median(cpu):.2f} |"
    )
    print(
        f"\n`probe --plan classes` plan (specs + record): {len(specs.probes):,} probes, median wall "
        f"{statistics.median(probe_wall):.2f} s (runs {', '.join(f'{w:.2f}' for w in probe_wall)}), "
        f"median CPU {statistics.median(probe_cpu):.2f} s"
    )
    covered = len(pairs) == groups * len(dests) - len(plan.skipped)
    print(
        f"\nsample sizes per class: {sizes}; (group, destination class) pairs covered: {len(pairs):,} of "
        f"{groups} groups x {len(dests)} destination classes; skipped: {len(plan.skipped)}"
    )
    print(f"load average at the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    ok = statistics.median(wall) < 10.0 and statistics.median(probe_wall) < 10.0 and covered
    print(f"target < 10 s and every pair covered: {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
