"""The credential-compromise drill: a job rank's workload certificate and key are copied to ``aux``, which
uses them against storage and the job API; then the credential is revoked and reissued.

What is "the job's" credential: the TLS layer issues one SPIFFE identity per job rank
(``spiffe://<cluster>/job/<job>/rank/<n>``, :func:`ringfence.secure.layers.tls.identity_of`) and pushes
its certificate and key to that rank's node. The drill copies the victim rank's three files
(certificate, key, CA) off the victim's host and onto the attacker's, both through the site's
executors — what an intruder with a shell on the victim would do.

Played, in order (each step recorded in the evidence store):

1. *attack* — from the attacker, one request per protected service the stolen identity is entitled
   to (``GET /datasets/<job>/…`` on storage, ``POST /report`` on the job API), TLS with the stolen
   credential. What may stop it: the fabric (no approved path from the attacker: the drop counter of
   exactly that source, destination and port moves, polled while the request runs) or the service's
   TLS gate (the identity is not bound to the attacker's address: ``403`` and a gate event naming the
   identity and the address it came from). An answer from the service itself means it got through.
2. *control* — the same copy from the victim's own address must be accepted: the credential is good,
   so a refusal from the attacker was the binding's or the fabric's, and a refusal after step 3 is
   the revocation's.
3. *contain* — ``ringfence contain --identity`` itself
   (:func:`ringfence.enforce.revoke.contain_identity`): the victim's certificate is reissued with a
   new key and the old one revoked, the revocation list pushed to every sidecar and read back; then
   the old credential (the very certificate and key that were copied), replayed from the victim's
   address for each request of step 1 (where nothing but revocation can refuse it), must be refused
   by every gate, each refusal read from that gate's own event log; the time from the revocation to
   the last refusal is the revocation's latency.
4. *recovery* — the same containment's proof: the reissued certificate accepted by the gates, the
   victim's job training on (its ranks step and read shards, its sidecar on the new certificate).

The collective transport (:mod:`ringfence.secure.transport`) is a peer too, even while the job's ranks speak
gloo: the copy is presented in a ringfence-transport handshake to another rank of the victim's job, from the
victim's own address on the job's collective path (:mod:`ringfence.drill._transport`) — accepted before the
revocation (the control), refused by that rank *as revoked* after it, from the list the CA published to its
host; the time from the revocation to that refusal is measured like a gate's. A job of one rank has no peer
to ask, which the report says.

Throughout, another job (the bystander) is measured. Not covered (said in the report's notes): a service
the victim's node has no approved path to is not probed (the fabric, not the revocation, would refuse it).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ringfence.controls.interface import Verdict
from ringfence.drill import _site, _transport
from ringfence.drill.bystander import watch_bystander
from ringfence.drill.interface import Attempt, DrillContext, DrillError, DrillReport
from ringfence.enforce.apply import FABRIC
from ringfence.enforce.contain import ContainmentReport
from ringfence.enforce.probe_matrix import DeniedKey, denied_counters
from ringfence.enforce.revoke import GateCheck, TlsMesh, contain_identity, gate_said_no
from ringfence.enforce.revoke import GateRequest as Request
from ringfence.evidence import RecordKind
from ringfence.policy import Policy
from ringfence.secure import pki
from ringfence.secure.layers import tls_run
from ringfence.secure.layers.interface import LayerError
from ringfence.secure.layers.runtime import Runtime, StateStore
from ringfence.targets import ops
from ringfence.targets.interface import Executor, Site

SOURCE = "ringfence.drill.credential-compromise"
NAME = "credential-compromise"
#: the privileged request a job rank's identity may make on each lab service (what a thief wants it for)
RANK_REQUESTS: Mapping[str, tuple[str, str]] = {
    "storage-http": ("GET", "/datasets/{job}/shard-0"),
    "mgmt-api": ("POST", "/report"),
}
#: seconds one TLS request may wait for an answer (a dropped path is told by its counter, not the wait)
REQUEST_TIMEOUT = 2.0
_CRED = ("ca.pem", "cert.pem", "key.pem")
#: appends one record of the drill to the store and returns its id
_Rec = Callable[[RecordKind, str, dict[str, Any]], str]


def choose_victim(policy: Policy, attacker: str, victim: str | None = None) -> tuple[str, str]:
    """(victim node, its job): the given rank, or rank 0 of the last job the attacker is not in — so the
    first job stays a bystander. :class:`DrillError` when there is none."""
    for job in reversed(policy.jobs):
        if attacker in job.members:
            continue
        if victim is None or victim in job.members:
            return (victim or job.members[0]), job.name
    raise DrillError(f"no job rank {'named ' + victim if victim else ''} apart from {attacker} to steal from",
                     hint="a lab with two jobs: ringfence lab up --workers 4 --jobs 2")


def attack_plan(policy: Policy, services: Sequence[str], job: str, rank: int) -> tuple[list[Request], list[str]]:
    """The requests the stolen rank identity is entitled to on the TLS-protected ``services``, and what is
    skipped (a service the drill knows no privileged request for)."""
    out: list[Request] = []
    skipped: list[str] = []
    for name in services:
        svc = next((s for s in policy.services if s.name == name), None)
        if svc is None or name not in RANK_REQUESTS:
            skipped.append(f"service {name}: no request a job rank is entitled to there, so it is not attacked")
            continue
        method, path = RANK_REQUESTS[name]
        body = json.dumps({"job": job, "rank": rank, "step": 0, "note": "forged by the credential drill"}) \
            if method == "POST" else ""
        out.append(Request(name, svc.node, _site.address(policy, svc.node), svc.port_range[0], method,
                           path.format(job=job), body))
    return out, skipped


def judge_attack(res: Mapping[str, Any], dropped: Mapping[str, int], gate: Sequence[Mapping[str, Any]],
                 req: Request) -> tuple[bool | None, str]:
    """(got_through, what stopped it or what got through) for one request with the stolen credential.

    ``dropped``: drop counters that moved for this source → the service (point → packets); ``gate``: the
    service's TLS gate events for this credential from this source.
    """
    where = f"{req.service} on {req.node}"
    if res.get("outcome") == "response" and not gate_said_no(res, gate):
        return True, f"{where} answered {res.get('status')}: the stolen credential was accepted"
    if res.get("outcome") == "response":
        reason = next((str(e.get("reason")) for e in gate if e.get("result") in ("denied", "refused")), "")
        return False, f"the TLS gate of {req.node} answered {res.get('status')}: {reason or res.get('body', '')}"
    if dropped:
        return False, "dropped by policy: " + ", ".join(f"denied@{w} +{n}" for w, n in sorted(dropped.items()))
    refusal = next((e for e in gate if e.get("result") == "refused"), None)
    if refusal is not None:
        return False, f"the TLS gate of {req.node} refused it: {refusal.get('reason')}"
    return None, (f"{res.get('outcome')}: {res.get('error', '')} — no drop counter moved and no gate logged it, "
                  "so what stopped it is not known")


def _iso() -> str:
    return datetime.now(UTC).isoformat()


@dataclass(frozen=True)
class _Shot:
    """One request made and what was seen of it."""

    res: dict[str, Any]
    t0: float
    dropped: dict[str, int]
    dropped_at: float | None
    gate: list[dict[str, Any]]


def _request(site: Site, node: str, cred: Path, req: Request, watch: Mapping[str, Executor], saddr: str,
             fingerprint: str) -> _Shot:
    """Make ``req`` from ``node`` with ``cred``; meanwhile read the drop counters of ``watch`` every 0.2 s
    (the detection: the first read where this very connection's counter moved), then read the service's
    gate events for this credential from ``saddr``."""
    before = denied_counters(watch)
    t0 = time.time()
    reads: list[tuple[float, dict[str, dict[DeniedKey, int]]]] = []
    with ThreadPoolExecutor(max_workers=1) as pool:
        fut = pool.submit(tls_run.probe_request, site, node, cred, req.url, method=req.method, body=req.body,
                          timeout=REQUEST_TIMEOUT)
        while watch:
            done = fut.done()
            reads.append((time.time(), denied_counters(watch)))
            if done:
                break
            time.sleep(0.2)
        try:
            res = fut.result()
        except LayerError as exc:
            res = {"outcome": "error", "error": exc.message}
    sport = res.get("sport") if isinstance(res.get("sport"), int) else None
    dropped: dict[str, int] = {}
    dropped_at: float | None = None
    for t, counters in reads:
        dropped = _site.moved(before, counters, saddr=saddr, daddr=req.address, dport=req.port, sport=sport)
        if dropped and dropped_at is None:
            dropped_at = t
    gate = [e for e in tls_run.read_events(site, since=t0)
            if e.get("dir") == "in" and e.get("node") == req.node and e.get("peer") == saddr
            and e.get("peer_fingerprint") == fingerprint]
    return _Shot(res, t0, dropped, dropped_at, gate)


def _detection(shot: _Shot, actor: str) -> tuple[bool, str, float | None]:
    if shot.dropped_at is not None:
        return (True, f"drop counters for {actor}'s connection: "
                + ", ".join(f"denied@{w} +{n}" for w, n in sorted(shot.dropped.items())),
                round(shot.dropped_at - shot.t0, 3))
    if shot.gate:
        e = shot.gate[0]
        return (True, f"TLS gate of {e.get('node')} logged {e.get('peer_identity')} presented from {actor} "
                      f"({e.get('peer')}): {e.get('result')}", round(float(e.get("t", shot.t0)) - shot.t0, 3))
    return False, f"no drop counter and no gate event attributed it to {actor}", None


class CredentialCompromise:
    """The scenario (see the module docstring)."""

    name = NAME
    summary = "a job rank's certificate and key copied to aux and used there; revoked, reissued, refused everywhere"

    def run(self, ctx: DrillContext) -> DrillReport:
        """Play it on ``ctx``'s cluster; TLS (``encrypt enable --layer tls``) must be on."""
        started = _iso()
        policy, site = ctx.policy, ctx.cluster.site()
        attacker = str(ctx.options.get("attacker", "aux"))
        victim, job = choose_victim(policy, attacker, ctx.options.get("victim"))
        state = StateStore(site.name)
        tls = state.read().info.get("tls")
        if not tls or victim not in tls.get("nodes", {}):
            raise DrillError(f"TLS is not enabled on {site.kind} site {site.name} (no workload certificate of "
                             f"{victim} to steal)", hint="ringfence encrypt enable --layer tls --classes "
                             "storage,management,replication")
        pdir = Path(tls["pki"])
        identity = str(tls["nodes"][victim]["identity"])
        spec = policy.job(job)
        if spec is None:
            raise DrillError(f"policy {policy.cluster} has no job {job!r}")
        rank = spec.members.index(victim)
        plan, notes = attack_plan(policy, tls.get("services", []), job, rank)
        if not plan:
            raise DrillError(f"no service protected by TLS on {site.name} that a job rank is entitled to")
        pts = _site.points(ctx)
        evidence: list[str] = []

        def rec(kind: RecordKind, subject: str, data: dict[str, Any]) -> str:
            ev = str(ctx.store.append(kind, SOURCE, subject, {"target": ctx.target, **data}))
            evidence.append(ev)
            return ev

        a_addr, v_addr = _site.address(policy, attacker), _site.address(policy, victim)
        stolen = ctx.workdir / "stolen"
        stolen.mkdir(mode=0o700, exist_ok=True)
        attempts: list[Attempt] = []
        with watch_bystander(ctx.cluster, policy, [attacker, victim]) as watch:
            # 0. the theft: the three files off the victim's host, onto the attacker's, through the executors
            for name in _CRED:
                site.executor(victim).copy_from(str(pdir / "nodes" / victim / name), stolen / name)
            tls_run.push_credential(Runtime(site, state), attacker, stolen)
            fp = pki.show(stolen).fingerprint
            rec(RecordKind.ACTION, f"node {attacker}", {
                "step": "credential-copied", "identity": identity, "fingerprint": fp, "from": victim,
                "to": attacker, "path": str(stolen)})
            ctx.progress(f"{identity} ({fp[:16]}…) copied from {victim} to {attacker}")
            try:
                t_attack = time.time()
                made = self._attack(ctx, site, pts, plan, attacker, a_addr, stolen, identity, fp, rec)
                attempts += [a for a, _ in made]
                t_seen = min((t for _, t in made if t is not None), default=None)
                control = self._control(ctx, site, plan, victim, v_addr, stolen, fp, rec)
                peer = next((m for m in spec.members if m != victim), None)
                sides = None
                if peer is None:
                    notes.append(f"job {job} has one rank: no transport peer to present the copy to")
                else:
                    sides = (_transport.Side(peer, spec.members.index(peer), str(pdir / "nodes" / peer),
                                             str(pdir / "ca" / "revoked.txt")),
                             _transport.Side(victim, rank, str(stolen)))
                    tls_run.push_credential(Runtime(site, state), victim, stolen)
                    before = self._handshake(ctx, site, spec.collective_range, len(spec.members), sides, fp,
                                             "control-transport", rec)
                if not all(control.values()):
                    # the copy was not accepted even where it is bound: a refusal at the gate proved nothing
                    bad = ", ".join(s for s, ok in control.items() if not ok)
                    notes.append(f"the copy was not accepted from {victim}'s own address by {bad}: refusals of "
                                 "it there prove nothing")
                    attempts = [_unproven(a) if a.got_through is False and "TLS gate" in a.stopped_by else a
                                for a in attempts]
                ctx.progress(f"contain --identity {identity}: revoking {fp[:16]}… and reissuing {victim}'s "
                             "credential")
                report = contain_identity(policy, identity, ctx.store, mesh=TlsMesh(site, policy, state),
                                          target=ctx.target, status=ctx.cluster.agent_status,
                                          requests={victim: plan}, timeout=ctx.timeout, progress=ctx.progress)
                replay = [_replayed(ctx.policy, c, all(control.values()), report) for c in _refusals(report)]
                attempts += replay
                if sides is not None:
                    after = self._handshake(ctx, site, spec.collective_range, len(spec.members), sides, fp,
                                            "revoked-cert-transport", rec)
                    attempts.append(_transport_attempt(ctx.policy, job, sides, before, after, report,
                                                       evidence[-1]))
            finally:
                for node in (attacker, victim):  # the copies made by the drill, wherever they are
                    ops.remove_tree(site.executor(node), str(stolen))
        contained, how, seconds = _judged(report, fp)
        if report.revocation is not None:
            evidence += [e for e in report.to_json()["evidence"] if e not in evidence]
            notes += [n for n in report.revocation.notes if n not in notes]
        first = round(t_seen - t_attack, 3) if t_seen is not None else None  # first attack → first detection
        return DrillReport(
            scenario=NAME, target=ctx.target, started=started, finished=_iso(), attempts=tuple(attempts),
            bystander=watch.result(), contained=contained, containment=how,
            detection_seconds=first, containment_seconds=seconds, notes=tuple(notes), evidence=tuple(evidence),
            store=str(ctx.store.path))

    @staticmethod
    def _attack(ctx: DrillContext, site: Site, pts: Mapping[str, Executor], plan: Sequence[Request],
                attacker: str, a_addr: str, stolen: Path, identity: str, fp: str,
                rec: _Rec) -> list[tuple[Attempt, float | None]]:
        """Each request from the attacker with the stolen credential, and when it was first detected."""
        out = []
        for req in plan:
            watch = {p: pts[p] for p in (FABRIC, attacker, req.node) if p in pts}
            shot = _request(site, attacker, stolen, req, watch, a_addr, fp)
            through, why = judge_attack(shot.res, shot.dropped, shot.gate, req)
            detected, how, secs = _detection(shot, attacker)
            ev = rec(RecordKind.OBSERVATION, f"node {attacker}", {
                "step": f"stolen-cert-{req.service}", "request": f"{req.method} {req.url}", "identity": identity,
                "result": shot.res, "dropped": shot.dropped, "gate": shot.gate, "got_through": through})
            ctx.progress(f"{attacker} → {req.service} with {identity}: {why}")
            out.append((Attempt(
                f"stolen-cert-{req.service}", attacker, _site.named(ctx.policy, req.node, req.port),
                f"{req.method} {req.path} over TLS as {identity}, with its certificate and key copied to {attacker}",
                through, why, detected, how, secs, evidence=(ev,)), shot.t0 + secs if secs is not None else None))
        return out

    @staticmethod
    def _control(ctx: DrillContext, site: Site, plan: Sequence[Request], victim: str,
                 v_addr: str, stolen: Path, fp: str,
                 rec: _Rec) -> dict[str, bool]:
        """The copy, from the victim's own address, before revocation: each service must accept it."""
        out = {}
        for req in plan:
            shot = _request(site, victim, stolen, req, {}, v_addr, fp)
            status = shot.res.get("status")
            out[req.service] = (shot.res.get("outcome") == "response" and isinstance(status, int)
                                and 200 <= status < 300 and not gate_said_no(shot.res, shot.gate))
            rec(RecordKind.OBSERVATION, f"node {victim}", {
                "step": f"control-{req.service}", "request": f"{req.method} {req.url}", "result": shot.res,
                "accepted": out[req.service]})
        return out

    @staticmethod
    def _handshake(ctx: DrillContext, site: Site, ports: tuple[int, int], world: int,
                   sides: tuple[_transport.Side, _transport.Side], fp: str, step: str,
                   rec: _Rec) -> _transport.Handshake:
        """One transport handshake of the copy ``fp`` (``sides``: the honest rank, the copy's holder), recorded."""
        honest, thief = sides
        hs = _transport.handshake(site, honest, thief, world=world, ports=ports, fingerprint=fp,
                                  timeout=ctx.timeout)
        rec(RecordKind.OBSERVATION, f"node {thief.node}", {
            "step": step, "peer": honest.node, "peer_rank": honest.rank, "rank": thief.rank, "port": hs.port,
            "listener": hs.listener, "honest": hs.honest, "holder": hs.thief, "accepted": hs.accepted,
            "refused_as_revoked": hs.refused_as_revoked})
        verdict = ("accepted" if hs.accepted else "refused as revoked" if hs.refused_as_revoked
                   else f"no handshake ({hs.honest.get('error')})")
        ctx.progress(f"transport handshake of the copy from {thief.node} with {honest.node} (rank "
                     f"{honest.rank}): {verdict}")
        return hs


def _transport_attempt(policy: Policy, job: str, sides: tuple[_transport.Side, _transport.Side],
                       before: _transport.Handshake, after: _transport.Handshake, report: ContainmentReport,
                       ev: str) -> Attempt:
    """The revoked copy at the collective transport as a drill attempt: stopped only when the honest rank
    refused it *as revoked*, after accepting it before the revocation (else its refusal proves nothing)."""
    honest, thief = sides
    error = str(after.honest.get("error") or "")
    if after.accepted:
        through, why = True, f"the transport peer {honest.node} completed a handshake with the revoked copy"
    elif after.refused_as_revoked:
        through, why = False, f"refused by the transport peer {honest.node}: {error}"
    else:
        through, why = None, f"no verdict from the transport peer {honest.node}: {error or 'no outcome'}"
    if through is False and not before.accepted:
        through, why = None, (f"{why} — but the copy was not accepted before revocation either "
                              f"({before.honest.get('error')})")
    t_rev = report.revocation.revoked_at if report.revocation is not None else None
    at = after.honest.get("at")
    secs = round(float(at) - t_rev, 3) if after.refused_as_revoked and isinstance(at, int | float) \
        and t_rev is not None else None
    return Attempt("revoked-cert-transport", thief.node, _site.named(policy, honest.node, after.port),
                   f"the revoked copy presented in a ringfence-transport handshake to {honest.node}, rank "
                   f"{honest.rank} of job {job}, from {thief.node}'s own address on the job's collective path",
                   through, why, after.refused_as_revoked,
                   f"the transport peer's own refusal: {error}" if after.refused_as_revoked else "no refusal",
                   secs, evidence=(ev,))


def _refusals(report: ContainmentReport) -> tuple[GateCheck, ...]:
    return report.revocation.refusals if report.revocation is not None else ()


def _replayed(policy: Policy, c: GateCheck, control: bool, report: ContainmentReport) -> Attempt:
    """One gate's answer to the revoked copy (from ``contain --identity``'s proof) as a drill attempt; its
    detection time is the revocation's: from the revocation to that gate's refusal."""
    t_rev = report.revocation.revoked_at if report.revocation is not None else None
    secs = round(c.at - t_rev, 3) if c.at is not None and t_rev is not None else None
    through = None if c.proven is None else not c.proven
    why = c.reason
    if not control and through is False:
        through, why = None, f"{why} — but the copy was not accepted before revocation either"
    svc = next((s for s in policy.services if s.name == c.service), None)
    port = svc.port_range[0] if svc is not None else None
    return Attempt(f"revoked-cert-{c.service}", c.holder, _site.named(policy, c.gate, port),
                   f"the revoked copy replayed from {c.holder}'s own address (where only revocation can refuse it)",
                   through, why, c.at is not None, f"{c.reason} (its own log)" if c.at is not None
                   else "no gate event", secs, evidence=(c.evidence,) if c.evidence else ())


def _judged(report: ContainmentReport, fp: str) -> tuple[bool | None, str, float | None]:
    """(contained, in words, revocation → last refusal) from ``contain --identity``'s report: held only when
    its verdict is a pass *and* the certificate it revoked is the one that was copied."""
    rev = report.revocation
    if rev is None:
        return None, "contain --identity made no revocation", None
    revoked = [c.fingerprint for c in rev.certificates]
    contained = False if rev.verdict is Verdict.FAIL else (True if report.ok and fp in revoked else None)
    what = ", ".join(f"{c.fingerprint} (serial {c.serial:x}) → {c.new_fingerprint}" for c in rev.certificates)
    copied = "" if fp in revoked else f"; the copy {fp} is NOT among the certificates revoked"
    refused = sum(1 for c in rev.refusals if c.proven is True)
    within = f" within {rev.latency_s:g}s of the revocation" if rev.latency_s is not None else ""
    return contained, (
        f"contain --identity {rev.identity}: {rev.verdict.value}; revoked and reissued {what}{copied}; the copy "
        f"refused by {refused}/{len(rev.gates)} gate(s){within}; {rev.recovery.get('detail', '')}"), rev.latency_s


def _unproven(a: Attempt) -> Attempt:
    return Attempt(a.step, a.actor, a.target, a.description, None,
                   f"{a.stopped_by} — but the copy was not accepted from its own address either",
                   a.detected, a.detection, a.seconds_to_detect, a.bytes_out, a.evidence)


SCENARIO = CredentialCompromise()

__all__ = ["NAME", "RANK_REQUESTS", "SCENARIO", "CredentialCompromise", "Request", "attack_plan", "choose_victim",
           "judge_attack"]
