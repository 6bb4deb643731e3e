"""Builders for libnftables JSON (``nft -j``) objects, so the renderer reads as rules rather than dict noise.

Only what ringfence emits is here: payload/meta/ct matches, set lookups, verdict-map dispatch,
dynamic-set updates, counters, logs and verdicts. The shapes follow libnftables-json(5).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

Json = dict[str, Any]


def payload(protocol: str, fld: str) -> Json:
    """``ip saddr``, ``tcp dport``, ``th sport`` …"""
    return {"payload": {"protocol": protocol, "field": fld}}


def meta(key: str) -> Json:
    """``meta l4proto``, ``iifname`` …"""
    return {"meta": {"key": key}}


def match(left: Any, right: Any, op: str = "==") -> Json:
    """A match statement ``left op right``."""
    return {"match": {"op": op, "left": left, "right": right}}


def ports(lo: int, hi: int) -> Any:
    """A port or an inclusive port range as a match right-hand side."""
    return lo if lo == hi else {"range": [lo, hi]}


def counter() -> Json:
    """An anonymous counter."""
    return {"counter": None}


def log(prefix: str) -> Json:
    """A log statement (nft truncates prefixes at 127 bytes; ours stay short)."""
    return {"log": {"prefix": prefix[:120]}}


def verdict(name: str, target: str | None = None) -> Json:
    """``accept``/``drop``/``return`` or ``jump TARGET``."""
    if target is not None:
        return {name: {"target": target}}
    return {name: None}


def ct_state(*states: str) -> Json:
    """``ct state { … }``."""
    return match({"ct": {"key": "state"}}, list(states), "in")


def ct_original(key: str) -> Json:
    """``ct original <key>``: the connection's field as the client sent it, before any local NAT."""
    return {"ct": {"key": key, "dir": "original"}}


def l4_ports() -> Json:
    """``meta l4proto { tcp, udp }``: the packets whose transport header has ports."""
    return match(meta("l4proto"), {"set": ["tcp", "udp"]})


def set_add(set_name: str, *keys: Json) -> Json:
    """``add @SET { k1 . k2 … }`` (a dynamic-set update from the packet path)."""
    elem: Any = keys[0] if len(keys) == 1 else {"concat": list(keys)}
    return {"set": {"op": "add", "elem": elem, "set": f"@{set_name}"}}


def vmap(key: Json, map_name: str) -> Json:
    """``KEY vmap @MAP``."""
    return {"vmap": {"key": key, "data": f"@{map_name}"}}


def table(family: str, name: str) -> Json:
    """A table object."""
    return {"table": {"family": family, "name": name}}


def chain(family: str, tbl: str, name: str, hook: str | None = None, priority: int = 0) -> Json:
    """A regular chain, or a base chain with policy accept (the rules end in their own counted drop)."""
    body: Json = {"family": family, "table": tbl, "name": name}
    if hook is not None:
        body.update({"type": "filter", "hook": hook, "prio": priority, "policy": "accept"})
    return {"chain": body}


def rule(family: str, tbl: str, chain_name: str, expr: Sequence[Json], comment: str | None = None) -> Json:
    """A rule object."""
    body: Json = {"family": family, "table": tbl, "chain": chain_name, "expr": list(expr)}
    if comment:
        body["comment"] = comment[:120]
    return {"rule": body}


def addr_set(family: str, tbl: str, name: str, elements: Sequence[str], *, interval: bool = False) -> Json:
    """A named IPv4 address set; with ``interval``, elements may be networks (``10.0.0.0/8``)."""
    body: Json = {"family": family, "table": tbl, "name": name, "type": "ipv4_addr"}
    if interval:
        body["flags"] = ["interval"]
        body["auto-merge"] = True
    if elements:
        body["elem"] = [_addr_elem(e) for e in elements]
    return {"set": body}


def _addr_elem(text: str) -> Any:
    if "/" in text:
        addr, length = text.split("/", 1)
        return {"prefix": {"addr": addr, "len": int(length)}}
    return text


def dynamic_set(family: str, tbl: str, name: str, types: Sequence[str], *, size: int, timeout_s: int) -> Json:
    """A packet-path-updated set whose every element carries its own counter (the per-flow evidence)."""
    return {"set": {
        "family": family, "table": tbl, "name": name, "type": list(types) if len(types) > 1 else types[0],
        "flags": ["timeout"], "size": size, "timeout": timeout_s, "stmt": [counter()],
    }}


def verdict_map(family: str, tbl: str, name: str, entries: Sequence[tuple[str, str]]) -> Json:
    """A map ``ipv4_addr : verdict`` whose entries jump to chains."""
    body: Json = {"family": family, "table": tbl, "name": name, "type": "ipv4_addr", "map": "verdict"}
    if entries:
        body["elem"] = [[addr, {"jump": {"target": target}}] for addr, target in entries]
    return {"map": body}


def add(obj: Json) -> Json:
    """Wrap an object in an ``add`` command."""
    return {"add": obj}


def delete(obj: Json) -> Json:
    """Wrap an object in a ``delete`` command."""
    return {"delete": obj}


__all__ = [
    "Json",
    "add",
    "addr_set",
    "chain",
    "counter",
    "ct_state",
    "delete",
    "dynamic_set",
    "l4_ports",
    "log",
    "match",
    "meta",
    "payload",
    "ports",
    "rule",
    "set_add",
    "table",
    "verdict",
    "verdict_map",
    "vmap",
]
