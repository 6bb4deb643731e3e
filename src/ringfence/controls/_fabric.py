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
from ringfence.controls.interface import ControlMeta, Facts, Finding, Verdict
from ringfence.policy import Policy

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


def rdma_findings(meta: ControlMeta, facts: Facts) -> list[Finding]:
    """Each RDMA key-hygiene finding of the captures (``ringfence rdma``) fails the control."""
    found: Sequence[Any] = facts.rdma or ()
    return [
        Finding(meta.id, Verdict.FAIL, f"RDMA {f.src} → {f.dst} ({f.source})",
                f"ReDMArk {f.id}: {f.name}: {f.pattern}", facts.flow_evidence, f.remediation)
        for f in found
    ]  # fmt: skip


__all__ = ["DEFAULT_PKEY_BASE", "partition_findings", "rdma_findings"]
