"""Control point ``telemetry``: flow logs carry workload identity, so every flow can be attributed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ringfence.controls._common import LIST_CAP, remediation_text, unknown, volume
from ringfence.controls._flows import CAPTURE
from ringfence.controls.interface import ControlMeta, Facts, Finding, Requirement, Side, Verdict
from ringfence.policy import Policy

#: Requirement ids.
ATTRIBUTED, ALLOWED, DENIED = "flows-attributed", "allowed-flow-reconstructed", "denied-attempt-reconstructed"
TRACE = "ringfence trace --sample {sample} --target lab -o trace-{sample}.json"

meta = ControlMeta(
    id="telemetry",
    title="Network telemetry with identity context",
    objective="Every flow record can be attributed to a workload: it carries a workload identity or its "
    "addresses resolve to inventory nodes, so an investigation never stops at a bare IP address.",
    acceptance="Permitted: a sampled allowed flow is reconstructed end to end from the firewall's NFLOG decisions, "
    "conntrack and DNS — rule id, policy version in force, both endpoints' nodes (and job, user, identity where "
    "known) and the DNS name used. Denied: a denied attempt is reconstructed the same way, attributed to the node "
    "that tried; a flow from an address nobody owns is flagged as unattributable rather than silently logged.",
    facts=("flows", "traces"),
    requirements=(
        Requirement(ATTRIBUTED, Side.PERMITTED, "every flow record resolves to inventory nodes or carries a workload "
                    "identity", ("flows",), CAPTURE),
        Requirement(ALLOWED, Side.PERMITTED, "a sampled allowed flow reconstructed end to end, both endpoints "
                    "attributed", ("traces",), TRACE.format(sample="allowed")),
        Requirement(DENIED, Side.DENIED, "a sampled denied attempt reconstructed end to end, both endpoints "
                    "attributed", ("traces",), TRACE.format(sample="denied")),
    ),
    remediation={
        "nftables": "log each rule to NFLOG with the rule id as prefix (ulogd2), and keep address sets in step with "
                    "the inventory",
        "networkpolicy": "export flows with pod/namespace labels (e.g. Hubble) instead of bare addresses",
        "cilium": "enable Hubble flow export with identity and label context",
        "process": "add every address in use to the policy inventory; decommission unknown hosts",
    },
)


def _resolved(table: pa.Table, side: str) -> pa.Array:
    return pc.or_(
        pc.is_valid(table.column(f"{side}_node")),
        pc.is_valid(table.column(f"{side}_identity")),
    )


def _who(end: Any) -> str:
    if not isinstance(end, Mapping):
        return "?"
    return str(end.get("node") or end.get("identity") or end.get("address") or "?")


def _one_sample(traces: Sequence[Mapping[str, Any]], sample: str, requirement: str) -> Finding:
    """The sample's verdict: pass when a trace of it has both ends attributed, fail when one has not."""
    mine = [t for t in traces if isinstance(t, Mapping) and t.get("sample") == sample]
    if not mine:
        return Finding(meta.id, Verdict.UNKNOWN, f"{sample} flow end to end",
                       f"no {sample} trace was given; run: {TRACE.format(sample=sample)}", requirement=requirement)
    bad = [t for t in mine if t.get("attributed") is not True]
    t = bad[0] if bad else mine[0]
    flow, decision = t.get("flow"), t.get("decision")
    flow = flow if isinstance(flow, Mapping) else {}
    decision = decision if isinstance(decision, Mapping) else {}
    subject = (f"{sample} flow {flow.get('src')}:{flow.get('sport')} → {flow.get('dst')}:{flow.get('dport')} "
               f"({_who(t.get('src'))} → {_who(t.get('dst'))})")
    rule = decision.get("rule") or "no named rule (default drop)"
    detail = (f"{decision.get('verdict')} by {rule}, policy version {str(decision.get('policy_version'))[:16]}, "
              f"dns {(t.get('dst') or {}).get('dns') if isinstance(t.get('dst'), Mapping) else None}")
    if bad:
        return Finding(meta.id, Verdict.FAIL, subject, f"cannot be attributed: an endpoint resolves to no inventory "
                       f"node and carries no workload identity ({detail})", remediation=remediation_text(meta),
                       requirement=requirement)
    return Finding(meta.id, Verdict.PASS, subject, f"reconstructed end to end: {detail}", requirement=requirement)


def _reconstructed(policy: Policy, facts: Facts) -> list[Finding]:
    """A sampled allowed flow and a denied attempt, each reconstructed by ``ringfence trace`` (the acceptance)."""
    traces = facts.traces
    if traces is None:
        return [unknown(meta, "allowed and denied flows end to end", "traces",
                        "a flow log alone shows traffic, not the decisions that admitted or dropped it")]
    return [_one_sample(traces, "allowed", ALLOWED), _one_sample(traces, "denied", DENIED)]


def evaluate(policy: Policy, facts: Facts) -> list[Finding]:
    """Per flow source: pass if every record is attributable; unattributable addresses fail; an allowed
    flow and a denied attempt reconstructed from log to rule with the ruleset facts."""
    flows = facts.flows
    if flows is None:
        return [unknown(meta, "flow telemetry", "flows"), *_reconstructed(policy, facts)]
    if flows.num_rows == 0:
        return [unknown(meta, "flow telemetry", "flows", "the flow observations are empty"),
                *_reconstructed(policy, facts)]
    attributed = pc.and_(_resolved(flows, "src"), _resolved(flows, "dst"))
    per_source = (
        pa.table(
            {"source": flows.column("source"), "ok": pc.cast(attributed, pa.int64()), "bytes": flows.column("bytes")}
        )
        .group_by("source")
        .aggregate([("ok", "sum"), ("ok", "count"), ("bytes", "sum")])
    )
    out: list[Finding] = []
    for row in sorted(per_source.to_pylist(), key=lambda r: str(r["source"])):
        total, ok = row["ok_count"], row["ok_sum"]
        subject = f"flow source {row['source']}"
        if ok == total:
            out.append(
                Finding(
                    meta.id,
                    Verdict.PASS,
                    subject,
                    f"all {total} flow record(s) attributable to workloads",
                    facts.flow_evidence,
                    requirement=ATTRIBUTED,
                )
            )
        else:
            out.append(
                Finding(
                    meta.id,
                    Verdict.FAIL,
                    subject,
                    f"flow log without workload identity: {total - ok} of {total} record(s) have an endpoint that "
                    "resolves to no node and carries no identity",
                    facts.flow_evidence,
                    remediation_text(meta),
                    requirement=ATTRIBUTED,
                )
            )
    addresses = []
    for side in ("src", "dst"):
        bad = flows.filter(pc.invert(_resolved(flows, side)))
        addresses.append(
            pa.table({"address": bad.column(side), "bytes": bad.column("bytes"), "source": bad.column("source")})
        )
    unresolved = (
        pa.concat_tables(addresses)
        .group_by("address")
        .aggregate([("bytes", "sum"), ("bytes", "count"), ("source", "distinct")])
        .sort_by([("bytes_sum", "descending"), ("address", "ascending")])
    )
    out += [
        Finding(
            meta.id,
            Verdict.FAIL,
            f"address {row['address']}",
            f"flow log without workload identity: {volume(row['bytes_count'], row['bytes_sum'])} to or from an "
            f"address outside the inventory (source {', '.join(sorted(str(s) for s in row['source_distinct']))})",
            facts.flow_evidence,
            remediation_text(meta),
            requirement=ATTRIBUTED,
        )
        for row in unresolved.slice(0, LIST_CAP).to_pylist()
    ]
    if unresolved.num_rows > LIST_CAP:
        out.append(
            Finding(
                meta.id,
                Verdict.FAIL,
                f"{unresolved.num_rows - LIST_CAP} more addresses",
                f"{unresolved.num_rows - LIST_CAP} more unattributable addresses not listed",
                remediation=remediation_text(meta),
                requirement=ATTRIBUTED,
            )
        )
    return out + _reconstructed(policy, facts)
