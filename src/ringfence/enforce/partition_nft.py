"""A partition per job on a Linux-bridge fabric: nftables chains keyed by the bridge port each rank is on.

Where the fabric is Linux bridges (the lab's ``<prefix>-fabric`` namespace; a host acting as a switch) and the
kernel has no 802.1Q, VRF or bridge VLAN filtering, this is the partition that :mod:`.partitions` renders as
PKEYs and VLANs for real switches. Keyed by *port*, not by address, so a rank cannot leave its partition by
forging its source address or MAC. For each job that declares ``jobs[].partition``:

* **L2** (``bridge ringfence``, chain ``partition``, hook forward, before the policy's ``filter``): a frame
  from a member port goes only to a port of the same job; a frame from any other port never reaches a member
  port. Every frame — ARP included — so another job's rank cannot even resolve a member's address. Each drop
  updates ``part_denied`` (source MAC . egress port, with a counter), so a probe that sent from a MAC of its
  own proves *its* frame was dropped, as ``denied`` does for the policy's drops.
* **L3** (``inet ringfence``, chain ``partition``, hook forward): a frame entering the bridge on a job
  member's port is marked with its job (bridge ``prerouting``; the mark survives into routing), and a routed
  packet from one job's port to an address of another job's rank is dropped (``part_denied`` keyed like
  ``denied``) when either job is partitioned. A node in no job is left to the zone policy on the routed path:
  shared services (storage, the job API) are reached through the zone gateway, as through leaked routes of a VRF.

Ports come from the target (the lab's topology; never from the policy). A partitioned job without members,
a member without a port, or a node in two jobs is an error naming it — never a silently open port.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from ringfence.enforce import nft_json as nj
from ringfence.enforce.interface import EnforceError
from ringfence.enforce.nftables import TABLE
from ringfence.policy import Policy

#: the mark a job's frames carry from the bridge into routing: this base plus the job's index
MARK_BASE: Final = 0x72660000
#: the per-drop record both families keep (see the module docstring)
DENIED_SET: Final = "part_denied"
DENIED_SIZE: Final = 4096
DENIED_TIMEOUT_S: Final = 3600
#: priority of the partition chains: before the policy's own filter chains (priority 0)
PRIORITY: Final = -10


@dataclass(frozen=True)
class PartitionJob:
    """One job as the fabric sees it: its ranks, their bridge ports and addresses, and whether it is partitioned."""

    name: str
    partitioned: bool
    members: tuple[str, ...]
    ports: tuple[str, ...]  # the members' bridge ports, in member order
    addresses: tuple[str, ...]


def partition_jobs(policy: Policy, ports: Mapping[str, Sequence[str]]) -> tuple[PartitionJob, ...]:
    """Every job of ``policy`` with its members' ports (``ports``: node → its bridge ports on the fabric).

    Empty when no job declares a partition (nothing to install). :class:`EnforceError` names a node in two
    jobs, or a member without a port, when one does.
    """
    if not any(j.partition is not None for j in policy.jobs):
        return ()
    owner: dict[str, str] = {}
    out: list[PartitionJob] = []
    addresses = {n.name: n.addresses for n in policy.nodes}
    for job in policy.jobs:
        for m in job.members:
            if m in owner and owner[m] != job.name:
                raise EnforceError(f"jobs {owner[m]} and {job.name} both have node {m}: a port is in one partition "
                                   "only", hint="give each job its own nodes, or drop jobs[].partition")
            owner[m] = job.name
        mine: list[str] = []
        for m in job.members:
            got = tuple(ports.get(m, ()))
            if not got:
                raise EnforceError(f"job {job.name}: node {m} has no bridge port on the fabric",
                                   hint="the target names each node's fabric port (the lab does)")
            mine.extend(got)
        out.append(PartitionJob(job.name, job.partition is not None, tuple(job.members), tuple(mine),
                                tuple(a for m in job.members for a in addresses.get(m, ()))))
    return tuple(out)


def _check(jobs: Sequence[PartitionJob]) -> None:
    seen: dict[str, str] = {}
    for j in jobs:
        if not j.members or not j.ports:
            raise EnforceError(f"job {j.name} has no members (or no ports): a partition of nobody isolates nothing")
        for p in j.ports:
            if p in seen and seen[p] != j.name:
                raise EnforceError(f"bridge port {p} is in jobs {seen[p]} and {j.name}: a port is in one partition")
            seen[p] = j.name


def _ifname_set(family: str, name: str, elems: Sequence[str]) -> nj.Json:
    body: nj.Json = {"family": family, "table": TABLE, "name": name, "type": "ifname"}
    if elems:
        body["elem"] = sorted(set(elems))
    return nj.add({"set": body})


def _map(family: str, name: str, key: str, value: str, elems: Sequence[tuple[object, object]]) -> nj.Json:
    body: nj.Json = {"family": family, "table": TABLE, "name": name, "type": key, "map": value}
    if elems:
        body["elem"] = [[k, v] for k, v in elems]
    return nj.add({"map": body})


def _named_counter(family: str, name: str) -> nj.Json:
    return nj.add({"counter": {"family": family, "table": TABLE, "name": name}})


def counter_name(layer: str, job: str) -> str:
    """The named counter of ``job``'s drops at ``layer`` (``l2`` or ``l3``)."""
    return f"part_{layer}_{job}"


def _drop(family: str, chain: str, record: nj.Json, counter: str, comment: str) -> nj.Json:
    expr = [record, {"counter": counter}, nj.verdict("drop")]
    return nj.add(nj.rule(family, TABLE, chain, expr, comment))


def render_partition(jobs: Sequence[PartitionJob]) -> list[nj.Json]:
    """nft JSON commands adding the partition chains to the fabric's ``bridge`` and ``inet`` ringfence tables.

    Append them to the fabric's ruleset (:func:`ringfence.enforce.nftables.render_fabric`), which creates both
    tables; empty when no job is partitioned.
    """
    parted = [j for j in jobs if j.partitioned]
    if not parted:
        return []
    _check(jobs)
    br, inet = "bridge", "inet"
    cmds: list[nj.Json] = []
    l2_record = nj.set_add(DENIED_SET, nj.payload("ether", "saddr"), nj.meta("oifname"))
    l3_record = nj.set_add(DENIED_SET, nj.payload("ip", "saddr"), nj.payload("ip", "daddr"), nj.meta("l4proto"),
                           nj.payload("th", "sport"), nj.payload("th", "dport"))
    # L2: member ports, per-job port sets, the source-port dispatch, the marks into routing
    cmds.append(nj.add(nj.dynamic_set(br, TABLE, DENIED_SET, ("ether_addr", "ifname"), size=DENIED_SIZE,
                                      timeout_s=DENIED_TIMEOUT_S)))
    cmds.append(_ifname_set(br, "part_members", [p for j in parted for p in j.ports]))
    cmds.append(_ifname_set(br, "job_ports", [p for j in jobs for p in j.ports]))
    marks = [(p, MARK_BASE + i + 1) for i, j in enumerate(jobs) for p in j.ports]
    cmds.append(_map(br, "part_mark", "ifname", "mark", marks))
    for j in parted:
        cmds.append(_ifname_set(br, f"part_ports_{j.name}", j.ports))
        cmds.append(_named_counter(br, counter_name("l2", j.name)))
        cmds.append(nj.add(nj.chain(br, TABLE, f"part_{j.name}")))
    cmds.append(_map(br, "part_src", "ifname", "verdict",
                     [(p, {"jump": {"target": f"part_{j.name}"}}) for j in parted for p in j.ports]))
    cmds.append(nj.add(nj.chain(br, TABLE, "part_mark_in", "prerouting", -300)))
    cmds.append(nj.add(nj.chain(br, TABLE, "partition", "forward", PRIORITY)))
    cmds.append(nj.add(nj.rule(br, TABLE, "part_mark_in", [
        nj.match(nj.meta("iifname"), "@job_ports"),
        {"mangle": {"key": nj.meta("mark"), "value": {"map": {"key": nj.meta("iifname"), "data": "@part_mark"}}}},
    ], "a job's frames carry their job into routing")))
    for j in parted:
        chain = f"part_{j.name}"
        cmds.append(nj.add(nj.rule(br, TABLE, chain, [nj.match(nj.meta("oifname"), f"@part_ports_{j.name}"),
                                                       nj.verdict("accept")], f"job {j.name}: within its partition")))
        cmds.append(_drop(br, chain, l2_record, counter_name("l2", j.name), f"job {j.name}: out of its partition"))
    # accept ends only this base chain: the policy's own filter chain (priority 0) still judges the frame
    cmds.append(nj.add(nj.rule(br, TABLE, "partition", [nj.vmap(nj.meta("iifname"), "part_src")],
                               "frames from a partitioned job's port")))
    # a frame from any other port into a member port: counted against the job it would have reached
    cmds.extend(nj.add(nj.rule(br, TABLE, "partition", [
        nj.match(nj.meta("oifname"), f"@part_ports_{j.name}"), l2_record,
        {"counter": counter_name("l2", j.name)}, nj.verdict("drop"),
    ], f"into job {j.name}'s partition from outside it")) for j in parted)
    # L3: a job's routed packets never reach another job's ranks where either is partitioned
    cmds.append(nj.add(nj.dynamic_set(inet, TABLE, DENIED_SET,
                                      ("ipv4_addr", "ipv4_addr", "inet_proto", "inet_service", "inet_service"),
                                      size=DENIED_SIZE, timeout_s=DENIED_TIMEOUT_S)))
    dispatch: list[tuple[object, object]] = []
    for i, j in enumerate(jobs):
        forbidden = sorted({a for k in jobs if k.name != j.name and (j.partitioned or k.partitioned)
                            for a in k.addresses})
        if not forbidden:
            continue
        chain = f"part_l3_{j.name}"
        cmds.append(nj.add(nj.addr_set(inet, TABLE, f"part_forbid_{j.name}", forbidden)))
        cmds.append(_named_counter(inet, counter_name("l3", j.name)))
        cmds.append(nj.add(nj.chain(inet, TABLE, chain)))
        cmds.append(nj.add(nj.rule(inet, TABLE, chain, [
            nj.match(nj.payload("ip", "daddr"), f"@part_forbid_{j.name}"), nj.l4_ports(), l3_record,
            {"counter": counter_name("l3", j.name)}, nj.verdict("drop"),
        ], f"job {j.name}: routed to another job's rank")))
        cmds.append(nj.add(nj.rule(inet, TABLE, chain, [
            nj.match(nj.payload("ip", "daddr"), f"@part_forbid_{j.name}"),
            {"counter": counter_name("l3", j.name)}, nj.verdict("drop"),
        ], f"job {j.name}: routed to another job's rank (no ports)")))
        dispatch.append((MARK_BASE + i + 1, {"jump": {"target": chain}}))
    cmds.append(_map(inet, "part_l3", "mark", "verdict", dispatch))
    cmds.append(nj.add(nj.chain(inet, TABLE, "partition", "forward", PRIORITY)))
    cmds.append(nj.add(nj.rule(inet, TABLE, "partition", [nj.vmap(nj.meta("mark"), "part_l3")],
                               "routed packets of a job, by the port they entered on")))
    return cmds


__all__ = [
    "DENIED_SET",
    "MARK_BASE",
    "PartitionJob",
    "counter_name",
    "partition_jobs",
    "render_partition",
]
