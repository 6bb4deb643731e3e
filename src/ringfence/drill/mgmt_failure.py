"""The management-plane-failure drill: the management node goes down, then a suspect node is contained —
applied and proven at the fabric without it, the evidence meanwhile chained locally.

Played, in order:

1. *the management node fails* — on the lab, its job API, sshd (and Slurm controller, when one runs)
   are stopped by their recorded pids; it is shown down by what it listens on (none of its services'
   ports, read through its executor — or no answer from it at all). A target that cannot stop it
   says so in the notes and the drill proves nothing about running without it (``unknown``).
2. *containment without it* — the suspect (a rank of the last job by default: see
   :func:`choose_suspect`) is contained with
   :func:`ringfence.enforce.contain.contain`: a snapshot, the contained set at the fabric and at the
   node, the proof by probes, the fabric alone with the node's own containment lifted. The default
   evidence collector is the management node, which is down: there is none (on SSH only the control
   host's own address stays reachable, or the drill would cut itself off). Every denied probe is an
   :class:`~ringfence.drill.interface.Attempt`: the suspect (or a peer, inbound) really tries the path;
   what stops it is the drop rule whose ``denied`` counter moved — which is also the detection.
   Without an applied policy there is nothing to isolate with: the same probes are run as they are,
   and whatever connects got through.
3. *the record* — every step went to the controller's evidence store, a hash chain on local disk with
   a signed checkpoint; it must verify after the drill (``store.verify()``).
4. *recovery* — the management node's services are started again and shown listening; the suspect is
   released and its approved paths (to the job API among them) shown working again.

The bystander job's training is measured throughout.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from ringfence.controls.interface import ProbeResult
from ringfence.drill import _site
from ringfence.drill.bystander import watch_bystander
from ringfence.drill.interface import Attempt, DrillContext, DrillError, DrillReport
from ringfence.enforce.contain import (
    ContainError,
    ContainmentReport,
    contain,
    control_addresses,
    release,
    resolve_subject,
    verify,
)
from ringfence.enforce.probe_matrix import (
    ProbePlan,
    ProbeRun,
    gather_listening,
    plan_probes,
    run_probes,
)
from ringfence.evidence import RecordKind
from ringfence.policy import Policy
from ringfence.targets.cluster import steps_of
from ringfence.targets.interface import Executor
from ringfence.targets.ops import listening_ports

SOURCE = "ringfence.drill.management-plane-failure"
NAME = "management-plane-failure"
#: seconds of capture in the containment's snapshot (the drill keeps it short: the fabric is what is proven)
SNAPSHOT_S = 1.0


def choose_suspect(policy: Policy, mgmt: str, suspect: str | None = None) -> str:
    """The node to contain: the given one, or the last rank of the last job.

    Not ``aux`` by default: aux's one approved path leads to the management node, which is down during
    the drill, so with aux's own rules lifted there would be nothing it may otherwise reach to show the
    fabric alone stopping it. A rank keeps approved paths that stay up (storage, its job's collective).
    """
    if suspect is not None:
        if policy.node(suspect) is None or suspect == mgmt:
            raise DrillError(f"cannot contain {suspect!r}: not a node of policy {policy.cluster} other than {mgmt}")
        return suspect
    if not policy.jobs:
        raise DrillError(f"policy {policy.cluster} has no job: name the node to contain")
    return policy.jobs[-1].members[-1]


def mgmt_ports(policy: Policy, mgmt: str) -> tuple[int, ...]:
    """The TCP ports of the management node's services (job API, sshd, …) in the policy."""
    return tuple(sorted({s.port_range[0] for s in policy.services if s.node == mgmt and s.proto == "tcp"}))


def is_down(ports: Sequence[int], listening: frozenset[int] | None) -> tuple[bool, str]:
    """Whether the management node serves none of ``ports`` (no answer from it at all counts as down)."""
    if listening is None:
        return True, "it does not answer its executor"
    up = sorted(set(ports) & listening)
    if up:
        return False, f"listening on {', '.join(map(str, up))}"
    return True, f"listening on none of {', '.join(map(str, ports))}"


def attempts_of(policy: Policy, probes: Sequence[ProbeResult], *, detected_after: float | None) -> list[Attempt]:
    """One attempt per denied probe of the containment: made for real, stopped only when a drop rule's
    counter moved for exactly it (that counter is the detection, with the source's address and name)."""
    out = []
    for p in probes:
        if p.expected != "deny":
            continue
        dest, _, port = p.destination.rpartition(":")
        through: bool | None = True if p.outcome == "connected" else (False if p.by_policy else None)
        detected: bool | None = True if p.by_policy else (False if p.outcome == "connected" else None)
        out.append(Attempt(
            f"{p.source}->{p.destination}", p.source, _site.named(policy, dest, int(port)),
            f"{p.source} opened TCP to {dest}:{port} during the containment",
            through, p.detail if through is not True else f"connected: {p.source} reached {dest}:{port}",
            detected, f"drop counter {p.rule} (source {_site.named(policy, p.source)})" if p.by_policy else
            "no drop counter moved for it", detected_after if p.by_policy else None, evidence=p.evidence))
    return out


def _iso() -> str:
    return datetime.now(UTC).isoformat()


def _at(ctx: DrillContext, ev: str | None) -> float | None:
    if ev is None:
        return None
    return datetime.fromisoformat(ctx.store.get(ev).time.replace("Z", "+00:00")).timestamp()


class ManagementPlaneFailure:
    """The scenario (see the module docstring)."""

    name = NAME
    summary = "the management node goes down, then a node is contained and proven at the fabric without it"

    def run(self, ctx: DrillContext) -> DrillReport:
        """Play it on ``ctx``'s cluster (stopping the management node needs ``--target lab``)."""
        started = _iso()
        policy, site = ctx.policy, ctx.cluster.site()
        mgmt = str(ctx.options.get("mgmt", "mgmt"))
        suspect = choose_suspect(policy, mgmt, ctx.options.get("suspect"))
        subject = resolve_subject(policy, node=suspect)
        pts = _site.points(ctx)
        if mgmt not in pts:
            raise DrillError(f"no executor reaches the management node {mgmt!r} of {site.name}")
        ports = mgmt_ports(policy, mgmt)
        lab = ctx.options.get("lab")
        notes: list[str] = []
        evidence: list[str] = []

        def rec(kind: RecordKind, subj: str, data: dict[str, Any]) -> str:
            ev = str(ctx.store.append(kind, SOURCE, subj, {"target": ctx.target, **data}))
            evidence.append(ev)
            return ev

        # over SSH the control host drives the containment: it stays reachable — kept, not a collector (no path
        # to it is approved that a probe could show), as ``contain --target ssh`` does
        collectors: tuple[str, ...] = ()
        if site.kind == "ssh":
            collectors = tuple(control_addresses(pts, subject.nodes))
            notes.append(f"the control host ({', '.join(collectors)}) stays reachable from {suspect}: it drives "
                         "the containment")
        report: ContainmentReport | None = None
        attempts: list[Attempt] = []
        contained: bool | None
        detect_s: float | None = None
        with watch_bystander(ctx.cluster, policy, [suspect]) as watch:
            stopped: tuple[Any, ...] = ()
            if lab is not None:
                ctx.progress(f"stopping the management node {mgmt}'s services")
                stopped = tuple(lab.stop_node(mgmt))
                rec(RecordKind.ACTION, f"node {mgmt}", {
                    "step": "management-node-stopped",
                    "processes": [{"label": s.record.label, "pid": s.record.pid, "ports": sorted(s.ports)}
                                  for s in stopped]})
            else:
                notes.append(f"the management node {mgmt} could not be stopped on this target (only the lab's own "
                             "processes can be stopped by the drill): containment was not shown without it")
            down, why_down = is_down(ports, listening_ports(pts[mgmt]))
            rec(RecordKind.OBSERVATION, f"node {mgmt}", {"step": "management-node-down", "down": down,
                                                         "detail": why_down, "ports": list(ports)})
            ctx.progress(f"{mgmt}: {'down' if down else 'UP'} ({why_down})")
            try:
                report, attempts, detect_s = self._contain(ctx, policy, subject, pts, collectors, notes)
            finally:
                # always undone, also when the containment failed half-way: the management node first (the
                # suspect's approved paths lead there), then the suspect (release skips where nothing is held)
                if stopped and lab is not None:
                    ctx.progress(f"restarting {mgmt}'s services")
                    lab.restart(stopped)
                release(subject, pts, ctx.store, target=ctx.target)
            back, why_back = is_down(ports, listening_ports(pts[mgmt]))
            rec(RecordKind.OBSERVATION, f"node {mgmt}", {"step": "management-node-back", "down": back,
                                                         "detail": why_back})
            released_ok: bool | None = None
            if report is not None:
                again = _approved_again(policy, subject, pts, ctx)
                released_ok = all(p.outcome == "connected" for p in again.results) if again.results else None
                rec(RecordKind.OBSERVATION, subject.describe(), {
                    "step": "released", "verified": released_ok, "probes": again.evidence})
        chain = ctx.store.verify()
        rec(RecordKind.OBSERVATION, f"store {ctx.store.path}", {
            "step": "evidence-verified", "ok": chain.ok, "records": chain.records, "summary": chain.summary()})
        if report is None:
            contained = False
            text = f"{subject.describe()} could not be contained (no ruleset to isolate with)"
        else:
            held = report.ok and report.points.get("fabric") is True
            # held but not shown without the management node: nothing proven about running without it
            contained = False if not held or not chain.ok or released_ok is False else (True if down else None)
            text = (f"{subject.describe()} ({', '.join(subject.addresses)}) contained while {mgmt} was "
                    f"{'down' if down else 'UP'} ({why_down}): isolated={report.isolated}, proven at "
                    f"{', '.join(k for k, v in report.points.items() if v) or 'no point'}, other jobs training="
                    f"{report.training.get('others_training')}; evidence chain "
                    f"{'verifies' if chain.ok else 'BROKEN: ' + chain.summary()} ({chain.records} records); "
                    f"{mgmt} {'back' if not back else 'NOT back'} ({why_back}); released, approved paths "
                    f"{'work again' if released_ok else 'not shown working' if released_ok is None else 'BROKEN'}")
        if back and stopped:
            notes.append(f"{mgmt} did not come back after the restart ({why_back})")
        return DrillReport(
            scenario=NAME, target=ctx.target, started=started, finished=_iso(), attempts=tuple(attempts),
            bystander=watch.result(), contained=contained, containment=text, detection_seconds=detect_s,
            containment_seconds=report.seconds if report is not None else None, notes=tuple(notes),
            evidence=tuple(evidence + (list(report.to_json()["evidence"]) if report is not None else [])),
            store=str(ctx.store.path))

    @staticmethod
    def _contain(ctx: DrillContext, policy: Policy, subject: Any, pts: Mapping[str, Executor],
                 collectors: tuple[str, ...], notes: list[str]) -> tuple[ContainmentReport | None, list[Attempt],
                                                                         float | None]:
        """Contain and prove; without a ruleset, probe the suspect's paths as they are (what gets through)."""
        try:
            report = contain(policy, subject, pts, ctx.store, target=ctx.target, collectors=(), keep=collectors,
                             workdir=ctx.workdir, capture=lambda s, p: _site.capture_path(ctx.cluster.capture(s, p), p),
                             steps=lambda: steps_of(ctx.cluster.agent_status()), snapshot_seconds=SNAPSHOT_S,
                             progress=ctx.progress)
        except ContainError as exc:
            notes.append(f"containment could not be applied: {exc.message}")
            run = verify(policy, subject, pts, ctx.store, target=ctx.target, collectors=(), keep=collectors,
                         progress=ctx.progress)
            return None, attempts_of(policy, run.results, detected_after=None), None
        # detection: from isolating to the drop counters read back with every denial attributed
        t_iso, t_probe = _at(ctx, report.contained_evidence), _at(ctx, report.probe_evidence)
        detect = round(t_probe - t_iso, 3) if t_iso is not None and t_probe is not None else None
        return report, attempts_of(policy, report.probes, detected_after=detect), detect


def _approved_again(policy: Policy, subject: Any, pts: Mapping[str, Executor], ctx: DrillContext) -> ProbeRun:
    """After release: every approved service path *from the subject's own nodes* that has an application
    greeting (the job API's among them, so the management node is shown serving again) connects and answers.

    (:func:`~ringfence.enforce.contain.verify_release` shows each approved flow from one source of its
    flow, which for a job's flows may be another rank than the one contained.)"""
    nodes = [n.name for n in policy.nodes]
    listening = gather_listening(pts, nodes)
    known = {n: v for n, v in listening.items() if v is not None}
    base = plan_probes(policy, known, [n for n in subject.nodes if n in pts])
    again = tuple(p for p in base.probes if p.expected == "allow" and p.app)
    return run_probes(policy, ProbePlan(again), pts, ctx.store, target=ctx.target, listening=listening)


SCENARIO = ManagementPlaneFailure()

__all__ = ["NAME", "SCENARIO", "ManagementPlaneFailure", "attempts_of", "choose_suspect", "is_down", "mgmt_ports"]
