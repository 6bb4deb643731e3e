"""Temporary exceptions that expire at the enforcement point, with no action from anyone.

An exception that ``opens`` a path renders as one element per (source, destination, proto, port) of
an nftables set ``exceptions`` whose every element carries its own kernel ``timeout``: the remaining
time until the exception's expiry at render time. A single accept rule per base chain looks the
packet up in that set, so when the kernel drops the element the path closes on time — no cron job,
no re-apply, nobody remembering. An exception already expired renders nothing (fails closed).
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Sequence
from datetime import UTC, datetime

from ringfence.enforce import nft_json as nj
from ringfence.enforce.interface import EnforceError, RenderOptions, TimedPath
from ringfence.policy import Policy

#: The set's name in every ringfence table; the rule's comment names it too, for drift reports.
SET = "exceptions"
_KEY = ("ipv4_addr", "ipv4_addr", "inet_proto", "inet_service")


def _addresses(policy: Policy, name: str, where: str) -> tuple[str, ...]:
    node = policy.node(name)
    if node is not None:
        return tuple(a for a in node.addresses if ipaddress.ip_address(a).version == 4)
    try:
        addr = ipaddress.ip_address(name)
    except ValueError:
        raise EnforceError(f"{where}: {name!r} is neither a node of the inventory nor an IPv4 address") from None
    if addr.version != 4:
        raise EnforceError(f"{where}: {name!r} is not IPv4 (the exceptions set is keyed by IPv4 addresses)")
    return (str(addr),)


def timed_paths(policy: Policy, now: datetime | None = None) -> tuple[TimedPath, ...]:
    """Every path an unexpired exception opens, with the whole seconds it has left at ``now``."""
    at = now or datetime.now(UTC)
    out: list[TimedPath] = []
    for e in policy.exceptions:
        if e.opens is None:
            continue
        left = math.ceil((e.expires_at() - at).total_seconds())
        if left <= 0:
            continue  # expired: nothing is rendered, so nothing is open
        where = f"exception {e.id}"
        dsts = _addresses(policy, e.opens.destination, where)
        out.extend(TimedPath(e.id, src, dst, e.opens.proto, e.opens.port, left)
                   for src in _addresses(policy, e.opens.source, where) for dst in dsts)
    return tuple(out)


def _set(family: str, table: str, paths: Sequence[TimedPath]) -> nj.Json:
    elems = [{"elem": {"val": {"concat": [p.source, p.destination, p.proto, p.port]}, "timeout": p.timeout_s}}
             for p in paths]
    return nj.add({"set": {"family": family, "table": table, "name": SET, "type": list(_KEY),
                           "flags": ["timeout"], "elem": elems}})


def add_exception_rules(family: str, table: str, chain: str, options: RenderOptions,
                        objects: list[nj.Json], rules: list[nj.Json]) -> None:
    """Add the timed set (once per table) and ``chain``'s accept rule for it; nothing without timed paths."""
    if not options.timed:
        return  # no exception opens a path: the ruleset is exactly what it was without this feature
    if not any(o.get("add", {}).get("set", {}).get("name") == SET for o in objects):
        objects.append(_set(family, table, options.timed))
    key = nj.match({"concat": [nj.payload("ip", "saddr"), nj.payload("ip", "daddr"), nj.meta("l4proto"),
                               nj.payload("th", "dport")]}, f"@{SET}")
    rules.append(nj.add(nj.rule(family, table, chain, [key, nj.counter(), nj.verdict("accept")],
                                "exception paths (expire by kernel timeout)")))


__all__ = ["SET", "add_exception_rules", "timed_paths"]
