"""Reconstruct one flow end to end from the telemetry: decision, records, endpoints, change.

Sources join on the 5-tuple's Community ID and on time: the firewall's NFLOG decisions (every
enforcement point that logged the connection), conntrack's NEW/DESTROY records, DNS answers (the
name the initiator resolved to the responder's address, latest at or before the flow), the
scheduler's job on each endpoint's node at that moment (:class:`~ringfence.jobs.interface.JobSource`)
and the evidence store's apply records (the policy version in force; the change that brought the rule).
The object server's access log and the TLS sidecars' connection logs add what rode on the flow — the dataset
object read, its job and bytes — and the SPIFFE identities the certificates proved (:mod:`.join`).
Hubble flows (``verdict`` FORWARDED / DROPPED with ``drop_reason_desc``) feed the same decisions.
Selection is vectorised (Arrow): a cluster's logs hold millions of decisions, the trace one flow.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final, Literal

import pyarrow as pa
import pyarrow.compute as pc

from ringfence.errors import InputError, RingfenceError
from ringfence.evidence import EvidenceStore
from ringfence.jobs.interface import JobSource
from ringfence.observe.community_id import community_ids
from ringfence.observe.flows.events.interface import CONN_SCHEMA, DECISION_SCHEMA, DNS_SCHEMA, OBJECT_SCHEMA, TLS_SCHEMA
from ringfence.observe.flows.events.registry import reader
from ringfence.policy import Policy
from ringfence.trace import history
from ringfence.trace.join import LOOPBACK, Window, join
from ringfence.trace.model import (
    Change,
    Decision,
    DecisionState,
    Endpoint,
    PointDecision,
    Record,
    Sample,
    TimelineEntry,
    Trace,
    TracedFlow,
)

PROTOS = {"tcp": 6, "udp": 17, "icmp": 1, "sctp": 132}
_FLOW = re.compile(r"^\[?(?P<src>[0-9A-Fa-f.:]+?)\]?:(?P<sport>[0-9]{1,5}|\*)-\[?(?P<dst>[0-9A-Fa-f.:]+?)\]?:"
                   r"(?P<dport>[0-9]{1,5})(?:/(?P<proto>[a-z]{3,5}|[0-9]{1,3}))?$")
_IDENTITY = pa.field("src_identity", pa.string()), pa.field("dst_identity", pa.string())
#: DNS answers up to this long after a flow's first packet still count (dnsmasq logs whole seconds).
DNS_SLACK = timedelta(seconds=1)
#: ``--object``: trace a flow that carried an object request the server served, or one it refused.
ObjectResult = Literal["served", "refused"]
#: Candidates tried, best first, for a flow that carried the asked object request.
TRIED: Final = 50


class NoSample(RingfenceError):
    """No flow of the asked kind is in the telemetry: the trace is unknown, not failed."""


@dataclass(frozen=True)
class FlowSpec:
    """``--flow SRC:SPORT-DST:DPORT[/PROTO]`` (``*`` for any source port)."""

    src: str
    sport: int | None
    dst: str
    dport: int
    proto: int | None

    @classmethod
    def parse(cls, text: str) -> FlowSpec:
        """Parse the option's text; :class:`InputError` naming ``--flow`` otherwise."""
        m = _FLOW.match(text.strip())
        if m is None:
            raise InputError("--flow", f"{text[:80]!r} is not SRC:SPORT-DST:DPORT[/PROTO]",
                             hint="e.g. 10.77.1.10:41234-10.77.2.10:8080/tcp (SPORT may be *)")
        proto_text = m.group("proto")
        proto = None if proto_text is None else (int(proto_text) if proto_text.isdigit() else PROTOS.get(proto_text))
        if proto_text is not None and proto is None:
            raise InputError("--flow", f"unknown protocol {proto_text!r} (tcp, udp, icmp, sctp or a number)")
        sport = None if m.group("sport") == "*" else int(m.group("sport"))
        if int(m.group("dport")) > 65535 or (sport is not None and sport > 65535):
            raise InputError("--flow", "a port is above 65535")
        return cls(m.group("src"), sport, m.group("dst"), int(m.group("dport")), proto)


@dataclass(frozen=True)
class Telemetry:
    """Everything read: decisions (with identities where the source knows them), conn records, DNS answers."""

    decisions: pa.Table
    conns: pa.Table
    dns: pa.Table
    warnings: tuple[str, ...] = ()
    objects: pa.Table = field(default_factory=OBJECT_SCHEMA.empty_table)  # object-server requests
    tls: pa.Table = field(default_factory=TLS_SCHEMA.empty_table)  # TLS sidecars' connection records


def _with_identity(table: pa.Table) -> pa.Table:
    for f in _IDENTITY:
        if f.name not in table.column_names:
            table = table.append_column(f, pa.nulls(table.num_rows, f.type))
    return table


def load(files: Iterable[tuple[str, str, Path]], hubble: Sequence[Path] = ()) -> Telemetry:
    """Read each ``(point, reader name, path)`` and each Hubble export into one :class:`Telemetry`."""
    parts: dict[str, list[pa.Table]] = {"ulogd": [], "conntrack": [], "dnsmasq": [], "objects": [], "tls": []}
    warnings: list[str] = []
    for point, name, path in files:
        if name not in parts:
            raise InputError(str(path), f"trace reads no {name} log (it reads {', '.join(parts)})")
        res = reader(name).read(path, node=point)
        parts[name].append(res.events)
        warnings += res.warnings
    decisions = [_with_identity(t) for t in parts["ulogd"]]
    for path in hubble:
        from ringfence.observe.flows.hubble import HubbleReader

        flows = HubbleReader().read(path)
        warnings += flows.warnings
        decisions.append(_hubble_decisions(flows.flows))
    empty = _with_identity(DECISION_SCHEMA.empty_table())
    return Telemetry(
        _micros(pa.concat_tables(decisions, promote_options="none") if decisions else empty),
        _micros(pa.concat_tables(parts["conntrack"]) if parts["conntrack"] else CONN_SCHEMA.empty_table()),
        _micros(pa.concat_tables(parts["dnsmasq"]) if parts["dnsmasq"] else DNS_SCHEMA.empty_table()),
        tuple(warnings),
        _micros(pa.concat_tables(parts["objects"]) if parts["objects"] else OBJECT_SCHEMA.empty_table()),
        _micros(pa.concat_tables(parts["tls"]) if parts["tls"] else TLS_SCHEMA.empty_table()),
    )


def _micros(table: pa.Table) -> pa.Table:
    """Times to microseconds (Python's datetime resolution; no log here is finer than that to matter)."""
    i = table.schema.get_field_index("time")
    return table.set_column(i, "time", pc.cast(table.column("time"), pa.timestamp("us", tz="UTC"), safe=False))


def _hubble_decisions(flows: pa.Table) -> pa.Table:
    """Hubble conversations as decisions: FORWARDED accepts, DROPPED drops; Hubble names no rule for a
    default-deny drop, so ``rule`` stays null and the drop reason is kept as the prefix."""
    verdict_text = pc.fill_null(flows.column("verdict"), "")
    verdict = pc.if_else(pc.starts_with(verdict_text, "DROPPED"), "drop",
                         pc.if_else(pc.starts_with(verdict_text, "FORWARDED"), "accept", pa.scalar(None, pa.string())))
    keep = pc.and_(pc.is_valid(verdict), pc.is_valid(flows.column("first_seen")))
    n = flows.num_rows
    table = pa.table({
        "time": flows.column("first_seen"), "src": flows.column("src"), "dst": flows.column("dst"),
        "sport": flows.column("sport"), "dport": flows.column("dport"), "proto": flows.column("proto"),
        "rule": pa.nulls(n, pa.string()), "verdict": verdict, "prefix": verdict_text,
        "node": pa.nulls(n, pa.string()), "line": pa.array([0] * n, pa.int64()), "source": flows.column("source"),
        "src_identity": flows.column("src_identity"), "dst_identity": flows.column("dst_identity"),
    }).filter(keep)
    return table.cast(pa.schema([*DECISION_SCHEMA, *_IDENTITY]))


def _iso(value: Any) -> str:
    return value.isoformat() if isinstance(value, datetime) else str(value)


def _object_prior(tel: Telemetry, cand: pa.Table, cids: pa.Array, result: ObjectResult) -> pa.Array:
    """Whether a candidate may have carried an object request of ``result``: its Community ID is a logged
    request's, or its initiator is a logged client (directly, or at a TLS gate). Verified when joined."""
    objs = tel.objects.filter(pc.equal(tel.objects.column("result"), result))
    ported = objs.filter(pc.and_(pc.is_valid(objs.column("peer_port")), pc.is_valid(objs.column("local"))))
    tuples = pa.table({"src": ported.column("peer"), "dst": ported.column("local"),
                       "sport": ported.column("peer_port"), "dport": ported.column("local_port"),
                       "proto": pa.array([6] * ported.num_rows, pa.uint8())})
    exact = pc.fill_null(pc.is_in(cids, community_ids(tuples)), False) if ported.num_rows else \
        pa.array([False] * cand.num_rows)
    bare = objs.filter(pc.is_null(objs.column("peer_port"))).column("peer")
    gates = tel.tls.filter(pc.and_(pc.equal(tel.tls.column("direction"), "in"),
                                   pc.is_valid(tel.tls.column("path")))).column("peer")
    clients = pc.unique(pa.concat_arrays([bare.combine_chunks(), gates.combine_chunks()]).cast(pa.string()))
    clients = clients.filter(pc.invert(pc.is_in(clients, pa.array(LOOPBACK))))
    return pc.or_(exact, pc.fill_null(pc.is_in(cand.column("src"), clients), False))


def _pick(tel: Telemetry, sample: Sample, spec: FlowSpec | None, nodes: Mapping[str, str],
          objects: ObjectResult | None = None, since: datetime | None = None) -> list[dict[str, Any]]:
    d = tel.decisions
    want = ["accept"] if sample == "allowed" else ["drop"]
    mask = pc.is_in(d.column("verdict"), pa.array(want))
    if since is not None:
        # decisions before ``since`` (an earlier policy's, an earlier test's) are never the sample, however
        # well they score: a user who asks about the flows since a change gets one of those or none
        at = pc.greater_equal(d.column("time"), pa.scalar(since, d.schema.field("time").type))
        mask = pc.and_(mask, pc.fill_null(at, False))
    if spec is not None:
        conds = [pc.equal(d.column("src"), spec.src), pc.equal(d.column("dst"), spec.dst),
                 pc.equal(d.column("dport"), spec.dport)]
        if spec.sport is not None:
            conds.append(pc.equal(d.column("sport"), spec.sport))
        if spec.proto is not None:
            conds.append(pc.equal(d.column("proto"), spec.proto))
        for c in conds:
            mask = pc.and_(mask, pc.fill_null(c, False))
    cand = d.filter(mask)
    if cand.num_rows == 0:
        what = "accepted" if sample == "allowed" else "dropped"
        when = f" since {since.isoformat()}" if since is not None else ""
        raise NoSample(f"no {what} flow{' matching --flow' if spec else ''}{when} in the firewall decision logs",
                       hint="apply a policy (ringfence apply POLICY --target lab) and let traffic flow; the "
                            "decisions are ulogd's NFLOG records on every enforcement point")
    cids = community_ids(cand)
    conn_cids = community_ids(tel.conns) if tel.conns.num_rows else pa.array([], pa.string())
    addrs = pa.array(list(nodes), pa.string())
    # prefer flows both of whose ends are known, with a named rule (allowed) and a conntrack record
    score = pc.add(pc.add(pc.cast(pc.is_in(cand.column("src"), addrs), pa.int64()),
                          pc.cast(pc.is_in(cand.column("dst"), addrs), pa.int64())),
                   pc.add(pc.cast(pc.fill_null(pc.is_in(cids, conn_cids), False), pa.int64()),
                          pc.cast(pc.is_valid(cand.column("rule")), pa.int64())))
    ranked = cand.append_column("cid", cids).append_column("score", score)
    if objects is not None:
        prior = _object_prior(tel, cand, cids, objects)
        ranked = ranked.filter(prior)
        if ranked.num_rows == 0:
            raise NoSample(f"no {'accepted' if sample == 'allowed' else 'dropped'} flow carried an object request "
                           f"the object server {objects}", hint=OBJECT_HINT)
    rows: list[dict[str, Any]] = ranked.sort_by([("score", "descending"), ("time", "descending")]) \
        .slice(0, TRIED if objects is not None else 1).to_pylist()
    return rows


OBJECT_HINT = ("the object server logs each request with --object-log (the lab's storage node writes "
               "objects.json in its telemetry directory); read a dataset through the traced path and trace again")


def _state(row: Mapping[str, Any]) -> DecisionState:
    if str(row["source"]).startswith("hubble:"):
        return "hubble-dropped" if row["verdict"] == "drop" else "hubble-forwarded"
    if row["verdict"] == "audit":
        return "audit"
    if row["rule"] == "containment":
        return "containment"
    return "default-drop" if row["rule"] is None else "named-rule"


def _explain(state: DecisionState, row: Mapping[str, Any]) -> str:
    where = row["node"] or "the data plane"
    return {
        "named-rule": f"{row['verdict']} by policy rule {row['rule']} at {where}",
        "default-drop": f"dropped by the default drop at {where}: no policy rule names this flow",
        "containment": f"dropped by containment at {where} (the node is isolated)",
        "audit": f"would have been dropped at {where}; accepted because the policy is in audit mode",
        "hubble-forwarded": f"forwarded by Cilium ({row['prefix']}); Hubble does not name the policy rule",
        "hubble-dropped": f"dropped by Cilium ({row['prefix']}); Hubble names no policy for a default-deny drop",
    }[state]


def _dns(tel: Telemetry, address: str, client: str | None, when: datetime) -> tuple[str | None, dict[str, Any] | None]:
    dns = tel.dns
    if dns.num_rows == 0:
        return None, None
    rows = dns.filter(pc.fill_null(pc.equal(dns.column("address"), address), False))
    rows = rows.filter(pc.less_equal(rows.column("time"), pa.scalar(when + DNS_SLACK, rows.schema.field("time").type)))
    if rows.num_rows == 0:
        return None, None
    if client is not None:
        # the name *this* client used: answers to others prove nothing about it (a log without clients counts)
        rows = rows.filter(pc.fill_null(pc.equal(rows.column("client"), client), True))
        if rows.num_rows == 0:
            return None, None
    latest = rows.sort_by([("time", "descending")]).slice(0, 1).to_pylist()[0]
    return str(latest["name"]), latest


def _endpoint(policy: Policy, address: str, when: datetime, jobs: JobSource | None, identity: str | None,
              dns: str | None) -> Endpoint:
    node = next((n for n in policy.nodes if address in n.addresses), None)
    span = jobs.job_at(node.name, when) if jobs is not None and node is not None else None
    return Endpoint(address=address, node=node.name if node else None, zone=node.zone if node else None,
                    job=span.job if span else None, user=span.user if span else None, identity=identity, dns=dns)


def reconstruct(tel: Telemetry, policy: Policy, sample: Sample, *, spec: FlowSpec | None = None,
                store: EvidenceStore | None = None, target: str | None = None,
                jobs: JobSource | None = None, objects: ObjectResult | None = None,
                since: datetime | None = None) -> Trace:
    """The ``sample`` flow (or the one ``spec`` names) end to end; :class:`NoSample` when there is none.

    ``since`` (timezone-aware): only a flow whose firewall decision was logged at or after it.

    ``objects``: only a flow that carried an object request of that result, joined from the object server's
    log — a dataset read (``GET /datasets/…``) the server served or refused where one of the likeliest flows
    carried one, else any request of that result."""
    nodes = {a: n.name for n in policy.nodes for a in n.addresses}
    if since is not None and since.tzinfo is None:
        raise InputError("since", f"{since.isoformat()} has no timezone: give one (e.g. +00:00)")
    ranked = _pick(tel, sample, spec, nodes, objects, since)
    # keyed once: each candidate tried selects its own rows from the same keyed tables
    keyed = (tel.decisions.append_column("cid", community_ids(tel.decisions)),
             tel.conns.append_column("cid", community_ids(tel.conns)) if tel.conns.num_rows else None)
    fallback: Trace | None = None
    for best in ranked:
        trace = _build(tel, policy, sample, best, keyed, store, target, jobs)
        if objects is None:
            return trace
        hits = [o for o in trace.objects if o.result == objects]
        # a dataset read is what storage_flows asks for; a flow that carried another request of that result
        # (a checkpoint write) is the answer only when none of the likeliest carried one
        if any(o.method == "GET" and o.path.startswith("/datasets/") for o in hits):
            return trace
        if hits and fallback is None:
            fallback = trace
    if fallback is not None:
        return fallback
    raise NoSample(f"no {'accepted' if sample == 'allowed' else 'dropped'} flow joins an object request the "
                   f"object server {objects} (of the {TRIED} likeliest)", hint=OBJECT_HINT)


def _node_of(policy: Policy, address: str) -> str | None:
    return next((n.name for n in policy.nodes if address in n.addresses), None)


def _build(tel: Telemetry, policy: Policy, sample: Sample, best: dict[str, Any],
           keyed: tuple[pa.Table, pa.Table | None], store: EvidenceStore | None, target: str | None,
           jobs: JobSource | None) -> Trace:
    """One candidate flow, joined with every source (``keyed``: decisions and conntrack records with their
    Community IDs)."""
    cid = best["cid"]
    notes: list[str] = []
    same = keyed[0]
    same = same.filter(pc.fill_null(pc.equal(same.column("cid"), cid), False)) if cid is not None else \
        pa.Table.from_pylist([best])
    if cid is not None:
        # the same 5-tuple may recur much later (a reused source port): keep this connection's minute
        t0, ts_type, minute = best["time"], same.schema.field("time").type, timedelta(seconds=60)
        same = same.filter(pc.and_(pc.greater_equal(same.column("time"), pa.scalar(t0 - minute, ts_type)),
                                   pc.less_equal(same.column("time"), pa.scalar(t0 + minute, ts_type))))
    rows = sorted(same.to_pylist(), key=lambda r: r["time"])
    want = "accept" if sample == "allowed" else "drop"
    first = next(r for r in rows if r["verdict"] == want)
    when: datetime = first["time"]
    conns: list[dict[str, Any]] = []
    if cid is not None and keyed[1] is not None:
        c = keyed[1]
        c = c.filter(pc.fill_null(pc.equal(c.column("cid"), cid), False))
        conns = [r for r in sorted(c.to_pylist(), key=lambda r: r["time"])
                 if abs((r["time"] - when).total_seconds()) < 3600]
    applied = history.history(store, target) if store is not None and target is not None else []
    current = history.in_force(applied, when)
    if store is None:
        notes.append("no evidence store given: the policy version in force is unknown")
    elif current is None:
        notes.append(f"no apply record for target {target} at or before {_iso(when)}: policy version unknown "
                     "(ringfence apply POLICY --target lab records one)")
    change = None
    if current is not None and first["rule"] is not None and first["rule"] != "containment" and store is not None:
        intro = history.introduced(store, applied, current, first["rule"])
        if intro is not None:
            change = Change(evidence=intro.evidence, action=intro.action, time=_iso(intro.time), version=intro.version,
                            approved_by=intro.approved_by, ticket=intro.ticket)
        else:
            notes.append(f"no recorded ruleset carries rule {first['rule']}: the change that introduced it is unknown")
    state = _state(first)
    src_name, src_answer = _dns(tel, best["src"], None, when)
    dst_name, dst_answer = _dns(tel, best["dst"], best["src"], when)
    ended = [r["time"] for r in conns if r["event"] == "DESTROY" and r["time"] >= when]
    joined = join(tel.objects, tel.tls, Window(best["src"], best["dst"], best["sport"], best["dport"], cid, when,
                                               min(ended) if ended else None, _node_of(policy, best["src"]),
                                               _node_of(policy, best["dst"])))
    # the data plane's own identity (Hubble's) first; else the one the certificate proved at a sidecar
    src = _endpoint(policy, best["src"], when, jobs, first.get("src_identity") or joined.src_identity, src_name)
    dst = _endpoint(policy, best["dst"], when, jobs, first.get("dst_identity") or joined.dst_identity, dst_name)
    gate_port = any(r.direction == "in" and r.peer_port is not None for r in joined.tls)
    if any(o.joined == "address-time" or (o.joined == "tls-gate" and not gate_port) for o in joined.objects):
        notes.append("an object request was joined by addresses and time (the log or the TLS gate records no "
                     "client port): the nearest request within seconds, not an exact 5-tuple match")
    elif any(o.joined == "tls-gate" for o in joined.objects):
        notes.append("the TLS gate's record joined this flow by its client port; the request it forwarded was "
                     "joined to that record by node, method, path and the nearest time")
    if jobs is None:
        notes.append("no job source given (--jobs): job and user are null")
    attributed = all(e.node is not None or e.identity is not None for e in (src, dst))
    if not attributed:
        notes.append("an endpoint resolves to no inventory node and carries no workload identity")
    timeline: list[TimelineEntry] = []
    if dst_answer is not None:
        timeline.append(TimelineEntry(time=_iso(dst_answer["time"]), where="dns",
                                      what=f"{dst_answer['client'] or '?'} resolved {dst_name} → {best['dst']}"))
    timeline += [TimelineEntry(time=_iso(r["time"]), where=str(r["node"] or r["source"]),
                               what=f"{r['verdict']} {r['rule'] or '(no rule: ' + r['prefix'].strip() + ')'}")
                 for r in rows]
    timeline += [TimelineEntry(time=_iso(r["time"]), where=str(r["node"]),
                               what=f"conntrack {r['event']} id {r['ct_id']}") for r in conns]
    timeline += [TimelineEntry(time=t.time, where=f"tls {t.node}",
                               what=f"{'gate' if t.direction == 'in' else 'client'} {t.result} "
                                    f"{t.method or ''} {t.path or ''} peer {t.peer} identity {t.identity or 'none'}")
                 for t in joined.tls]
    timeline += [TimelineEntry(time=o.time, where=f"objects {o.node or '?'}",
                               what=f"{o.method} {o.path} {o.result} {o.bytes if o.bytes is not None else '?'} bytes "
                                    f"(job {o.job or '?'}, identity {o.identity or 'none'}, joined by {o.joined})")
                 for o in joined.objects]
    timeline.sort(key=lambda e: e.time)
    last = max([when, *(r["time"] for r in rows), *(r["time"] for r in conns)])
    return Trace(
        sample=sample, generated=datetime.now(UTC).isoformat(),
        flow=TracedFlow(src=best["src"], dst=best["dst"], sport=best["sport"], dport=best["dport"], proto=best["proto"],
                        community_id=cid, first_seen=_iso(when), last_seen=_iso(last)),
        decision=Decision(rule=first["rule"], verdict=first["verdict"],
                          policy_version=current.version if current else None, state=state,
                          point=first["node"], time=_iso(when), explanation=_explain(state, first)),
        decisions=tuple(PointDecision(point=r["node"], time=_iso(r["time"]), rule=r["rule"], verdict=r["verdict"],
                                      prefix=r["prefix"], source=r["source"], line=r["line"]) for r in rows),
        records=tuple(Record(source=r["source"], point=r["node"], time=_iso(r["time"]), event=r["event"],
                             line=r["line"]) for r in conns),
        src=src, dst=dst, change=change, attributed=attributed, timeline=tuple(timeline), notes=tuple(notes),
        objects=joined.objects, tls=joined.tls,
    )


__all__ = ["DNS_SLACK", "OBJECT_HINT", "TRIED", "FlowSpec", "NoSample", "ObjectResult", "Telemetry", "load",
           "reconstruct"]
