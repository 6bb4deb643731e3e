"""Control point ``telemetry``: flow logs carry workload identity, so every flow can be attributed."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from ringfence.controls._common import LIST_CAP, remediation_text, unknown, volume
from ringfence.controls.interface import ControlMeta, Facts, Finding, Verdict
from ringfence.policy import Policy

meta = ControlMeta(
    id="telemetry",
    title="Network telemetry with identity context",
    objective="Every flow record can be attributed to a workload: it carries a workload identity or its "
    "addresses resolve to inventory nodes, so an investigation never stops at a bare IP address.",
    acceptance="Permitted: flows between inventory nodes are logged with node, zone and job attached. "
    "Denied: a flow from an address nobody owns is flagged as unattributable rather than silently logged.",
    facts=("flows",),
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


def evaluate(policy: Policy, facts: Facts) -> list[Finding]:
    """Per flow source: pass if every record is attributable; unattributable addresses fail."""
    flows = facts.flows
    if flows is None:
        return [unknown(meta, "flow telemetry", "flows")]
    if flows.num_rows == 0:
        return [unknown(meta, "flow telemetry", "flows", "the flow observations are empty")]
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
            )
        )
    return out
