"""Drill ``malicious-job``: a second job scans the first job's ranks, reads its dataset objects, tries the
management sshd — then is detected by its identity, contained as a job, and released.

What is really done, from the suspect job's first rank, through the site's executors:

* **scan-ranks** — connects to every port the bystander job's ranks listen on in its collective range (up
  to :data:`SCAN_PER_RANK` per rank, the rendezvous first): stopped only when each connection was dropped
  by policy (its own ``denied`` element moved), as a deny probe is proven;
* **read-dataset** — ``GET /datasets/<bystander job>/shard-0`` from the object store. The suspect job may
  reach the object store for its own data, so no network rule can tell the objects apart: what stops it,
  if anything, is the store (the lab's object server serves a job's prefix to that job's ranks only; a TLS
  gate decides by the certificate's job identity). An answer ``200`` is an attack that got through; a
  ``403`` is a refusal, named; anything else proves nothing;
* **ssh-mgmt** — opens the management sshd (an administrative service the policy gives only to the jump
  host): stopped when dropped by policy, as above.

Detection: the scan and the ssh attempt by the firewall's own decisions (NFLOG via ulogd at the fabric
and the nodes involved) for exactly those connections, attributed to the job through the inventory; the
dataset read by the object server's refusal log. Containment: ``contain --job`` of the suspect job (two
points, proven, released). The bystander job is measured throughout (its ranks' steps).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from ringfence.drill._attack import (
    DETECTION_NOTE,
    Conn,
    Detection,
    Outcome,
    attack,
    await_detection,
    combine,
    enforcement_points,
    judge_connection,
    look_for,
    moved,
    record_attempt,
    telemetry_dirs,
    who,
)
from ringfence.drill._respond import respond
from ringfence.drill.bystander import bystander_job, watch_bystander
from ringfence.drill.interface import Attempt, DrillContext, DrillError, DrillReport
from ringfence.enforce.apply import FABRIC
from ringfence.enforce.probe_matrix import denied_counters
from ringfence.marks import LOCAL_PROXY_BYPASS
from ringfence.observe.flows.events.deploy import OBJECT_LOG
from ringfence.policy import Policy
from ringfence.policy.model import Job
from ringfence.targets.ops import listening_ports

#: ports of each bystander rank the scan connects to (the lowest of its collective range: the rendezvous first)
SCAN_PER_RANK = 4
_READ_LOG = '[ -e "$0" ] || exit 3; tail -c 1048576 "$0"'


def _jobs(policy: Policy, suspect: str | None) -> tuple[Job, Job]:
    """(suspect job, bystander job): the named one or the last job, and the first job apart from it."""
    if len(policy.jobs) < 2:
        raise DrillError(f"policy {policy.cluster} has {len(policy.jobs)} job(s): a malicious job needs another "
                         "job to attack", hint="ringfence lab up --workers 4 --jobs 2")
    actor = policy.job(suspect) if suspect else policy.jobs[-1]
    if actor is None:
        raise DrillError(f"no job {suspect!r} in policy {policy.cluster}",
                         hint=f"jobs: {', '.join(j.name for j in policy.jobs)}")
    name, _ = bystander_job(policy, actor.members)
    victim = policy.job(name)
    assert victim is not None  # bystander_job returns a job of this policy
    return actor, victim


def storage_service(policy: Policy) -> tuple[str, str, int]:
    """(node, address, port) of the object store: the first storage-class HTTP service of the policy."""
    for s in policy.services:
        node = policy.node(s.node)
        if s.traffic_class.value == "storage" and s.application in ("http", "https") and node is not None:
            return s.node, node.addresses[0], s.port_range[0]
    raise DrillError(f"policy {policy.cluster} names no storage HTTP service: there is no dataset to read")


def admin_ssh(policy: Policy) -> tuple[str, str, int]:
    """(node, address, port) of the management sshd: the first administrative SSH service of the policy."""
    for s in policy.services:
        node = policy.node(s.node)
        if s.admin and s.application == "ssh" and node is not None:
            return s.node, node.addresses[0], s.port_range[0]
    raise DrillError(f"policy {policy.cluster} names no administrative sshd to try")


def scan_targets(policy: Policy, victim: Job, listening: Mapping[str, frozenset[int] | None]) -> list[Conn]:
    """The scan: each bystander rank's listening ports in its collective range, lowest first."""
    lo, hi = victim.collective_range
    out: list[Conn] = []
    for m in victim.members:
        node = policy.node(m)
        ports = sorted(p for p in (listening.get(m) or ()) if lo <= p <= hi)[:SCAN_PER_RANK]
        if node is not None:
            out += [Conn(m, node.addresses[0], p, mark=LOCAL_PROXY_BYPASS) for p in ports]
    return out


def judge_read(o: Outcome, grew: Mapping[str, int], store_node: str) -> tuple[bool | None, str]:
    """(got through?, why) for the dataset read: 200 got through, 403 was refused (by whom, from its answer),
    a connection dropped by policy was stopped; anything else proves nothing."""
    if o.outcome == "connected":
        status = o.status
        body = o.reply.split("\r\n\r\n", 1)[1][:160] if "\r\n\r\n" in o.reply else ""
        if status == 200:
            return True, f"{store_node} served {o.conn.path} to the suspect (HTTP 200: {body[:60]!r}…)"
        if status == 403:
            by = "the object server" if "not served to" in body else "the store's gate"
            return False, f"refused by {by} on {store_node}: HTTP 403 {body.strip()}"
        return None, f"{store_node} answered {o.reply.splitlines()[0][:80] if o.reply else 'nothing'!r}: " \
                     "neither served nor refused"
    return judge_connection(o, True, grew)


def refusals(rows: Sequence[Mapping[str, Any]], actor_addresses: Sequence[str], victim: str,
             since: float) -> list[Mapping[str, Any]]:
    """Records of the object server's refusal log for a request of ``victim``'s objects by one of the actor's
    addresses, at or after ``since`` (epoch seconds)."""
    return [r for r in rows if r.get("peer") in actor_addresses and r.get("job") == victim
            and isinstance(r.get("time"), int | float) and float(r["time"]) >= since and r.get("result") == "refused"]


def parse_object_log(text: str) -> list[dict[str, Any]]:
    """The refusal log's JSON lines (a torn or foreign line is skipped: the log is read while it is written)."""
    out = []
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


def gate_denials(events: Sequence[Mapping[str, Any]], store_node: str, actor_addresses: Sequence[str],
                 victim: str, since: float) -> list[Mapping[str, Any]]:
    """Events of the store's TLS gate (``ringfence.secure.layers``' sidecar log) that refused one of the actor's
    addresses a request under ``victim``'s prefix, at or after ``since`` — in time order."""
    return sorted((e for e in events if e.get("dir") == "in" and e.get("node") == store_node
                   and e.get("result") in ("denied", "refused") and e.get("peer") in actor_addresses
                   and str(e.get("path", "")).startswith((f"/datasets/{victim}/", f"/checkpoints/{victim}/"))
                   and isinstance(e.get("t"), int | float) and float(e["t"]) >= since),
                  key=lambda e: float(e["t"]))


def _gate_events(ctx: DrillContext, since: float) -> list[dict[str, Any]]:
    """The TLS sidecars' connection events since ``since`` (none where the TLS layer is not enabled)."""
    from ringfence.secure.layers import tls_run

    return tls_run.read_events(ctx.cluster.site(), since=since)


def _read_detection(ctx: DrillContext, points: Mapping[str, Any], store_node: str, actor: Job, victim: Job,
                    started: float, bound: float) -> Detection:
    """The dataset read seen refused by the store: in the object server's refusal log or, with the TLS layer on,
    in its TLS gate's log — polled until found or ``bound`` seconds pass."""
    addresses = [a for m in actor.members if (n := ctx.policy.node(m)) is not None for a in n.addresses]
    path = f"{telemetry_dirs(ctx, [store_node])[store_node]}/{OBJECT_LOG}"
    deadline = time.monotonic() + bound

    def attributed(peer: str) -> str:
        node = next((m for m in actor.members if (n := ctx.policy.node(m)) is not None and peer in n.addresses),
                    peer)
        return who(ctx.policy, node)

    while True:
        res = points[store_node].run(["sh", "-c", _READ_LOG, path], timeout=30)
        hits = refusals(parse_object_log(res.stdout.decode(errors="replace")), addresses, victim.name, started - 1) \
            if res.returncode == 0 else []
        gate = gate_denials(_gate_events(ctx, started - 1), store_node, addresses, victim.name, started - 1)
        seen_at = time.time()
        if hits:
            first = hits[0]
            at = datetime.fromtimestamp(float(first["time"]), UTC).isoformat()
            return Detection(True, round(seen_at - started, 3), at, store_node, len(hits),
                             f"{len(hits)} refusal(s) in {store_node}'s object log ({first['method']} {first['path']},"
                             f" certificate identity {first.get('identity', '-')}), attributed to "
                             f"{attributed(str(first['peer']))} by the inventory; logged {at}")
        if gate:
            first = gate[0]
            at = datetime.fromtimestamp(float(first["t"]), UTC).isoformat()
            return Detection(True, round(seen_at - started, 3), at, store_node, len(gate),
                             f"{len(gate)} denial(s) by {store_node}'s TLS gate ({first.get('method')} "
                             f"{first.get('path')}: {first.get('reason', '')}), certificate identity "
                             f"{first.get('peer_identity', '-')}, attributed to {attributed(str(first['peer']))} by "
                             f"the inventory; logged {at}")
        if time.monotonic() > deadline:
            kept = "no object refusal log" if res.returncode == 3 else f"no refusal of {victim.name}'s objects"
            return Detection(False, None, "", "", 0, f"{kept} at {path} and no TLS gate denial within {bound:g}s")
        time.sleep(0.3)  # the detector's poll interval, bounded by ``bound``


class MaliciousJob:
    """The malicious-job scenario (see the module docstring)."""

    name = "malicious-job"
    summary = "a second job scans the first job's ranks, reads its dataset, tries the management sshd; contained"

    def run(self, ctx: DrillContext) -> DrillReport:
        """Play it on ``ctx``'s cluster (see the module docstring)."""
        started = datetime.now(UTC).isoformat()
        actor, victim = _jobs(ctx.policy, ctx.options.get("job"))
        points = enforcement_points(ctx)
        src = actor.members[0]
        if src not in points:
            raise DrillError(f"no executor reaches {src}, the suspect job's first rank")
        src_addr = ctx.cluster.site().address(src)
        store_node, store_addr, store_port = storage_service(ctx.policy)
        ssh_node, ssh_addr, ssh_port = admin_ssh(ctx.policy)
        listening = {m: listening_ports(points[m]) for m in (*victim.members, ssh_node) if m in points}
        scan = scan_targets(ctx.policy, victim, listening)
        read = Conn(store_node, store_addr, store_port, "GET", f"/datasets/{victim.name}/shard-0", first_line=False)
        ssh = Conn(ssh_node, ssh_addr, ssh_port, mark=LOCAL_PROXY_BYPASS)
        notes = [
            f"the suspect is job {actor.name} (acting from {who(ctx.policy, src)}); the bystander is job "
            f"{victim.name}",
            "the bystander is measured by its ranks' steps (longest stall against the budget); its busbw is not "
            "measured by this drill",
            "attribution is by the static inventory (the policy's job members), not the scheduler's allocation",
            DETECTION_NOTE,
            f"the dataset read can only be stopped by the object store: {actor.name} may reach "
            f"{store_node}:{store_port} for its own data, and no network rule can tell objects apart",
        ]
        if ctx.options.get("lab") is None:
            notes.append(f"the read's detection needs the object store's refusal log at {OBJECT_LOG} in "
                         f"{store_node}'s telemetry directory; a store that keeps none leaves it undetected")
        bound = min(ctx.timeout, 10.0)
        with watch_bystander(ctx.cluster, ctx.policy, actor.members) as watch:
            ctx.progress(f"{src} scans {len(scan)} port(s) of {victim.name}, reads {read.path}, tries "
                         f"{ssh.describe()}")
            before = denied_counters(points)
            t_attack = time.time()
            outcomes = attack(points[src], [*scan, read, ssh])
            after = denied_counters(points)
            scan_o, read_o, ssh_o = outcomes[:len(scan)], outcomes[len(scan)], outcomes[-1]

            def grew(o: Outcome) -> dict[str, int]:
                return moved(before, after, (src_addr, o.conn.host, "tcp", o.sport, o.conn.port))

            scan_v = combine([judge_connection(o, True, grew(o)) for o in scan_o]) if scan else (
                None, f"no rank of {victim.name} listens in its collective range: nothing to scan")
            read_v = judge_read(read_o, grew(read_o), store_node)
            ssh_v = judge_connection(ssh_o, None if listening.get(ssh_node) is None
                                     else ssh_port in (listening.get(ssh_node) or ()), grew(ssh_o))
            where = list(dict.fromkeys([FABRIC, src, *victim.members, ssh_node]))
            net = await_detection(ctx, points, where, {
                "scan-ranks": ([(src_addr, c.host, c.port) for c in scan], t_attack),
                "ssh-mgmt": ([(src_addr, ssh_addr, ssh_port)], t_attack),
            }, actor.members, bound=look_for([*scan_o, ssh_o], bound))
            # a read that was served left no refusal to find: one look, not a wait
            read_bound = 0.0 if read_o.status == 200 else bound
            dets = {**net, "read-dataset": _read_detection(ctx, points, store_node, actor, victim, t_attack,
                                                           read_bound)}
            evs = {step: record_attempt(ctx, self.name, step, os_) for step, os_ in
                   (("scan-ranks", scan_o), ("read-dataset", [read_o]), ("ssh-mgmt", [ssh_o]))}
            found = [d.seconds for d in dets.values() if d.found and d.seconds is not None]
            detected_at = t_attack + min(found) if found else None
            resp = respond(ctx, points, detected_at=detected_at, job=actor.name)
        by = watch.result()
        actor_s = f"job {actor.name}"
        # which control point each step tests: a step that got through fails that control too
        tests = {"scan-ranks": "training_traffic", "read-dataset": "storage_flows", "ssh-mgmt": "admin_paths"}
        specs = (
            ("scan-ranks", f"{len(scan)} port(s) of job {victim.name}'s ranks "
             f"({', '.join(sorted({c.describe() for c in scan})) or 'none listening'})",
             f"connected to every listening port of {victim.name}'s ranks in its collective range", scan_v),
            ("read-dataset", f"{store_node} ({store_addr}:{store_port}) {read.path}",
             f"asked the object store for job {victim.name}'s dataset object", read_v),
            ("ssh-mgmt", f"{ssh_node} ({ssh_addr}:{ssh_port})", "opened the management sshd", ssh_v),
        )
        attempts = tuple(
            Attempt(step, actor_s, target, desc, got, why, dets[step].found, dets[step].text, dets[step].seconds,
                    evidence=(evs[step],), control=tests[step])
            for step, target, desc, (got, why) in specs)
        return DrillReport(
            self.name, ctx.target, started, datetime.now(UTC).isoformat(), attempts, by, resp.contained,
            resp.text, round(min(found), 3) if found else None, resp.seconds, tuple(notes),
            (*evs.values(), *resp.evidence), str(ctx.store.path))


__all__ = ["SCAN_PER_RANK", "MaliciousJob", "admin_ssh", "gate_denials", "judge_read", "parse_object_log", "refusals",
           "scan_targets", "storage_service"]
