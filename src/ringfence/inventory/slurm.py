"""Inventory from Slurm: ``scontrol show nodes`` (text), ``sinfo --json``, ``scontrol show partitions``
(text) and, for running jobs as workloads, ``squeue --json``.

Zones are partitions: a node's zone is its first partition, its other partitions become roles
(``partition:NAME``). Slurm records host names (``NodeAddr``); an address that is not an IP literal is
resolved through a hosts file given by the user, never through DNS. The JSON layout changes between
Slurm releases: both the flat 21.08/22.05 ``nodes`` list and the 23.02+ ``sinfo`` entries are read.
"""

from __future__ import annotations

import re
from typing import Any

from ringfence.inventory.interface import Host, InventoryError, Workload, expect, read_json

_KEY = re.compile(r"^([A-Za-z][A-Za-z0-9_/:.]*)=(.*)$")
UNPARTITIONED = "unpartitioned"


def expand_hostlist(expr: str, where: str) -> list[str]:
    """Slurm host-list syntax → names: ``gpu[01-03,7],cpu1`` → gpu01 gpu02 gpu03 gpu7 cpu1."""
    out: list[str] = []
    depth, start = 0, 0
    parts: list[str] = []
    for i, ch in enumerate(expr):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise InventoryError(where, f"unbalanced ']' in host list {expr!r}")
        elif ch == "," and depth == 0:
            parts.append(expr[start:i])
            start = i + 1
    if depth:
        raise InventoryError(where, f"unbalanced '[' in host list {expr!r}")
    parts.append(expr[start:])
    for part in (p.strip() for p in parts):
        if not part:
            continue
        m = re.fullmatch(r"([^\[\]]*)\[([^\[\]]+)\]([^\[\]]*)", part)
        if m is None:
            if "[" in part or "]" in part:
                raise InventoryError(where, f"cannot read host list element {part!r}")
            out.append(part)
            continue
        prefix, ranges, suffix = m.groups()
        for r in ranges.split(","):
            lo, sep, hi = r.partition("-")
            if not lo.isdigit() or (sep and not hi.isdigit()):
                raise InventoryError(where, f"bad range {r!r} in host list {expr!r}")
            width = len(lo)
            first, last = int(lo), int(hi) if sep else int(lo)
            if last < first or last - first > 100_000:
                raise InventoryError(where, f"bad range {r!r} in host list {expr!r}")
            out += [f"{prefix}{n:0{width}d}{suffix}" for n in range(first, last + 1)]
    return out


def _records(text: str, source: str, head: str) -> list[tuple[int, dict[str, str]]]:
    """``Key=Value`` records of scontrol text, each starting at a ``head=`` token (multi-line or
    ``--oneliner``). Values may hold spaces (``OS=Linux 5.14 #1 SMP``): a token without ``=`` belongs
    to the value before it."""
    records: list[tuple[int, dict[str, str]]] = []
    current: dict[str, str] | None = None
    last_key = ""
    for lineno, line in enumerate(text.splitlines(), 1):
        for token in line.split():
            m = _KEY.match(token)
            if m is not None and m.group(1) == head:
                current = {}
                records.append((lineno, current))
            if current is None:
                raise InventoryError(f"{source}:{lineno}", f"expected a record starting with {head}=, got {token!r}")
            if m is not None:
                last_key = m.group(1)
                current[last_key] = m.group(2)
            else:
                current[last_key] = f"{current.get(last_key, '')} {token}".strip()
    return records


def _none(value: str) -> bool:
    return value in ("", "(null)", "N/A", "None")


def parse_scontrol_nodes(text: str, source: str) -> list[Host]:
    """``scontrol show nodes`` (or ``--oneliner``) → hosts."""
    hosts: list[Host] = []
    for lineno, rec in _records(text, source, "NodeName"):
        where = f"{source}:{lineno}"
        name = rec["NodeName"]
        if _none(name):
            raise InventoryError(where, "a node without a name")
        addresses = [a for a in rec.get("NodeAddr", "").split(",") if not _none(a)]
        host = rec.get("NodeHostName", "")
        if not addresses and not _none(host):
            addresses = [host]
        parts = [p for p in rec.get("Partitions", "").split(",") if not _none(p)]
        hosts.append(_host(name, addresses or [name], parts, where))
    if not hosts:
        raise InventoryError(source, "no NodeName= records: not `scontrol show nodes` output")
    return hosts


def parse_scontrol_partitions(text: str, source: str) -> dict[str, list[str]]:
    """``scontrol show partitions`` → node name → its partitions, in the order listed."""
    out: dict[str, list[str]] = {}
    for lineno, rec in _records(text, source, "PartitionName"):
        nodes = rec.get("Nodes", "")
        for node in [] if _none(nodes) else expand_hostlist(nodes, f"{source}:{lineno}"):
            out.setdefault(node, []).append(rec["PartitionName"])
    return out


def _host(name: str, addresses: list[str], partitions: list[str], where: str) -> Host:
    zone = partitions[0] if partitions else UNPARTITIONED
    return Host(name, zone, tuple(addresses), where, tuple(f"partition:{p}" for p in partitions[1:]))


def _strings(value: Any, where: str, what: str) -> list[str]:
    if isinstance(value, str):
        return [v for v in value.split(",") if v]
    items = expect(value, list, where, what)
    return [expect(v, str, f"{where}[{i}]", what) for i, v in enumerate(items)]


def parse_sinfo_json(text: str, source: str) -> list[Host]:
    """``sinfo --json`` → hosts (the flat ``nodes`` list of 21.08/22.05, or 23.02+ ``sinfo`` entries)."""
    doc = expect(read_json(text, source), dict, source, "sinfo --json output")
    hosts: dict[str, Host] = {}
    if "nodes" in doc:
        for i, n in enumerate(expect(doc["nodes"], list, f"{source}: nodes", "nodes")):
            where = f"{source}: nodes[{i}]"
            n = expect(n, dict, where, "a node")
            name = expect(n.get("name"), str, f"{where}.name", "node name")
            addrs = [a for a in (n.get("address"), n.get("hostname")) if isinstance(a, str) and a]
            parts = _strings(n.get("partitions", []), f"{where}.partitions", "partitions")
            hosts.setdefault(name, _host(name, addrs or [name], parts, where))
    elif "sinfo" in doc:
        for i, entry in enumerate(expect(doc["sinfo"], list, f"{source}: sinfo", "sinfo")):
            where = f"{source}: sinfo[{i}]"
            entry = expect(entry, dict, where, "an sinfo entry")
            nodes = expect(entry.get("nodes", {}), dict, f"{where}.nodes", "nodes")
            names = _strings(nodes.get("nodes", []), f"{where}.nodes.nodes", "node names")
            addrs = _strings(nodes.get("addresses", []), f"{where}.nodes.addresses", "addresses")
            part = expect(entry.get("partition", {}), dict, f"{where}.partition", "partition")
            pname = part.get("name")
            for k, name in enumerate(names):
                addr = [addrs[k]] if k < len(addrs) and len(addrs) == len(names) else [name]
                prev = hosts.get(name)
                parts = [*(p.removeprefix("partition:") for p in ((prev.zone,) + prev.roles))] if prev else []
                if isinstance(pname, str) and pname and pname not in parts:
                    parts.append(pname)
                parts = [p for p in parts if p != UNPARTITIONED]
                hosts[name] = _host(name, addr, parts, prev.where if prev else where)
    else:
        raise InventoryError(source, "not `sinfo --json` output: no 'nodes' or 'sinfo' list")
    if not hosts:
        raise InventoryError(source, "sinfo --json lists no nodes")
    return list(hosts.values())


def with_partitions(hosts: list[Host], partitions: dict[str, list[str]]) -> list[Host]:
    """Hosts with zones from ``scontrol show partitions`` where it lists them (it is the authority)."""
    return [
        _host(h.name, list(h.addresses), partitions[h.name], h.where) if h.name in partitions else h for h in hosts
    ]


def parse_squeue_json(text: str, source: str, cluster: str) -> list[Workload]:
    """``squeue --json`` → running jobs as workloads (identity ``slurm:CLUSTER/job/ID``)."""
    doc = expect(read_json(text, source), dict, source, "squeue --json output")
    out: list[Workload] = []
    for i, job in enumerate(expect(doc.get("jobs"), list, f"{source}: jobs", "jobs")):
        where = f"{source}: jobs[{i}]"
        job = expect(job, dict, where, "a job")
        state = job.get("job_state")
        states = state if isinstance(state, list) else [state]
        if "RUNNING" not in states:
            continue
        job_id = job.get("job_id")
        expect(job_id, int, f"{where}.job_id", "job id")
        nodes = expect(job.get("nodes", ""), str, f"{where}.nodes", "nodes")
        name = job.get("name") if isinstance(job.get("name"), str) and job.get("name") else "job"
        members = tuple(expand_hostlist(nodes, f"{where}.nodes"))
        out.append(Workload(f"{name}-{job_id}", f"slurm:{cluster}/job/{job_id}", members, where))
    return out


__all__ = [
    "UNPARTITIONED",
    "expand_hostlist",
    "parse_scontrol_nodes",
    "parse_scontrol_partitions",
    "parse_sinfo_json",
    "parse_squeue_json",
    "with_partitions",
]
