"""Drill ``exfiltration``: a node streams a checkpoint to an address outside the trust boundary that the
policy does not approve for it — blocked, logged with identity, a failing finding naming the node, proven
by an independent capture that no byte got out, then the node is contained and released.

What is really done, from the suspect node through its executor:

* **exfil-direct** — ``PUT /replica/exfil/<node>/checkpoint`` of :data:`CHECKPOINT_BYTES` random bytes
  straight to a listening service of an external zone (the lab's replica sink, 10.77.9.10:9000), with a
  socket that takes no node-local proxy; tried again until the capture window closes (a busy machine's
  capture may start late). Stopped only when every try timed out or was reset on a listening port AND its
  own ``denied`` element moved (as a deny probe is proven) AND the capture of the site — taken by the
  site, not by the attacker — holds no payload byte between the node and that address;
* **exfil-egress-gateway** — the same through the site's egress gateway (the policy's node with the role
  ``egress-gateway``, :mod:`ringfence.enforce.egress_gateway`): the node asks it to ``CONNECT`` to that address,
  in the same rounds and the same capture as the direct try. Stopped when every try was refused by the gateway
  (its ``403`` AND a ``deny`` for the node's address in the gateway's own log) or dropped by policy on its way
  to the gateway (its own ``denied`` element), the gateway's log shows no forward for the node, and the
  capture saw 0 bytes to the outside (:mod:`ringfence.drill._gateway`). A policy that names no gateway: the
  attempt is recorded as not made, so the drill is ``unknown``, never ``pass``.

The attempt's volume is the firewall's own count (the ``denied`` elements' packets for those very
connections), and its decisions in the telemetry are attributed to the node by the inventory. A finding
(``fail``, control egress) naming the node goes into the evidence store with the proof's evidence ids.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ringfence.drill._attack import (
    DETECTION_NOTE,
    Conn,
    Outcome,
    approved_to,
    attack,
    await_detection,
    combine,
    enforcement_points,
    judge_connection,
    look_for,
    moved,
    record_attempt,
    who,
)
from ringfence.drill._gateway import (
    gateway_conn,
    gateway_detection,
    judge_gateway,
    read_gateway_log,
)
from ringfence.drill._respond import respond
from ringfence.drill.bystander import watch_bystander
from ringfence.drill.interface import Attempt, DrillContext, DrillError, DrillReport
from ringfence.enforce.apply import FABRIC
from ringfence.enforce.probe_matrix import denied_counters
from ringfence.errors import RingfenceError
from ringfence.evidence import RecordKind
from ringfence.marks import LOCAL_PROXY_BYPASS
from ringfence.policy import Policy
from ringfence.policy.egress import Gateway, GatewayError, find_gateway
from ringfence.policy.matrix import resolve
from ringfence.targets.ops import listening_ports

#: the checkpoint the node tries to stream (random bytes: 4 MiB is a shard of a real one, quick on a lab)
CHECKPOINT_BYTES = 4 << 20
#: seconds of the independent capture, during which the node keeps trying
CAPTURE_S = 2.5
FINDING_SOURCE = "ringfence.drill"


@dataclass(frozen=True)
class Outside:
    """Where the node tries to send: a listening service beyond the trust boundary, not approved for it."""

    node: str
    address: str
    port: int
    service: str


def suspect_node(policy: Policy, named: str | None) -> str:
    """The node named, or the last rank of the last job (so the first job stays a bystander)."""
    if named:
        if policy.node(named) is None:
            raise DrillError(f"no node {named!r} in policy {policy.cluster}")
        return named
    if not policy.jobs:
        raise DrillError(f"policy {policy.cluster} has no job: no training node to exfiltrate from")
    return policy.jobs[-1].members[-1]


def outside_target(policy: Policy, node: str) -> Outside:
    """The first TCP service of an external zone that the policy does not approve ``node`` to open."""
    m = resolve(policy)
    for s in policy.services:
        dest = policy.node(s.node)
        if dest is None or m.node_zone.get(s.node) not in m.external_zones or s.proto != "tcp":
            continue
        if approved_to(m, node, dest.addresses[0], s.port_range[0]) is None:
            return Outside(s.node, dest.addresses[0], s.port_range[0], s.name)
    raise DrillError(f"policy {policy.cluster} has no service outside the trust boundary that {node} is not "
                     "approved to reach: there is nothing to exfiltrate to", hint="a zone with trust: external")


def bytes_out(flows: Any, node_addresses: Sequence[str], outside: str, port: int | None = None) -> int | None:
    """L4 payload bytes, both directions, of the captured flows between the node and ``outside`` — only those on
    ``outside``'s ``port`` when one is given (None when the capture could not say: a flow of theirs without a
    payload count)."""
    total = 0
    for r in flows.select(["src", "dst", "sport", "dport", "payload_bytes"]).to_pylist():
        on_port = port is None or (r["dst"] == outside and r["dport"] == port) or (
            r["src"] == outside and r["sport"] == port)
        if {r["src"], r["dst"]} & set(node_addresses) and outside in (r["src"], r["dst"]) and on_port:
            if r["payload_bytes"] is None:
                return None
            total += int(r["payload_bytes"])
    return total


def judge_exfil(outcomes: Sequence[Outcome], grew: Sequence[Mapping[str, int]], listening: bool | None,
                out: int | None, capture_flows: int) -> tuple[bool | None, str]:
    """(got through?, why): through when a try connected or the capture saw payload; stopped only when every
    try was proven dropped by policy and the capture — which saw traffic at all — saw 0 payload bytes."""
    net = combine([judge_connection(o, listening, g) for o, g in zip(outcomes, grew, strict=True)])
    if net[0] is True or (out is not None and out > 0):
        seen = f"; the capture saw {out} payload bytes cross" if out else ""
        return True, (net[1] if net[0] is True else "no try connected") + seen
    if out is None:
        return None, f"{net[1]}; no independent capture could count the bytes that got out"
    if capture_flows == 0:
        return None, f"{net[1]}; the capture recorded no traffic at all, so its 0 bytes prove nothing"
    if net[0] is None:
        return None, net[1]
    return False, f"{net[1]}; the independent capture ({capture_flows} flows) saw 0 bytes between them"


class Exfiltration:
    """The exfiltration scenario (see the module docstring)."""

    name = "exfiltration"
    summary = "a node streams a checkpoint outside the trust boundary, directly and via the egress gateway"

    def _capture(self, ctx: DrillContext, path: Path, box: dict[str, Any]) -> None:
        try:
            ctx.cluster.capture(CAPTURE_S, path)
            box["path"] = path
        except RingfenceError as exc:
            box["error"] = exc.message
        except OSError as exc:  # a capture tool that could not start: no capture, said so (never a silent thread)
            box["error"] = f"{type(exc).__name__}: {exc}"

    def run(self, ctx: DrillContext) -> DrillReport:
        """Play it on ``ctx``'s cluster (see the module docstring)."""
        from ringfence.observe.flows.pcap import PcapReader

        started = datetime.now(UTC).isoformat()
        node = suspect_node(ctx.policy, ctx.options.get("node"))
        points = enforcement_points(ctx)
        if node not in points:
            raise DrillError(f"no executor reaches {node}, the node the drill exfiltrates from")
        pnode = ctx.policy.node(node)
        assert pnode is not None  # suspect_node checked it
        addrs = list(pnode.addresses)
        dest = outside_target(ctx.policy, node)
        ports = listening_ports(points[dest.node]) if dest.node in points else None
        listening = None if ports is None else dest.port in ports
        conn = Conn(dest.node, dest.address, dest.port, "PUT", f"/replica/exfil/{node}/checkpoint",
                    CHECKPOINT_BYTES, LOCAL_PROXY_BYPASS)
        gw: Gateway | None = None
        gw_problem = "no egress gateway in the policy of this target"
        try:
            gw = find_gateway(ctx.policy)
        except GatewayError as exc:
            gw_problem = f"the policy's egress gateway is unusable: {exc.message}"
        if gw is not None and gw.node not in points:
            gw_problem = f"no executor reaches the egress gateway {gw.node}"
            gw = None
        gconn = gateway_conn(gw, dest.address, dest.port, LOCAL_PROXY_BYPASS) if gw is not None else None
        gports = listening_ports(points[gw.node]) if gw is not None else None
        glistening = None if gports is None or gw is None else gw.port in gports
        notes = [f"{node} ({', '.join(addrs)}) streams a {CHECKPOINT_BYTES >> 20} MiB checkpoint to {dest.node} "
                 f"({dest.address}:{dest.port}, service {dest.service}), outside the trust boundary and not "
                 f"approved for {node}",
                 (f"through the egress gateway {gw.node} ({gw.address}:{gw.port}): CONNECT {dest.address}:"
                  f"{dest.port}; the gateway admits {', '.join(f'{n} ({a})' for n, a in gw.clients)}"
                  if gw is not None else f"{gw_problem}: the attempt through it was not made (unknown, not pass)"),
                 "bytes out are counted in the site's own capture, where packets leave their sender; the "
                 "attacker's count is recorded beside it, never used for the verdict", DETECTION_NOTE]
        if ports is None:
            notes.append(f"whether {dest.node} listens could not be read: no executor reaches it")
        with watch_bystander(ctx.cluster, ctx.policy, [node]) as watch:
            box: dict[str, Any] = {}
            pcap = ctx.workdir / "exfiltration.pcap"
            cap = threading.Thread(target=self._capture, args=(ctx, pcap, box), daemon=True)
            before = denied_counters(points)
            t_attack = time.time()
            cap.start()
            outcomes: list[Outcome] = []
            via: list[Outcome] = []
            # keep trying while the site records (a capture that started late still sees a later try), at
            # least once; bounded by the capture's own length. The gateway try goes in the same rounds.
            while not outcomes or (cap.is_alive() and len(outcomes) < 8):
                got_round = attack(points[node], [conn, *([gconn] if gconn is not None else [])])
                outcomes.append(got_round[0])
                via += got_round[1:]
            cap.join(timeout=CAPTURE_S + ctx.timeout)
            after = denied_counters(points)
            grew = [moved(before, after, (addrs[0], dest.address, "tcp", o.sport, dest.port)) for o in outcomes]
            ggrew = [moved(before, after, (addrs[0], gw.address, "tcp", o.sport, gw.port)) for o in via
                     ] if gw is not None else []
            flows_seen, out, to_gw = 0, None, None
            if "path" in box:
                flows = PcapReader().read(box["path"]).flows
                flows_seen, out = flows.num_rows, bytes_out(flows, addrs, dest.address)
                # the gateway path's own count: what the node got to the gateway at all (its relaying on the
                # node's behalf is in the gateway's log; its connections out carry storage's replication too)
                to_gw = bytes_out(flows, addrs, gw.address, gw.port) if gw is not None else None
            else:
                notes.append(f"the independent capture failed: {box.get('error', 'it did not finish')}")
            got, why = judge_exfil(outcomes, grew, listening, out, flows_seen)
            packets = sum(sum(g.values()) for g in grew)
            keys = {"exfil-direct": ([(addrs[0], dest.address, dest.port)], t_attack)}
            if gw is not None:
                keys["exfil-egress-gateway"] = ([(addrs[0], gw.address, gw.port)], t_attack)
            dets = await_detection(ctx, points, list(dict.fromkeys([FABRIC, node])), keys, [node],
                                   bound=look_for([*outcomes, *via], min(ctx.timeout, 10.0)))
            det = dets["exfil-direct"]
            gateway = self._via_gateway(ctx, points, gw, node, dest, via, ggrew, glistening, to_gw, flows_seen,
                                        t_attack, dets.get("exfil-egress-gateway"), gw_problem)
            ev = record_attempt(ctx, self.name, "exfil-direct", outcomes, {
                "bytes_out": out, "capture_flows": flows_seen, "denied_packets": packets,
                "attacker_sent": sum(o.sent for o in outcomes), "capture": str(box.get("path", ""))})
            if via:
                gev = record_attempt(ctx, self.name, "exfil-egress-gateway", via, {
                    "bytes_out": out, "capture_flows": flows_seen, "gateway": gw.node if gw else None,
                    "denied_packets": sum(sum(g.values()) for g in ggrew), "stopped_by": gateway.stopped_by})
                gateway = dataclasses.replace(gateway, evidence=(gev,))
            made = any(o.outcome not in ("error", "unreachable") for o in outcomes)
            # one finding for the node's exfiltration: blocked only when both paths were proven blocked
            both = False if got is False and gateway.got_through is False else (
                True if True in (got, gateway.got_through) else None)
            finding = self._finding(ctx, node, dest, both, f"{why} | via the gateway: {gateway.stopped_by}",
                                    packets, out, (ev, *gateway.evidence)) if made else None
            resp = respond(ctx, points, detected_at=t_attack + det.seconds if det.seconds is not None else None,
                           node=node)
        volume = (f"; volume: {packets} packet(s) dropped by the firewall over {len(outcomes)} try(s), "
                  f"the attacker's own count {sum(o.sent for o in outcomes)} bytes sent")
        direct = Attempt(
            "exfil-direct", who(ctx.policy, node), f"{dest.node} ({dest.address}:{dest.port})",
            f"streamed a {CHECKPOINT_BYTES >> 20} MiB checkpoint straight to {dest.node}, outside the trust "
            "boundary", got, why, det.found, det.text + volume + (f"; finding {finding}" if finding else ""),
            det.seconds, out, tuple(e for e in (ev, finding) if e))
        if finding:
            gateway = dataclasses.replace(gateway, detection=gateway.detection + f"; finding {finding}",
                                          evidence=(*gateway.evidence, finding))
        firsts = [s for s in (det.seconds, gateway.seconds_to_detect) if s is not None]
        return DrillReport(
            self.name, ctx.target, started, datetime.now(UTC).isoformat(), (direct, gateway), watch.result(),
            resp.contained, resp.text, min(firsts) if firsts else None, resp.seconds, tuple(notes),
            (ev, *gateway.evidence, *((finding,) if finding and finding not in gateway.evidence else ()),
             *resp.evidence), str(ctx.store.path))

    def _via_gateway(self, ctx: DrillContext, points: Mapping[str, Any], gw: Gateway | None, node: str,
                     dest: Outside, via: Sequence[Outcome], grew: Sequence[Mapping[str, int]],
                     listening: bool | None, to_gw: int | None, flows_seen: int, t_attack: float,
                     nflog: Any, problem: str) -> Attempt:
        """The gateway attempt, judged at the gateway (its log) and at the fabric (drop counters, NFLOG)."""
        actor = who(ctx.policy, node)
        if gw is None:
            return Attempt("exfil-egress-gateway", actor, f"{dest.node} ({dest.address}:{dest.port}) via the "
                           "egress gateway", "the same checkpoint through the site's egress gateway", None,
                           f"not attempted: {problem}", None, "not looked for: nothing was attempted")
        client = ctx.policy.node(node)
        address = client.addresses[0] if client is not None else ""
        log = read_gateway_log(ctx, points, gw, "exfil")
        seen_at = time.time()
        v = judge_gateway(via, grew, listening, log, address, t_attack, gw, to_gw, flows_seen)
        found, text, seconds = gateway_detection(v, ctx, node, t_attack, seen_at)
        if nflog is not None and nflog.found:
            text = f"{nflog.text}; {text}" if found else nflog.text
            seconds = min(s for s in (seconds, nflog.seconds) if s is not None)
            found = True
        packets = sum(sum(g.values()) for g in grew)
        volume = (f"; volume: {packets} packet(s) dropped by the firewall and {v.denies} refusal(s) logged by the "
                  f"gateway over {len(via)} try(s), {to_gw if to_gw is not None else '?'} payload bytes between the "
                  "node and the gateway in the capture")
        return Attempt(
            "exfil-egress-gateway", actor, f"{dest.node} ({dest.address}:{dest.port}) via the egress gateway "
            f"{gw.node} ({gw.address}:{gw.port})",
            f"asked the egress gateway {gw.node} to tunnel (CONNECT) to {dest.node} ({dest.address}:{dest.port}), "
            "outside the trust boundary", v.got_through, v.stopped_by, found, text + volume, seconds,
            0 if v.got_through is False else None)

    def _finding(self, ctx: DrillContext, node: str, dest: Outside, got: bool | None, why: str, packets: int,
                 out: int | None, evidence: tuple[str, ...]) -> str:
        """The failing finding that names the node (control egress), on the record; returns its id."""
        subject = who(ctx.policy, node)
        data = {
            "control": "egress", "verdict": "fail", "subject": subject, "node": node,
            "finding": f"{subject} tried to send a checkpoint to {dest.node} ({dest.address}:{dest.port}), outside "
                       f"the trust boundary and not approved for it — "
                       f"{'it got through' if got else 'blocked' if got is False else 'not proven blocked'}",
            "blocked": got is False, "detail": why, "denied_packets": packets, "bytes_out": out,
            "evidence": list(evidence),
            "remediation": f"contain {node} (ringfence contain --node {node}) and investigate what ran there",
        }
        return str(ctx.store.append(RecordKind.FINDING, FINDING_SOURCE, f"node {node}", data))


__all__ = ["CAPTURE_S", "CHECKPOINT_BYTES", "Exfiltration", "Outside", "bytes_out", "judge_exfil",
           "outside_target", "suspect_node"]
