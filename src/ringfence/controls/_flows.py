"""Classified flows, grouped and routed to the control that judges them, plus the shared judgement
of the five path controls (zones, admin paths, storage, training traffic, egress).

Each flow is judged once, by the most specific control: administrative services → ``admin_paths``;
responder outside the trust boundary or the inventory → ``egress``; storage class → ``storage_flows``;
collective class, or unclassified traffic on a job's collective ports → ``training_traffic``;
everything else → ``zones``. Filtering and counting are vectorised (Arrow); Python touches only
the rows that become findings (at most :data:`~ringfence.controls._common.LIST_CAP` per control).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ringfence.analyze import group_flows
from ringfence.controls._common import GATHER, LIST_CAP, failing, flow_keys, flow_subject, judge_probe, unknown, volume
from ringfence.controls.interface import ControlMeta, Facts, Finding, ProbeResult, Requirement, Side, Verdict
from ringfence.policy import Policy

ROUTES = ("admin_paths", "egress", "storage_flows", "training_traffic", "zones")

#: Requirement ids shared by the five path controls.
OBSERVED, BLOCKED, ABSENT = "approved-path-observed", "deny-probe-blocked", "no-unapproved-flow"
CAPTURE = "ringfence lab capture --seconds 10 -o capture.pcap"
PROBE = "ringfence probe POLICY --target lab -o probes.json"


def path_requirements(permitted: str, denied: str, scope: str) -> tuple[Requirement, ...]:
    """The acceptance of a path control: the permitted path observed; the denied one blocked by policy
    (a deny probe whose drop counter moved) and absent from a non-empty capture."""
    return (
        Requirement(OBSERVED, Side.PERMITTED, f"{permitted} (an approved flow observed)", ("flows",), CAPTURE),
        Requirement(BLOCKED, Side.DENIED, f"{denied} (a deny probe blocked by policy)", ("probes",), PROBE),
        Requirement(ABSENT, Side.DENIED, f"no unapproved flow to {scope} appears in the observed traffic",
                    ("flows",), CAPTURE),
    )

# One grouped table per (flows, policy) pair: ten controls judge the same flows. The cache holds the
# inputs themselves so their ids cannot be reused while the entry lives.
_cache: list[tuple[pa.Table, Policy, pa.Table]] = []


def routed_flows(policy: Policy, facts: Facts) -> pa.Table | None:
    """Grouped flows (:func:`ringfence.analyze.group_flows`) with a ``route`` column, or None."""
    if facts.flows is None:
        return None
    for flows, pol, table in _cache:
        if flows is facts.flows and pol is policy:
            return table
    grouped = group_flows(facts.flows, policy)
    cls = grouped.column("class")
    collective = pc.or_(
        pc.equal(cls, "collective"),
        pc.and_(pc.equal(cls, "unclassified"), pc.fill_null(grouped.column("job_port"), False)),
    )
    conds = pa.StructArray.from_arrays(
        [
            pc.fill_null(grouped.column("admin"), False).combine_chunks(),
            pc.fill_null(grouped.column("outside"), False).combine_chunks(),
            pc.fill_null(pc.equal(cls, "storage"), False).combine_chunks(),
            pc.fill_null(collective, False).combine_chunks(),
        ],
        names=["a", "e", "s", "t"],
    )
    route = pc.case_when(conds, *[pa.scalar(r) for r in ROUTES[:4]], pa.scalar(ROUTES[4]))
    table = grouped.append_column("route", route)
    _cache[:] = [*_cache[-1:], (facts.flows, policy, table)]
    return table


def exception_mask(table: pa.Table, policy: Policy, control: str, now: datetime, *, active: bool) -> pa.Array:
    """Rows covered by an exception of ``control`` that is (``active``) or is no longer in force."""
    mask = pa.array([False] * table.num_rows, pa.bool_())
    today = now.date()
    for e in policy.exceptions:
        if e.control != control or (e.expires >= today) != active:
            continue
        kind, _, value = e.subject.partition(":")
        cols: tuple[str, ...] = {
            "class": ("class",),
            "flow": ("rule",),
            "node": ("src_node", "dst_node"),
            "zone": ("src_zone", "dst_zone"),
            "job": ("src_job", "dst_job"),
            "service": ("service",),
            "address": ("src", "dst"),
        }.get(kind, ())
        for col in cols:
            mask = pc.or_(mask, pc.fill_null(pc.equal(table.column(col), value), False))
    return mask


def _sums(table: pa.Table) -> tuple[int, int]:
    return (
        int(pc.sum(table.column("records")).as_py() or 0),
        int(pc.sum(table.column("bytes")).as_py() or 0),
    )


def flow_failures(
    meta: ControlMeta,
    policy: Policy,
    facts: Facts,
    table: pa.Table,
    message: Callable[[Mapping[str, Any]], str],
    what: str,
    requirement: str = "",
) -> list[Finding]:
    """One finding per flow group of ``table`` (capped), each failing unless an exception covers it;
    the groups not listed are summarised as exempt and failing counts. Every finding but the
    unanswered attempts is tagged with ``requirement`` (the one it contradicts, or meets by exception).

    A TCP attempt the responder never answered (no packet back, so no connection and no data) did
    not get through: it is ``unknown`` — likely dropped, but a drop by policy is proven only by a
    probe — not a failure of the path control. One-way UDP still delivers data, so it stays a failure.
    """
    rows = table.slice(0, LIST_CAP).to_pylist()
    out = [
        _unanswered(meta, r, message(r), facts)
        if _is_unanswered(r)
        else failing(meta, policy, facts, flow_subject(r), message(r), flow_keys(r), facts.flow_evidence,
                     _volume(r))
        for r in rows
    ]
    rest = table.slice(LIST_CAP)
    if rest.num_rows:
        exempt = exception_mask(rest, policy, meta.id, facts.now, active=True)
        unanswered = pc.fill_null(
            pc.and_(pc.equal(rest.column("proto"), 6), pc.equal(rest.column("reply_packets"), 0)), False
        )
        for verdict, part in (
            (Verdict.EXEMPT, rest.filter(exempt)),
            (Verdict.UNKNOWN, rest.filter(pc.and_(pc.invert(exempt), unanswered))),
            (Verdict.FAIL, rest.filter(pc.and_(pc.invert(exempt), pc.invert(unanswered)))),
        ):
            if part.num_rows:
                out.append(
                    Finding(
                        meta.id,
                        verdict,
                        f"{part.num_rows} more {what}",
                        f"{part.num_rows} more {what} not listed ({volume(*_sums(part))})",
                        facts.flow_evidence,
                    )
                )
    if requirement:
        out = [f if f.verdict is Verdict.UNKNOWN else dataclasses.replace(f, requirement=requirement) for f in out]
    return out


def _volume(row: Mapping[str, Any]) -> tuple[int, int]:
    return int(row.get("records") or 0), int(row.get("bytes") or 0)


def _is_unanswered(row: Mapping[str, Any]) -> bool:
    return row.get("proto") == 6 and row.get("reply_packets") == 0


def _unanswered(meta: ControlMeta, row: Mapping[str, Any], message: str, facts: Facts) -> Finding:
    return Finding(
        meta.id,
        Verdict.UNKNOWN,
        flow_subject(row),
        f"attempted, never answered (no packet came back: no connection, no data delivered) — {message}; "
        f"likely dropped, but only a probe proves a drop by policy: {GATHER['probes']}",
        facts.flow_evidence,
        volume=_volume(row),
    )


def approved_passes(meta: ControlMeta, policy: Policy, facts: Facts, table: pa.Table) -> list[Finding]:
    """One ``pass`` per approved flow entry observed in ``table``: the permitted behaviour, seen."""
    if table.num_rows == 0:
        return []
    per_rule = table.group_by("rule").aggregate([("records", "sum"), ("bytes", "sum"), ("src", "count")])
    by_id = {r.id: r for r in policy.approved}
    out = []
    for row in sorted(per_rule.to_pylist(), key=lambda r: (-r["bytes_sum"], r["rule"])):
        rule = by_id.get(row["rule"])
        ends = f"{rule.source.describe()} → {rule.destination.describe()}, {rule.traffic_class.value}" if rule else ""
        out.append(
            Finding(
                meta.id,
                Verdict.PASS,
                f"approved flow {row['rule']}",
                f"permitted path observed ({ends}): {row['src_count']} flow(s), "
                f"{volume(row['records_sum'], row['bytes_sum'])}",
                facts.flow_evidence,
                requirement=OBSERVED,
            )
        )
    return out[:LIST_CAP]


def probe_route(policy: Policy, probe: ProbeResult) -> str:
    """The control a probe's destination belongs to (same order as flows)."""
    host, _, _ = probe.destination.rpartition(":")
    host = host.strip("[]")
    node = policy.node(host) or next((n for n in policy.nodes if host in n.addresses), None)
    if node is None:
        return "egress"
    svc = next(
        (
            s
            for s in policy.services
            if s.node == node.name and s.proto == probe.proto and s.port_range[0] <= probe.port <= s.port_range[1]
        ),
        None,
    )
    if svc is not None and svc.admin:
        return "admin_paths"
    zone = policy.zone(node.zone)
    if zone is not None and zone.trust.value == "external":
        return "egress"
    if svc is not None and svc.traffic_class.value == "storage":
        return "storage_flows"
    lo_hi = [j.collective_range for j in policy.jobs if node.name in j.members]
    if svc is None and any(lo <= probe.port <= hi for lo, hi in lo_hi):
        return "training_traffic"
    return "zones"


def probe_findings(meta: ControlMeta, policy: Policy, facts: Facts, scope: str) -> list[Finding]:
    """Judged probes routed to this control; ``unknown`` when no probe proves a denied path here."""
    if facts.probes is None:
        return [unknown(meta, f"denied paths ({scope})", "probes", "no denied behaviour proven")]
    mine = [p for p in facts.probes if probe_route(policy, p) == meta.id]
    # Deny probes prove (or contradict) the denied side; allow probes are judged, but a connecting
    # allow probe is not an observed flow and meets no requirement on its own.
    out = [dataclasses.replace(judge_probe(meta, p), requirement=BLOCKED if p.expected == "deny" else "")
           for p in mine]
    if not any(p.expected == "deny" for p in mine):
        out.append(
            Finding(
                meta.id,
                Verdict.UNKNOWN,
                f"denied paths ({scope})",
                f"no deny probe targets {scope}: {GATHER['probes']} with a denied path in this scope",
            )
        )
    return out


def judge_paths(
    meta: ControlMeta,
    policy: Policy,
    facts: Facts,
    scope: str,
    message: Callable[[Mapping[str, Any]], str],
) -> list[Finding]:
    """The five path controls: unapproved flows fail, approved ones pass, probes judged."""
    table = routed_flows(policy, facts)
    out: list[Finding] = []
    if table is None:
        out.append(unknown(meta, f"flows ({scope})", "flows"))
    else:
        mine = table.filter(pc.equal(table.column("route"), meta.id))
        approved = pc.fill_null(mine.column("approved"), False)
        unapproved = mine.filter(pc.invert(approved))
        out += flow_failures(meta, policy, facts, unapproved, message, "unapproved flows", ABSENT)
        if unapproved.num_rows == 0:
            sources = ", ".join(facts.flow_sources) or "the flow inputs"
            out.append(Finding(meta.id, Verdict.PASS, f"unapproved flows ({scope})",
                               f"none among {int(pc.sum(table.column('records')).as_py() or 0)} observed flow "
                               f"record(s) ({sources})", facts.flow_evidence, requirement=ABSENT))
        out += approved_passes(meta, policy, facts, mine.filter(approved))
    return out + probe_findings(meta, policy, facts, scope)


__all__ = [
    "ABSENT",
    "BLOCKED",
    "CAPTURE",
    "OBSERVED",
    "PROBE",
    "ROUTES",
    "approved_passes",
    "exception_mask",
    "flow_failures",
    "judge_paths",
    "path_requirements",
    "probe_findings",
    "probe_route",
    "routed_flows",
]
