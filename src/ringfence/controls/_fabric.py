"""Fabric hygiene for ``training_traffic``: a job's collective flows stay in its partition; RDMA key hygiene.

Partitions are judged only where the policy declares one (``jobs[].partition``): a collective flow of a job seen
with a P_Key (RoCEv2 BTH) on the default partition (base 0x7FFF: 0xFFFF full or 0x7FFF limited member), or with
a P_Key or a VLAN id other than its job's, fails. A flow that shows no P_Key or no VLAN tag is not judged on
it (a host-side capture often sees neither): the pass names what was observed, never what was not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import pyarrow as pa

from ringfence.controls._common import who
from ringfence.controls.interface import ControlMeta, Facts, Finding, Requirement, Side, Verdict
from ringfence.policy import Job, Policy

#: P_Key base value of the default partition (the membership bit is the top bit).
DEFAULT_PKEY_BASE: Final = 0x7FFF


def _partition_row(policy: Policy, row: Mapping[str, Any]) -> str | None:
    """Why the flow is outside its job's partition, or None."""
    job = policy.job(row["src_job"])
    part = job.partition if job is not None else None
    pkey, vlan = row.get("pkey"), row.get("vlan")
    if pkey is not None and pkey & 0x7FFF == DEFAULT_PKEY_BASE:
        return f"on the default partition P_Key {pkey:#06x}"
    if part is None:
        return None
    if pkey is not None and part.pkey is not None and pkey & 0x7FFF != part.pkey:
        return f"on P_Key {pkey:#06x}, not the job's partition {part.pkey:#06x}"
    if vlan is not None and part.vlan is not None and vlan != part.vlan:
        return f"on VLAN {vlan}, not the job's partition VLAN {part.vlan}"
    return None


def partition_findings(meta: ControlMeta, policy: Policy, facts: Facts) -> list[Finding]:
    """Collective flows of a job outside its partition fail (only when the policy declares partitions)."""
    if not any(j.partition is not None for j in policy.jobs) or facts.flows is None:
        return []
    table: pa.Table = facts.flows
    needed = {"class", "src_job", "dst_job", "pkey", "vlan"}
    if not needed <= set(table.column_names):
        return []
    out: list[Finding] = []
    judged = 0
    for row in table.to_pylist():  # per flow, not per packet: flows are few
        if row["class"] != "collective" or not row["src_job"] or row["src_job"] != row["dst_job"]:
            continue
        if row.get("pkey") is None and row.get("vlan") is None:
            continue
        judged += 1
        why = _partition_row(policy, row)
        if why is not None:
            out.append(Finding(meta.id, Verdict.FAIL, f"flow {row['src']} → {row['dst']} (job {row['src_job']})",
                               f"collective traffic of job {row['src_job']}: {who(row, 'src')} → {who(row, 'dst')} "
                               f"{why}", facts.flow_evidence, meta.remediation.get("process", "")))  # fmt: skip
    if judged and not out:
        out.append(Finding(meta.id, Verdict.PASS, "job partitions",
                           f"{judged} collective flow(s) showing a P_Key or VLAN id, all in their job's partition",
                           facts.flow_evidence))  # fmt: skip
    return out


PART_PERMITTED: Final = "job-partition-permitted"
PART_DENIED: Final = "job-partition-denied"
PART_GATHER: Final = "ringfence partition prove POLICY --target lab -o partitions.json"


def _declares(policy: Policy) -> bool:
    return any(j.partition is not None for j in policy.jobs)


#: the acceptance of a partition per job, asked only where the policy declares one (jobs[].partition)
PARTITION_REQUIREMENTS: Final = (
    Requirement(PART_PERMITTED, Side.PERMITTED, "a job's ranks reach each other in its partition (L2 and L3) and "
                "keep training", ("partitions",), PART_GATHER, _declares),
    Requirement(PART_DENIED, Side.DENIED, "a rank of another job cannot reach the job's ranks at L2 or L3 "
                "(dropped by the fabric's partition)", ("partitions",), PART_GATHER, _declares),
)

#: what the denied side needs: ARP, a SYN straight to the member's MAC, a SYN through the zone gateway
DENY_LAYERS: Final = ("l2", "l3", "l3-routed")
_REACHED = {"answered", "connected", "refused", "reset"}  # the frame or segment got to the member's host


def _count(steps: Any, member: str) -> bool:
    """Whether ``steps`` holds a step counter (an int, never a bool or text) for ``member``."""
    value = steps.get(member) if isinstance(steps, Mapping) else None
    return isinstance(value, int) and not isinstance(value, bool)


def _permitted(job: Job, entry: Mapping[str, Any], mine: Sequence[Mapping[str, Any]]) -> tuple[Verdict, str]:
    allow = [p for p in mine if p["expected"] == "allow"]
    broken = [p for p in allow if p["outcome"] not in ("answered", "connected")]
    if broken:
        p = broken[0]
        return Verdict.FAIL, (f"{p['source']} → {p['destination']} ({p['layer']}) inside job {job.name}'s partition: "
                              f"{p['outcome']} {p['detail']}".rstrip())
    if len(job.members) > 1 and {p["layer"] for p in allow} != {"l2", "l3"}:
        return Verdict.UNKNOWN, f"no L2 and L3 probe between job {job.name}'s own ranks"
    before, after = entry.get("steps_before", {}), entry.get("steps_after", {})
    stalled = [m for m in job.members if not (_count(before, m) and _count(after, m) and after[m] > before[m])]
    if stalled:
        return Verdict.UNKNOWN, f"job {job.name}'s rank(s) {', '.join(stalled)} showed no training step over the probes"
    steps = ", ".join(f"{m} {before[m]}→{after[m]}" for m in job.members)
    return Verdict.PASS, f"job {job.name}'s ranks reach each other at L2 and L3 in its partition and train ({steps})"


def _denied(job: Job, mine: Sequence[Mapping[str, Any]]) -> tuple[Verdict, str]:
    deny = [p for p in mine if p["expected"] == "deny" and p["source"] not in job.members]
    leaked = [p for p in deny if p["outcome"] in _REACHED]
    if leaked:
        p = leaked[0]
        return Verdict.FAIL, (f"{p['source']} (job {p['source_job'] or 'none'}) reached {p['destination']} of job "
                              f"{job.name} at {p['layer']}: {p['outcome']} — the partition does not hold")
    missing = [layer for layer in DENY_LAYERS if not any(p["layer"] == layer for p in deny)]
    if missing:
        return Verdict.UNKNOWN, f"no rank of another job probed job {job.name}'s ranks at {' and '.join(missing)}"
    unproven = [p for p in deny if p["by_policy"] is not True]
    if unproven:
        p = unproven[0]
        return Verdict.UNKNOWN, (f"{p['source']} → {p['destination']} ({p['layer']}) got no answer, but the fabric's "
                                 "partition record did not move: not shown to be the partition's drop")
    layers = ", ".join(f"{p['layer']} from {p['source']}: {p['outcome']}" for p in deny)
    return Verdict.PASS, f"other jobs' ranks cannot reach job {job.name}'s ranks, dropped by the partition ({layers})"


def job_partition_findings(meta: ControlMeta, policy: Policy, facts: Facts) -> list[Finding]:
    """Each job that declares a partition: proven both ways by the partition probes (``facts.partitions``).

    Missing facts give no finding here: the requirements (:data:`PARTITION_REQUIREMENTS`) then say unknown
    and what to run; stale ones turn these passes into unknown the same way.
    """
    doc = facts.partitions
    declared = [j for j in policy.jobs if j.partition is not None]
    if not declared or not doc:
        return []
    evidence = (str(doc["evidence"]),) if doc.get("evidence") else ()
    entries = {e["job"]: e for e in doc.get("jobs", ())}
    out: list[Finding] = []
    for job in declared:
        entry = entries.get(job.name)
        subject = f"job {job.name} partition"
        if entry is None or entry.get("partitioned") is not True or tuple(entry.get("members", ())) != job.members:
            why = (f"job {job.name} was not probed as partitioned with members {', '.join(job.members)}; "
                   f"gather with `{PART_GATHER}`")
            out += [Finding(meta.id, Verdict.UNKNOWN, subject, why, evidence, requirement=r)
                    for r in (PART_PERMITTED, PART_DENIED)]
            continue
        mine = [p for p in doc.get("probes", ()) if p["destination_job"] == job.name]
        for req, (verdict, why) in ((PART_PERMITTED, _permitted(job, entry, mine)), (PART_DENIED, _denied(job, mine))):
            out.append(Finding(meta.id, verdict, subject, why, evidence,
                               meta.remediation.get("process", "") if verdict is Verdict.FAIL else "",
                               requirement=req))
    return out


def rdma_findings(meta: ControlMeta, facts: Facts) -> list[Finding]:
    """Each RDMA key-hygiene finding of the captures (``ringfence rdma``) fails the control."""
    found: Sequence[Any] = facts.rdma or ()
    return [
        Finding(meta.id, Verdict.FAIL, f"RDMA {f.src} → {f.dst} ({f.source})",
                f"ReDMArk {f.id}: {f.name}: {f.pattern}", facts.flow_evidence, f.remediation)
        for f in found
    ]  # fmt: skip


__all__ = [
    "DEFAULT_PKEY_BASE",
    "PARTITION_REQUIREMENTS",
    "PART_DENIED",
    "PART_PERMITTED",
    "job_partition_findings",
    "partition_findings",
    "rdma_findings",
]
