"""Control point ``telemetry``: flow logs carry workload identity, so every flow can be attributed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ringfence.controls._common import LIST_CAP, remediation_text, unknown, volume
from ringfence.controls._flows import CAPTURE
from ringfence.controls.interface import ControlMeta, Facts, Finding, Requirement, Side, Verdict
from ringfence.policy import Policy

#: Requirement ids.
ATTRIBUTED, ALLOWED, DENIED = "flows-attributed", "allowed-flow-reconstructed", "denied-attempt-reconstructed"
RULESET = "ringfence probe POLICY --target lab -o probes.json --ruleset ruleset.json"

meta = ControlMeta(
    id="telemetry",
    title="Network telemetry with identity context",
    objective="Every flow record can be attributed to a workload: it carries a workload identity or its "
    "addresses resolve to inventory nodes, so an investigation never stops at a bare IP address.",
    acceptance="Permitted: a sampled allowed flow is reconstructed end to end — logged with node, zone and job "
    "attached, and counted by the accept rule that admits it. Denied: a denied attempt is reconstructed from the "
    "firewall's drop log, attributed to the node that tried; a flow from an address nobody owns is flagged as "
    "unattributable rather than silently logged.",
    facts=("flows", "ruleset"),
    requirements=(
        Requirement(ATTRIBUTED, Side.PERMITTED, "every flow record resolves to inventory nodes or carries a workload "
                    "identity", ("flows",), CAPTURE),
        Requirement(ALLOWED, Side.PERMITTED, "an approved flow seen in the flow log is also counted by its accept "
                    "rule in the live ruleset", ("flows", "ruleset"), RULESET),
        Requirement(DENIED, Side.DENIED, "a denied attempt appears in the firewall's drop log, attributed to an "
                    "inventory node", ("ruleset",), RULESET),
    ),
    remediation={
        "nftables": "log with a prefix per rule and keep address sets in step with the inventory",
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


def _accepted(ruleset: Mapping[str, Any]) -> dict[str, list[str]]:
    """approved-flow id → the enforcement points whose accept rule for it counted packets."""
    out: dict[str, list[str]] = {}
    points = ruleset.get("points")
    for scope, point in sorted(points.items()) if isinstance(points, Mapping) else ():
        counted = point.get("accepted_packets") if isinstance(point, Mapping) else None
        for fid, n in counted.items() if isinstance(counted, Mapping) else ():
            if isinstance(n, int) and not isinstance(n, bool) and n > 0:
                out.setdefault(str(fid), []).append(str(scope))
    return out


def _reconstructed(policy: Policy, facts: Facts) -> list[Finding]:
    """A sampled allowed flow and a denied attempt, each followed from log to rule (the acceptance)."""
    ruleset = facts.ruleset
    if ruleset is None:
        return [unknown(meta, "allowed and denied flows end to end", "ruleset",
                        "a capture alone shows traffic, not the decisions that admitted or dropped it")]
    out: list[Finding] = []
    counted = _accepted(ruleset)
    flows = facts.flows
    seen = set(flows.column("rule").drop_null().to_pylist()) if flows is not None and flows.num_rows else set()
    both = sorted(seen & set(counted))
    if both:
        fid = both[0]
        out.append(Finding(meta.id, Verdict.PASS, f"allowed flow {fid}",
                           f"seen in the flow log and counted by its accept rule at {', '.join(counted[fid])}",
                           facts.flow_evidence, requirement=ALLOWED))
    else:
        out.append(Finding(meta.id, Verdict.UNKNOWN, "allowed flow end to end",
                           "no approved flow is both in the flow log and counted by an accept rule of the ruleset",
                           requirement=ALLOWED))
    nodes = {a: n.name for n in policy.nodes for a in n.addresses}
    denied = ruleset.get("denied")
    rows = [d for d in denied if isinstance(d, Mapping)] if isinstance(denied, list) else []
    attributed = [d for d in rows if str(d.get("source")) in nodes and isinstance(d.get("packets"), int)
                  and not isinstance(d.get("packets"), bool) and int(d["packets"]) > 0]
    if attributed:
        d = attributed[0]
        where = d.get("where")
        at = f" at {', '.join(str(w) for w in where)}" if isinstance(where, list) and where else ""
        out.append(Finding(meta.id, Verdict.PASS, f"denied attempt from node {nodes[str(d['source'])]}",
                           f"{d['source']} → {d.get('destination')} {d.get('proto')}/{d.get('port')}: "
                           f"{d['packets']} packet(s) dropped{at}, attributed to its node", requirement=DENIED))
    else:
        out.append(Finding(meta.id, Verdict.UNKNOWN, "denied attempt end to end",
                           "the ruleset's drop log holds no denied attempt from an inventory node", requirement=DENIED))
    return out


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
