"""Containment of a workload identity: revoke its certificate, reissue it, prove every gate refuses the old one.

A stolen workload credential is contained where it is checked, not where its holder sits: isolating the
holder's node (what ``contain --node`` does) would stop the job that must keep training. So
``contain --identity`` (:func:`contain_identity`):

1. *resolves* the identity to the nodes holding a certificate of the site's CA for it (the exact
   identity, or every rank of a job identity) — an identity the CA never issued, or that the policy
   does not give those nodes, is refused (:class:`~ringfence.enforce.contain.ContainError`, exit 2);
2. *reissues and revokes*, make before break (:func:`ringfence.secure.layers.tls_run.reissue_tls`, the
   code ``ringfence rotate`` uses): a new key and certificate on the holder first, then the old
   certificate's fingerprint into the CA's ``revoked.txt`` and its serial into the CRL's list;
3. *publishes* the list to every sidecar through the site's executors, one node at a time, and reads
   each copy back (a node that did not get it is named, never assumed);
4. *proves*: the old credential, replayed from the holder's own address (where neither the fabric nor
   the gates' address binding refuses it), must be refused by every TLS gate the holder may reach,
   each refusal read from **that gate's own event log** with "revoked" as its reason; the time from
   the revocation to the last refusal is the measured latency. Then the reissued credential must be
   accepted by the same gates, and the holder's job must keep training (its ranks step, the holder
   reads shards, its sidecar is seen on the new certificate).

The verdict is derived (:attr:`Revocation.verdict`): ``pass`` only when every one of those facts was
recorded; a gate that could not be reached or whose log shows no refusal makes it ``unknown`` (with what
to run), an old credential accepted after revocation makes it ``fail``. A revoked certificate is never
un-revoked: there is no release — the reissued certificate is the recovery.

How it runs is the :class:`~ringfence.enforce._tls_gates.Mesh`'s business (:class:`TlsMesh`: the TLS
layer's sidecars on a site, the lab's namespaces or SSH hosts alike); unit tests pass a fake one.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ringfence.controls.interface import Verdict
from ringfence.enforce._tls_gates import GateRequest, Mesh, TlsMesh
from ringfence.enforce.contain import ContainError, ContainmentReport, Subject, training_progress
from ringfence.enforce.facts import CONTAIN_SOURCE
from ringfence.evidence import EvidenceStore, RecordKind
from ringfence.policy import Policy
from ringfence.policy.matrix import resolve
from ringfence.secure import pki
from ringfence.secure.layers.interface import LayerError
from ringfence.secure.layers.tls import identity_of
from ringfence.targets.interface import Site

#: ``<node>-<agent>`` → that agent's progress document (``{"counters": {"steps": …, "shards_read": …}}``)
StatusFn = Callable[[], Mapping[str, Mapping[str, Any]]]
Progress = Callable[[str], None]
#: what a revocation can never be: said by ``contain --identity --release``
PERMANENT = ("a revoked certificate is never un-revoked: revocation is permanent, and the recovery is the "
             "certificate `contain --identity` reissued (already on the holder)")
#: the request every gate answers for any identity: the replay needs no privilege (a revoked certificate is
#: refused at the handshake, before the request is read) and the reissued credential's check changes nothing
HEALTH = ("GET", "/healthz")
#: a job's identity (the policy's ``jobs[].identity``): it stands for every rank of the job
_JOB = re.compile(r"spiffe://[A-Za-z0-9._-]+/job/[A-Za-z0-9._-]+")


@dataclass(frozen=True)
class RevokedCert:
    """One holder's revoked certificate and the one reissued in its place."""

    node: str
    identity: str
    address: str
    fingerprint: str
    serial: int
    new_fingerprint: str
    revoked_at: float | None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (the serial in hex, as the CRL lists it)."""
        return {"node": self.node, "identity": self.identity, "address": self.address,
                "fingerprint": self.fingerprint, "serial": f"{self.serial:x}", "new_fingerprint": self.new_fingerprint,
                "revoked_at": self.revoked_at}


@dataclass(frozen=True)
class GateCheck:
    """One gate's answer to one credential presented from a holder's own address, as its own log tells it.

    ``proven``: for the ``revoked`` credential True = refused as revoked, False = accepted (it got through);
    for the ``reissued`` one True = accepted, False = refused; None = the log does not tell.
    """

    holder: str
    gate: str
    service: str
    request: str
    credential: str  # "revoked" | "reissued"
    fingerprint: str
    proven: bool | None
    reason: str
    at: float | None  # the gate's own event time (its host's clock)
    tries: int
    evidence: str | None = None

    @property
    def key(self) -> str:
        """``worker-2 → storage-http@storage``."""
        return f"{self.holder} → {self.service}@{self.gate}"

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"holder": self.holder, "gate": self.gate, "service": self.service, "request": self.request,
                "credential": self.credential, "fingerprint": self.fingerprint, "proven": self.proven,
                "reason": self.reason, "at": self.at, "tries": self.tries, "evidence": self.evidence}


@dataclass(frozen=True)
class Revocation:
    """What ``contain --identity`` did and proved; the verdict is derived from these facts alone."""

    identity: str
    certificates: tuple[RevokedCert, ...]
    in_ca: bool | None  # every fingerprint in the CA's revoked.txt and every serial in its CRL list
    published: Mapping[str, bool | None]  # sidecar node → its copy of the list names every revoked fingerprint
    gates: tuple[str, ...]  # GateCheck keys that must each refuse the old credential
    refusals: tuple[GateCheck, ...]
    accepted: tuple[GateCheck, ...]
    recovery: Mapping[str, Any]  # {"required", "ok", "detail", …}
    notes: tuple[str, ...] = ()
    published_at: float | None = None  # epoch seconds the last sidecar's copy was read back

    @property
    def publish_s(self) -> float | None:
        """Revocation → the list read back from every sidecar (the push's share of the latency)."""
        if self.revoked_at is None or self.published_at is None:
            return None
        return round(self.published_at - self.revoked_at, 3)

    @property
    def revoked_at(self) -> float | None:
        """When the CA revoked the first of the certificates (epoch seconds)."""
        times = [c.revoked_at for c in self.certificates if c.revoked_at is not None]
        return min(times) if times else None

    @property
    def latency_s(self) -> float | None:
        """Revocation → the last gate's refusal, when every planned gate refused (None otherwise)."""
        at = [r.at for r in self.refusals if r.proven is True and r.at is not None]
        if self.revoked_at is None or not self.gates or len(at) != len(self.refusals) or not self._covered():
            return None
        return round(max(at) - self.revoked_at, 3)

    def _covered(self) -> bool:
        return set(self.gates) <= {r.key for r in self.refusals if r.proven is True}

    @property
    def verdict(self) -> Verdict:
        """``fail`` on any fact against it, ``pass`` only with every fact recorded for it, else ``unknown``."""
        if self._failures():
            return Verdict.FAIL
        return Verdict.UNKNOWN if self._gaps() else Verdict.PASS

    def _failures(self) -> list[str]:
        out = []
        if self.in_ca is False:
            out.append("the CA's revocation list does not name every revoked certificate")
        out += [f"{n}'s copy of the revocation list lacks it" for n, ok in sorted(self.published.items())
                if ok is False]
        out += [f"{r.key} accepted the revoked certificate: {r.reason}" for r in self.refusals if r.proven is False]
        out += [f"{r.key} refused the reissued certificate: {r.reason}" for r in self.accepted if r.proven is False]
        if self.recovery.get("ok") is False and self.recovery.get("required") is not False:
            out.append(f"no recovery: {self.recovery.get('detail', '')}")
        return out

    def _gaps(self) -> list[str]:
        out = []
        if not self.certificates:
            out.append("no certificate was revoked")
        if self.in_ca is not True and self.in_ca is not False:
            out.append("the CA's lists were not read back")
        out += [f"{n}'s copy of the list could not be read back" for n, ok in sorted(self.published.items())
                if ok is None]
        if not self.published:
            out.append("the list was pushed to no sidecar")
        if not self.gates:
            out.append("no gate the holder may reach was planned")
        done = {r.key for r in self.refusals if r.proven is True}
        out += [f"{g}: no refusal in that gate's log" for g in self.gates if g not in done]
        out += [f"{r.key}: {r.reason}" for r in self.refusals if r.proven is None]
        if not self.accepted:
            out.append("the reissued certificate was not presented to any gate")
        out += [f"{r.key} (reissued): {r.reason}" for r in self.accepted if r.proven is None]
        if self.recovery.get("required") is not False and self.recovery.get("ok") is not True \
                and self.recovery.get("ok") is not False:
            out.append(f"recovery not shown: {self.recovery.get('detail', 'not measured')}")
        return out

    def why(self) -> str:
        """One line: what decided the verdict, and what to run when it is not a pass."""
        bad = self._failures() or self._gaps()
        if not bad:
            return (f"revoked, refused by {len(self.gates)} gate(s) within {self.latency_s}s, the reissued "
                    "certificate accepted")
        return "; ".join(bad) + (
            " — run `ringfence verify keys` on the site to read the gates' logs, and `ringfence drill run "
            "credential-compromise` to replay a stolen copy")

    def to_json(self) -> dict[str, Any]:
        """The ``revocation`` part of the containment facts (``ringfence-containment/1``)."""
        return {"identity": self.identity, "verdict": self.verdict.value, "why": self.why(),
                "certificates": [c.to_json() for c in self.certificates], "in_ca": self.in_ca,
                "published": dict(self.published), "gates": list(self.gates),
                "refusals": [r.to_json() for r in self.refusals], "accepted": [r.to_json() for r in self.accepted],
                "revoked_at": self.revoked_at, "latency_s": self.latency_s, "published_at": self.published_at,
                "publish_s": self.publish_s, "recovery": dict(self.recovery),
                "notes": list(self.notes)}


# ------------------------------------------------------------------------------------------ resolve and plan


def holders(policy: Policy, tls: Mapping[str, Any] | None, identity: str) -> tuple[str, ...]:
    """The nodes holding a certificate of the site's CA for ``identity`` (exact, or every rank of a job
    identity); :class:`ContainError` when TLS is off, the CA issued none, or the policy disagrees."""
    if not _JOB.fullmatch(identity):
        pki.parse_identity(identity)  # a malformed identity: InputError naming it
    if not tls or not tls.get("nodes"):
        raise ContainError(f"no workload certificate is issued on this site, so {identity} has nothing to revoke "
                           "(TLS is not enabled)", hint="ringfence encrypt enable --layer tls --classes "
                           "storage,management,replication; to isolate nodes instead: contain --node N / --job J")
    issued: Mapping[str, Mapping[str, Any]] = tls["nodes"]
    exact = [n for n, v in issued.items() if v.get("identity") == identity]
    ranks = [n for n, v in issued.items() if str(v.get("identity", "")).startswith(identity.rstrip("/") + "/rank/")]
    found = tuple(sorted(exact or ranks))
    if not found:
        known = sorted({str(v.get("identity")) for v in issued.values()})
        raise ContainError(f"identity {identity!r} holds no certificate of this site's CA",
                           hint=f"issued: {', '.join(known)}")
    for node in found:
        if policy.node(node) is None or identity_of(policy, node) != issued[node].get("identity"):
            raise ContainError(f"{node} holds a certificate for {issued[node].get('identity')}, but policy "
                               f"{policy.cluster} does not give it that identity",
                               hint="re-run `ringfence encrypt enable --layer tls` after changing the policy")
    return found


def gate_plan(policy: Policy, services: Sequence[str], holder: str) -> tuple[list[GateRequest], list[str]]:
    """``GET /healthz`` at each TLS-protected service ``holder`` has an approved path to, and what is not
    probed: its own gate, and gates the fabric would refuse it at before the revocation could."""
    m = resolve(policy)
    mine = set(m.flows_from(holder))
    out: list[GateRequest] = []
    skipped: list[str] = []
    for name in services:
        svc = next((s for s in policy.services if s.name == name), None)
        spec = policy.node(svc.node) if svc is not None else None
        if svc is None or spec is None or not spec.addresses:
            skipped.append(f"{name}: not a service of policy {policy.cluster}, so its gate is not probed")
            continue
        if svc.node == holder:
            skipped.append(f"{name} on {holder}: the holder's own gate (its own clients do not cross it)")
            continue
        port = svc.port_range[0]
        if not any("tcp" in f.protos and f.ports[0] <= port <= f.ports[1] for f in mine & set(m.flows_to(svc.node))):
            skipped.append(f"{name} on {svc.node}: {holder} has no approved path to it, so the fabric, not the "
                           "revocation, would refuse the replay there; not probed")
            continue
        out.append(GateRequest(name, svc.node, spec.addresses[0], port, *HEALTH))
    return out, skipped


# ------------------------------------------------------------------------------------------ judging one answer


def gate_said_no(res: Mapping[str, Any], gate: Sequence[Mapping[str, Any]]) -> bool:
    """The answer is the TLS gate's refusal, not the service's: the gate logged a denial or refusal of this
    credential, or its reply says so (the reply's body comes back truncated, so the log decides first)."""
    return (any(e.get("result") in ("denied", "refused") for e in gate)
            or '"by": "ringfence-tls"' in str(res.get("body", "")))


def judge_revoked(res: Mapping[str, Any], gate: Sequence[Mapping[str, Any]],
                  req: GateRequest) -> tuple[bool | None, str]:
    """(got_through, why) for the revoked credential replayed from its bound address: refused only counts when
    the service's gate says the certificate is revoked."""
    if res.get("outcome") == "response" and not gate_said_no(res, gate):
        return True, f"{req.service} on {req.node} still accepted the revoked credential ({res.get('status')})"
    revoked = next((e for e in gate if e.get("result") == "refused" and "revoked" in str(e.get("reason", ""))), None)
    if revoked is not None:
        return False, f"the TLS gate of {req.node} refused it: {revoked.get('reason')}"
    return None, f"{res.get('outcome')}: no gate said the certificate is revoked ({res.get('error', '')})"


def judge_reissued(res: Mapping[str, Any], gate: Sequence[Mapping[str, Any]],
                   req: GateRequest) -> tuple[bool | None, str]:
    """(accepted, why) for the reissued credential from its holder: the gate's own log must show it passed
    the certificate check (allowed, or denied by a rule — never refused, never by the address binding)."""
    refused = next((e for e in gate if e.get("result") == "refused"), None)
    if refused is not None:
        return False, f"the TLS gate of {req.node} refused it: {refused.get('reason')}"
    bound = next((e for e in gate if str(e.get("reason", "")).startswith("address binding")), None)
    if bound is not None:
        return False, f"the TLS gate of {req.node} refused it from its holder's own address: {bound.get('reason')}"
    passed = next((e for e in gate if e.get("result") in ("allowed", "denied")), None)
    if passed is not None and res.get("outcome") == "response":
        return True, f"the TLS gate of {req.node} accepted it ({passed.get('result')}, {res.get('status')})"
    return None, (f"{res.get('outcome')}: no event of the reissued certificate in the gate's log "
                  f"({res.get('error', '')})")


def _address(policy: Policy, node: str) -> str:
    spec = policy.node(node)
    return spec.addresses[0] if spec is not None and spec.addresses else ""


def _mine(events: Sequence[Mapping[str, Any]], req: GateRequest, peer: str, fp: str) -> list[dict[str, Any]]:
    return [dict(e) for e in events if e.get("dir") == "in" and e.get("node") == req.node and e.get("peer") == peer
            and e.get("peer_fingerprint") == fp]


# ------------------------------------------------------------------------------------------ the containment


@dataclass
class _Run:
    """What one containment shares between its steps."""

    mesh: Mesh
    store: EvidenceStore
    target: str
    timeout: float
    say: Progress
    evidence: list[str]

    def rec(self, kind: RecordKind, subject: str, data: dict[str, Any]) -> str:
        ev = str(self.store.append(kind, CONTAIN_SOURCE, subject, {"target": self.target, **data}))
        self.evidence.append(ev)
        return ev

    def present(self, cert: RevokedCert, cert_dir: Path, req: GateRequest,
                credential: str) -> tuple[GateCheck, dict[str, Any]]:
        """Present ``credential`` from the holder's address until the gate's log decides (or the wait ends);
        the check, and what to record of it (recorded by :meth:`present_all`, one thread appending)."""
        revoked = credential == "revoked"
        fp = cert.fingerprint if revoked else cert.new_fingerprint
        judge = judge_revoked if revoked else judge_reissued
        deadline = time.monotonic() + self.timeout
        tries = 0
        while True:
            tries += 1
            t0 = time.time()
            res = self.mesh.request(cert.node, cert_dir, req, min(5.0, self.timeout))
            for settle in (0.0, 0.3):  # a gate logs an allowed request after its answer: read its log twice
                time.sleep(settle)
                try:
                    gate = _mine(self.mesh.events(since=t0 - 1.0), req, cert.address, fp)
                except LayerError as exc:  # the gate's log cannot be read: nothing is proven there
                    gate, res = [], {**res, "error": f"{res.get('error', '')} gate log unreadable: {exc.message}"}
                verdict, why = judge(res, gate, req)
                if verdict is not None:
                    break
            # the old credential accepted before the list reached the gate: tried again; anything the log
            # cannot tell: tried again; a decision of the log: final
            decided = verdict is not None and not (revoked and verdict is True)
            if decided or time.monotonic() >= deadline:
                break
            time.sleep(0.2)
        proven = (not verdict) if revoked and verdict is not None else verdict
        # the time of the gate's own decision: its refusal of the old certificate, its event of the new one
        event = next((e for e in gate if e.get("result") == "refused" or not revoked), None)
        at = float(event["t"]) if event is not None and proven is True and "t" in event else None
        data = {"step": f"{credential}-cert-{req.service}", "identity": cert.identity, "fingerprint": fp,
                "request": f"{req.method} {req.url}", "result": res, "gate": gate, "proven": proven, "tries": tries}
        return GateCheck(cert.node, req.node, req.service, f"{req.method} {req.url}", credential, fp, proven, why,
                         at, tries), data

    def present_all(self, shots: Sequence[tuple[RevokedCert, Path, GateRequest, str]]) -> list[GateCheck]:
        """Every shot at once (one client per gate: the latency measured is the slowest gate's, not the sum
        of the clients' start-up), then each recorded, in order."""
        if not shots:
            return []
        with ThreadPoolExecutor(max_workers=min(8, len(shots))) as pool:
            done = list(pool.map(lambda shot: self.present(*shot), shots))
        out = []
        for (cert, _, req, credential), (check, data) in zip(shots, done, strict=True):
            ev = self.rec(RecordKind.OBSERVATION, f"node {cert.node}", data)
            self.say(f"{credential} certificate of {cert.node} → {req.service}: {check.reason}")
            out.append(dataclasses.replace(check, evidence=ev))
        return out


def _recovery(run: _Run, policy: Policy, certs: Sequence[RevokedCert], status: StatusFn | None,
              before: Mapping[str, Mapping[str, Any]], since: float, min_steps: int) -> dict[str, Any]:
    """Whether the holders' jobs kept training on the reissued certificates: every rank of each steps, each
    holder reads shards (where its counters count them), and its sidecar is seen on the new certificate."""
    jobs = [j for j in policy.jobs if any(c.node in j.members for c in certs)]
    if not jobs:
        return {"required": False, "ok": None, "detail": "no job rank holds it: nothing trains on it, the reissued "
                "certificate accepted by the gates is the recovery"}
    if status is None:
        return {"required": True, "ok": None, "detail": "no progress counters from this target"}
    members = [m for j in jobs for m in j.members]

    def counters() -> dict[str, Mapping[str, Any]]:
        st = status()
        return {m: st[f"{m}-worker"].get("counters", {}) for m in members if f"{m}-worker" in st}

    def moved(now: Mapping[str, Mapping[str, Any]], m: str, key: str) -> int:
        return int(now[m].get(key, 0)) - int(before[m].get(key, 0))

    deadline = time.monotonic() + run.timeout
    while True:
        now = counters()
        try:
            seen = run.mesh.events(since=since)
        except LayerError:
            seen = []
        on_new = {c.node: any(e.get("dir") == "out" and e.get("node") == c.node and e.get("result") == "allowed"
                              and e.get("own_fingerprint") == c.new_fingerprint for e in seen) for c in certs}
        unseen = [m for m in members if m not in now or m not in before]
        steps = {m: moved(now, m, "steps") for m in members if m not in unseen}
        # shard reads go through the holder's sidecar: counted where its progress counts them
        shards = {c.node: moved(now, c.node, "shards_read") for c in certs
                  if c.node in steps and "shards_read" in now[c.node]}
        ok = (all(v >= min_steps for v in steps.values()) and all(v > 0 for v in shards.values())
              and all(on_new.values()))
        if (ok and not unseen) or time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    uncounted = [c.node for c in certs if c.node not in shards]
    if unseen:
        return {"required": True, "ok": None, "steps": steps, "detail": f"progress unreadable at {', '.join(unseen)}"}
    detail = (f"job(s) {', '.join(j.name for j in jobs)} {'kept' if ok else 'did NOT keep'} training on the "
              f"reissued credential: steps {steps}, shards read {shards}, sidecar on the new certificate "
              f"{on_new}" + (f"; {', '.join(uncounted)} count(s) no shard reads" if uncounted else ""))
    return {"required": True, "ok": ok, "steps": steps, "shards_read": shards, "on_new_certificate": on_new,
            "detail": detail}


def contain_identity(policy: Policy, identity: str, store: EvidenceStore, *, mesh: Mesh, target: str,
                     status: StatusFn | None = None, requests: Mapping[str, Sequence[GateRequest]] | None = None,
                     timeout: float = 20.0, progress: Progress | None = None, approved_by: str | None = None,
                     ticket: str | None = None, min_steps: int = 2) -> ContainmentReport:
    """Revoke ``identity``'s certificates, reissue them, publish the list, prove every gate refuses the old
    and accepts the new, and that the holders' jobs keep training (see the module docstring).

    ``requests``: holder node → the requests to replay there (default: :func:`gate_plan`'s ``GET /healthz``
    at each gate the holder may reach); ``status``: the agents' progress (``agent_status``).
    """
    say = progress or (lambda _m: None)
    tls = mesh.info()
    nodes = holders(policy, tls, identity)
    assert tls is not None  # holders() refused otherwise
    notes: list[str] = []
    plans: dict[str, list[GateRequest]] = {}
    for node in nodes:
        if requests is not None:
            plans[node] = list(requests.get(node, ()))
        else:
            plans[node], skipped = gate_plan(policy, list(tls.get("services", [])), node)
            notes += skipped
    addrs = {n: _address(policy, n) for n in nodes}
    subject = Subject("identity", identity, nodes, tuple(a for a in addrs.values() if a))
    run = _Run(mesh, store, target, timeout, say, [])
    before = {k.removesuffix("-worker"): v.get("counters", {}) for k, v in (status() if status else {}).items()
              if k.endswith("-worker")}
    steps_before = {n: int(c.get("steps", 0)) for n, c in before.items()}
    say(f"reissuing {', '.join(nodes)}'s certificate(s) for {identity}, then revoking the old one(s)")
    rotated = list(mesh.reissue(nodes, store))
    notes += [f"{r.node} could not be given its reissued certificate ({r.unpushed}); the old one is revoked "
              "regardless — a stolen key must not stay valid while its holder is unreachable — and that node's "
              "services stay refused until `ringfence encrypt rotate --layer tls --nodes "
              f"{r.node}` reaches it" for r in rotated if r.unpushed is not None]
    certs = tuple(RevokedCert(r.node, r.identity, addrs.get(r.node, ""), r.old_fingerprint, r.old_serial,
                              r.new_fingerprint, r.revoked_at) for r in rotated)
    fps, serials = mesh.ca_lists()
    in_ca = all(c.fingerprint in fps and c.serial in serials for c in certs) if certs else None
    act = run.rec(RecordKind.ACTION, f"identity {identity}", {
        "action": "revoke", "identity": identity, "certificates": [c.to_json() for c in certs],
        "approved_by": approved_by, "ticket": ticket})
    published: dict[str, bool | None] = {}
    for node in sorted(tls.get("nodes", {})):
        err = mesh.publish(node)
        copy = mesh.published(node)
        published[node] = None if copy is None else all(c.fingerprint in copy for c in certs)
        if err is not None:
            notes.append(f"the revocation list could not be pushed to {node}: {err}")
    published_at = time.time()
    run.rec(RecordKind.ACTION, f"identity {identity}", {"action": "publish-revocations", "published": published})
    refusals: list[GateCheck] = []
    accepted: list[GateCheck] = []
    by_node = {r.node: r for r in rotated}
    try:
        refusals = run.present_all([(c, by_node[c.node].retired, req, "revoked") for c in certs
                                    for req in plans.get(c.node, ())])
        accepted = run.present_all([(c, Path(tls["pki"]) / "nodes" / c.node,
                                     GateRequest(req.service, req.node, req.address, req.port, *HEALTH), "reissued")
                                    for c in certs for req in plans.get(c.node, ())])
    finally:
        for r in rotated:  # the old key is gone once the refusals are proven (or could not be)
            mesh.forget(r)
    since = min((c.revoked_at for c in certs if c.revoked_at is not None), default=time.time())
    recovery = _recovery(run, policy, certs, status, before, since, min_steps)
    run.rec(RecordKind.OBSERVATION, f"identity {identity}", {"step": "recovery", **recovery})
    watch = [m for j in policy.jobs if not set(j.members) & set(nodes) for m in j.members]
    training: dict[str, Any] = {"others_training": None, "reason": "no step counters from this target"}
    if status is not None:
        def steps() -> dict[str, int]:
            st = status()
            return {k.removesuffix("-worker"): int(v.get("counters", {}).get("steps", 0)) for k, v in st.items()
                    if k.endswith("-worker")}
        training = training_progress(steps, watch, [], steps_before, wait=timeout, min_steps=min_steps)
    notes.append("collective transport peers (ringfence.secure.transport) re-read the same list at each "
                 "handshake: a group formed after this refuses the revoked certificate; links already up are not "
                 "re-authenticated, and ranks speaking plain gloo check no certificate at all")
    gates = tuple(GateCheck(n, r.node, r.service, "", "revoked", "", None, "", None, 0).key
                  for n in nodes for r in plans.get(n, ()))
    rev = Revocation(identity, certs, in_ca, published, gates, tuple(refusals), tuple(accepted), recovery,
                     tuple(notes), published_at)
    report = ContainmentReport(target, subject, None, act, (), None, {}, training, seconds=rev.latency_s,
                               notes=tuple(notes), revocation=rev)
    store.append(RecordKind.OBSERVATION, CONTAIN_SOURCE, subject.describe(),
                 {k: v for k, v in report.to_json().items() if k not in ("probes", "release_probes")})
    say(f"{identity}: {rev.verdict.value} — {rev.why()}")
    return report


def contain_identity_on(site: Site, policy: Policy, identity: str, store: EvidenceStore, *, target: str,
                        **kwargs: Any) -> ContainmentReport:
    """:func:`contain_identity` on ``site``'s TLS sidecars (:class:`TlsMesh`)."""
    return contain_identity(policy, identity, store, mesh=TlsMesh(site, policy), target=target, **kwargs)


__all__ = ["HEALTH", "PERMANENT", "GateCheck", "GateRequest", "Mesh", "RevokedCert", "Revocation", "StatusFn",
           "TlsMesh", "contain_identity", "contain_identity_on", "gate_plan", "gate_said_no", "holders",
           "judge_reissued", "judge_revoked"]
