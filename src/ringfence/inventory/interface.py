"""What every inventory source produces: a policy *skeleton* — zones, nodes, addresses, workloads.

A source (Slurm, Kubernetes, an Ansible-style hosts file) reads the cluster's own records and yields
:class:`Host` and :class:`Workload` facts; :func:`build_skeleton` turns them into a policy document
with no ``approved`` flows, which ``ringfence discover --inventory`` then completes from observed
traffic. Nothing is dropped silently: a host without an IP address, or whose address another host
already has, is kept in :attr:`Skeleton.unresolved` with the reason, and the CLI prints them.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from ringfence.errors import InputError
from ringfence.policy import Policy, parse_policy

_NAME = re.compile(r"^[a-z0-9]([a-z0-9._-]{0,62}[a-z0-9])?$")


class InventoryError(InputError):
    """An inventory source that cannot be read; ``where`` names the file and line (or JSON path)."""


@dataclass(frozen=True)
class Host:
    """One machine (or pod) as a source records it.

    ``addresses`` are what the source gave — IP literals or host names (resolved through a hosts
    file, never DNS); ``zone`` its group (partition, namespace, inventory group); ``roles`` the other
    groups it belongs to; ``identity`` a workload identity (SPIFFE URI), if the source knows one.
    ``where`` is where the source recorded it (``file:line`` or ``file:items[3]``).
    """

    name: str
    zone: str
    addresses: tuple[str, ...]
    where: str
    roles: tuple[str, ...] = ()
    identity: str | None = None


@dataclass(frozen=True)
class Workload:
    """A running training job: its members (host names as in :class:`Host`) and workload identity."""

    name: str
    identity: str
    members: tuple[str, ...]
    where: str


@dataclass(frozen=True)
class Skeleton:
    """The policy skeleton (a valid ringfence policy with no approved flows) and what did not fit."""

    policy: Policy
    document: dict[str, Any]
    unresolved: tuple[str, ...] = field(default=())

    def render(self, header: Sequence[str] = ()) -> str:
        """The skeleton as a policy YAML file; unresolved hosts as comments at the top."""
        lines = [f"# {h}" for h in header]
        lines += [f"# NOT INCLUDED: {u}" for u in self.unresolved]
        body = yaml.safe_dump(self.document, sort_keys=False, allow_unicode=True)
        return "\n".join(lines) + ("\n" if lines else "") + body


def policy_name(raw: str) -> str:
    """A source's name as a policy name: lower case, other characters as ``-``; a long name is cut
    and given a short hash so that two long names stay distinct."""
    name = re.sub(r"[^a-z0-9._-]+", "-", raw.strip().lower()).strip("-._")
    if len(name) > 64:
        digest = hashlib.sha256(raw.encode()).hexdigest()[:8]
        name = name[:55].rstrip("-._") + "-" + digest
    return name or "unnamed"


def parse_etc_hosts(text: str, source: str) -> dict[str, str]:
    """``/etc/hosts``-format text → host name → its first address (names lower-cased)."""
    out: dict[str, str] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        try:
            address = str(ipaddress.ip_address(fields[0]))
        except ValueError:
            raise InventoryError(f"{source}:{lineno}", f"{fields[0]!r} is not an IP address") from None
        if len(fields) < 2:
            raise InventoryError(f"{source}:{lineno}", "an address without a host name")
        for name in fields[1:]:
            out.setdefault(name.lower(), address)
    return out


def _ip(text: str) -> str | None:
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return None


_DEFAULT_CLASSES = {c: {"protection": "required"} for c in ("storage", "collective", "management", "replication")}


def build_skeleton(
    cluster: str,
    hosts: Iterable[Host],
    workloads: Iterable[Workload] = (),
    resolve: dict[str, str] | None = None,
    source: str = "<inventory>",
) -> Skeleton:
    """Zones, nodes and jobs from ``hosts`` and ``workloads`` as a validated policy skeleton.

    Host names in ``hosts``' addresses are looked up in ``resolve`` (from a hosts file); a host with no
    IP address, a duplicate name or an address another host already has is left out *and listed*.
    """
    resolve = resolve or {}
    zones: dict[str, None] = {}
    nodes: list[dict[str, Any]] = []
    unresolved: list[str] = []
    owner: dict[str, str] = {}
    names: dict[str, str] = {}  # source name → policy name
    for h in hosts:
        name = policy_name(h.name)
        if name in names.values():
            unresolved.append(f"{h.where}: host {h.name!r}: a host named {name!r} is already listed")
            continue
        addresses: list[str] = []
        for a in h.addresses:
            ip = _ip(a) or resolve.get(a.lower()) or resolve.get(a.lower().split(".", 1)[0])
            if ip is not None and ip not in addresses:
                addresses.append(ip)
        if not addresses:
            given = ", ".join(dict.fromkeys(h.addresses)) or "none"
            unresolved.append(f"{h.where}: host {h.name!r} has no IP address (given: {given}); add it to --etc-hosts")
            continue
        clash = next((a for a in addresses if a in owner), None)
        if clash is not None:
            unresolved.append(f"{h.where}: host {h.name!r}: address {clash} is already host {owner[clash]!r}'s")
            continue
        for a in addresses:
            owner[a] = name
        names[h.name] = name
        zone = policy_name(h.zone)
        zones.setdefault(zone, None)
        node: dict[str, Any] = {"name": name, "zone": zone, "addresses": addresses}
        if h.identity:
            node["identity"] = h.identity
        if h.roles:
            node["roles"] = list(dict.fromkeys(h.roles))
        nodes.append(node)
    jobs: list[dict[str, Any]] = []
    for w in workloads:
        members = [names[m] for m in w.members if m in names]
        missing = [m for m in w.members if m not in names]
        if missing:
            unresolved.append(f"{w.where}: job {w.name!r}: member(s) {', '.join(missing)} not among the nodes")
        if members:
            jobs.append({"name": policy_name(w.name), "identity": w.identity, "members": members})
    document: dict[str, Any] = {
        "version": 1,
        "cluster": policy_name(cluster),
        "zones": [{"name": z} for z in zones] or [{"name": "default"}],
        "nodes": nodes,
    }
    if jobs:
        document["jobs"] = jobs
    document["approved"] = []
    document["classes"] = _DEFAULT_CLASSES
    policy = parse_policy(json.dumps(document), source)
    return Skeleton(policy, document, tuple(unresolved))


def read_json(text: str, source: str) -> Any:
    """JSON text, or an :class:`InventoryError` naming line and column."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InventoryError(f"{source}:{exc.lineno}:{exc.colno}", f"not valid JSON: {exc.msg}") from None


def expect(value: Any, kind: type | tuple[type, ...], where: str, what: str) -> Any:
    """``value`` if it is a ``kind``, else an :class:`InventoryError` at ``where``."""
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise InventoryError(where, f"{what}: expected {getattr(kind, '__name__', kind)}, got {type(value).__name__}")
    return value


__all__ = [
    "Host",
    "InventoryError",
    "Skeleton",
    "Workload",
    "build_skeleton",
    "expect",
    "parse_etc_hosts",
    "policy_name",
    "read_json",
]
