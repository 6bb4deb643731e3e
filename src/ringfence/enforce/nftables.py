"""nftables renderer: one JSON transaction per node namespace plus one for the fabric.

Shape of every table (``inet ringfence``; the fabric also gets ``bridge ringfence``):

* named address sets keyed by what the policy names (``job_train-a``, ``zone_user``,
  ``service_storage-http``), so rules reference sets and never enumerate nodes;
* in the fabric, one verdict map ``src_dispatch`` from source address to a *group chain*, one per
  distinct combination of flows a source takes part in: a new connection costs one map lookup plus a
  handful of rules, and the rule count grows with approved flows, not with nodes squared;
* a counted, logged drop at the end of every base chain for traffic of the covered zones
  (``--audit``: counted and logged as ``rf-audit`` but accepted), preceded by a dynamic set
  ``denied`` whose elements (saddr . daddr . proto . sport . dport) each carry their own counter —
  a probe finds the element for its own source port and so proves *its* packet was dropped;
* containment sets ``contained``/``collectors`` checked before connection tracking (each drop also
  recorded in ``denied``, so a probe can prove it met containment), so isolating a
  node also cuts its established connections; an apply carries their elements over.

The bridge table is stateless (this kernel has no bridge conntrack): only TCP connection openings
(SYN without ACK) and UDP in either direction are filtered for same-zone traffic, which is enough to
deny a connection; the routed (inter-zone) path is stateful.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ringfence.enforce import expiry, nflog
from ringfence.enforce import nft_json as nj
from ringfence.enforce.interface import (
    DEFAULT_OPTIONS,
    EnforceError,
    RenderedFile,
    RenderOptions,
    RenderResult,
    dump_json,
    encryption_notes,
)
from ringfence.policy import Policy
from ringfence.policy.matrix import Matrix, ResolvedFlow, Selector, resolve

TABLE = "ringfence"
#: Dynamic-set sizes: bounded so a scan cannot exhaust memory; when full, the update rule simply does
#: not match and the counted drop that follows still fires.
DENIED_SIZE = 16384
EGRESS_SIZE = 16384
DENIED_TIMEOUT_S = 3600
_DENIED_KEY = ("ipv4_addr", "ipv4_addr", "inet_proto", "inet_service", "inet_service")
_EGRESS_KEY = ("ipv4_addr", "ipv4_addr", "inet_proto", "inet_service")


@dataclass(frozen=True)
class _Table:
    """Accumulates one table's objects and rules, in dependency order."""

    family: str
    objects: list[nj.Json]
    rules: list[nj.Json]

    def rule(self, chain: str, expr: Sequence[nj.Json], comment: str | None = None) -> None:
        self.rules.append(nj.add(nj.rule(self.family, TABLE, chain, nflog.tag(self.family, expr, comment), comment)))


def _new_table(family: str) -> _Table:
    return _Table(family, [], [])


def _prologue(family: str) -> list[nj.Json]:
    # add (no-op when present) + delete + add: one atomic replace of our own table, whatever was there.
    return [nj.add(nj.table(family, TABLE)), nj.delete(nj.table(family, TABLE)), nj.add(nj.table(family, TABLE))]


def _saddr() -> nj.Json:
    return nj.payload("ip", "saddr")


def _daddr() -> nj.Json:
    return nj.payload("ip", "daddr")


def _add_selector_sets(t: _Table, selectors: Iterable[Selector], seen: set[str]) -> None:
    for sel in selectors:
        if sel.key in seen:
            continue
        seen.add(sel.key)
        elems = [*sel.addresses, *sel.cidrs]
        t.objects.append(nj.add(nj.addr_set(t.family, TABLE, sel.key, elems, interval=bool(sel.cidrs))))


def _flow_rules(flow: ResolvedFlow, peer: nj.Json, peer_set: str, *, original_port: bool = False,
                ) -> list[tuple[list[nj.Json], str]]:
    """Rule bodies accepting ``flow``'s new connections, the peer address matched against ``peer_set``.

    ``original_port`` (node rulesets): the port is matched as the client sent it (conntrack's original
    direction), not as the packet reads after prerouting — a node-local redirect (a TLS sidecar, a
    service mesh) turns ``dport 8080`` into its own port before the input hook and must not turn an
    approved flow into a drop. Without NAT the two are the same port. The fabric does no NAT, and the
    bridge family has no conntrack on every kernel, so it matches the header.
    """
    lo, hi = flow.ports
    rules = []
    for proto in flow.protos:
        port = ([nj.match(nj.meta("l4proto"), proto), nj.match(nj.ct_original("proto-dst"), nj.ports(lo, hi))]
                if original_port else [nj.match(nj.payload(proto, "dport"), nj.ports(lo, hi))])
        rules.append(([nj.match(peer, f"@{peer_set}"), *port, nj.counter(), nj.verdict("accept")],
                      f"flow {flow.id} ({flow.traffic_class})"))
    return rules


def _common_objects(t: _Table, options: RenderOptions) -> None:
    t.objects.append(nj.add(nj.dynamic_set(t.family, TABLE, "denied", _DENIED_KEY, size=DENIED_SIZE,
                                           timeout_s=DENIED_TIMEOUT_S)))
    t.objects.append(nj.add(nj.addr_set(t.family, TABLE, "contained", options.contained)))
    t.objects.append(nj.add(nj.addr_set(t.family, TABLE, "collectors", options.collectors)))


def _containment_rules(t: _Table, chain: str, scope: str, options: RenderOptions) -> None:
    # Before conntrack: containment also cuts connections that were established before it.
    prefix = f"{options.log_prefix}-contain {scope}/{chain} "
    for here, there in ((_saddr(), _daddr()), (_daddr(), _saddr())):
        # the per-flow record lets a probe prove that *its* packet met containment (as for the default drop)
        record = nj.set_add("denied", _saddr(), _daddr(), nj.meta("l4proto"), nj.payload("th", "sport"),
                            nj.payload("th", "dport"))
        t.rule(chain, [nj.match(here, "@contained"), nj.match(there, "@collectors", "!="), record, nj.counter(),
                       nj.log(prefix), nj.verdict("drop")], "containment")


def _deny_rules(t: _Table, chain: str, scope: str, options: RenderOptions) -> None:
    expiry.add_exception_rules(t.family, TABLE, chain, options, t.objects, t.rules)  # before the default drop
    t.rule(chain, [nj.l4_ports(), nj.set_add("denied", _saddr(), _daddr(), nj.meta("l4proto"),
                                             nj.payload("th", "sport"), nj.payload("th", "dport"))],
           "record denied flow")
    if options.audit:
        t.rule(chain, [nj.counter(), nj.log(f"{options.log_prefix}-audit {scope}/{chain} "), nj.verdict("accept")],
               f"audit: would drop ({scope}/{chain})")
    else:
        t.rule(chain, [nj.counter(), nj.log(f"{options.log_prefix}-drop {scope}/{chain} "), nj.verdict("drop")],
               f"default drop ({scope}/{chain})")


def render_node(matrix: Matrix, node: str, options: RenderOptions = DEFAULT_OPTIONS) -> dict[str, Any]:
    """The ruleset of ``node``'s own namespace: accept its approved inbound and outbound flows, drop the rest."""
    if node not in matrix.node_addresses:
        raise EnforceError(f"no node {node!r} in the policy")
    t = _new_table("inet")
    inbound, outbound = matrix.flows_to(node), matrix.flows_from(node)
    seen: set[str] = set()
    _add_selector_sets(t, [f.source for f in inbound] + [f.destination for f in outbound], seen)
    _common_objects(t, options)
    for chain_name, hook, lo_key in (("input", "input", "iifname"), ("output", "output", "oifname")):
        t.objects.append(nj.add(nj.chain("inet", TABLE, chain_name, hook)))
        t.rule(chain_name, [nj.match(nj.meta(lo_key), "lo"), nj.verdict("accept")], "loopback")
        _containment_rules(t, chain_name, node, options)
        t.rule(chain_name, [nj.ct_state("established", "related"), nj.verdict("accept")], "replies")
        flows = inbound if chain_name == "input" else outbound
        for f in flows:
            # The peer and port as the client sent them (see _flow_rules): an output-hook redirect to a local
            # sidecar rewrites the destination before this chain sees it, and must not hide an approved flow.
            peer, peer_set = ((nj.ct_original("ip saddr"), f.source.key) if chain_name == "input"
                              else (nj.ct_original("ip daddr"), f.destination.key))
            for expr, comment in _flow_rules(f, peer, peer_set, original_port=True):
                t.rule(chain_name, expr, comment)
        _deny_rules(t, chain_name, node, options)
    return {"nftables": [*_prologue("inet"), *t.objects, *t.rules]}


def _groups(flows: Sequence[ResolvedFlow]) -> tuple[list[tuple[str, int]], list[tuple[int, ...]]]:
    """Source address → group index, and each group's flow indexes (sources with the same flows share one)."""
    by_addr: dict[str, list[int]] = {}
    for i, f in enumerate(flows):
        for a in f.source.addresses:
            by_addr.setdefault(a, []).append(i)
    group_of: dict[tuple[int, ...], int] = {}
    entries = []
    for addr, idxs in by_addr.items():
        sig = tuple(idxs)
        entries.append((addr, group_of.setdefault(sig, len(group_of))))
    return entries, list(group_of)


def _fabric_table(family: str, matrix: Matrix, options: RenderOptions, hook: str) -> _Table:
    t = _new_table(family)
    seen: set[str] = set()
    _add_selector_sets(t, [f.source for f in matrix.flows if f.source.cidrs] +
                       [f.destination for f in matrix.flows], seen)
    t.objects.append(nj.add(nj.addr_set(family, TABLE, "covered", matrix.covered_addresses())))
    t.objects.append(nj.add(nj.addr_set(family, TABLE, "external", matrix.external_addresses())))
    _common_objects(t, options)
    entries, groups = _groups(matrix.flows)
    for g, idxs in enumerate(groups):
        t.objects.append(nj.add(nj.chain(family, TABLE, f"grp_{g}")))
        for i in idxs:
            f = matrix.flows[i]
            for expr, comment in _flow_rules(f, _daddr(), f.destination.key):
                t.rule(f"grp_{g}", expr, comment)
    t.objects.append(nj.add(nj.verdict_map(family, TABLE, "src_dispatch", [(a, f"grp_{g}") for a, g in entries])))
    base = "filter"
    t.objects.append(nj.add(nj.chain(family, TABLE, base, hook)))
    if family == "bridge":
        # ARP and the rest of non-IPv4 must pass or the zone's own neighbours cannot resolve each other.
        t.rule(base, [nj.match(nj.payload("ether", "type"), "ip", "!="), nj.verdict("accept")], "non-IPv4")
    t.rule(base, [nj.match(_saddr(), "@covered", "!="), nj.match(_daddr(), "@covered", "!="),
                  nj.verdict("accept")], "outside the covered zones")
    _containment_rules(t, base, "fabric", options)
    if family == "inet":
        t.objects.append(nj.add(nj.dynamic_set(family, TABLE, "egress", _EGRESS_KEY, size=EGRESS_SIZE,
                                               timeout_s=DENIED_TIMEOUT_S)))
        # every packet leaving the trust boundary is counted per (source, destination, proto, port)
        t.rule(base, [nj.match(_daddr(), "@external"), nj.l4_ports(),
                      nj.set_add("egress", _saddr(), _daddr(), nj.meta("l4proto"), nj.payload("th", "dport"))],
               "egress accounting")
        t.rule(base, [nj.ct_state("established", "related"), nj.verdict("accept")], "replies")
    else:
        # stateless: only openings are judged; later segments of a connection that was never opened go nowhere
        t.rule(base, [nj.match(nj.payload("ip", "protocol"), "tcp"),
                      nj.match({"&": [nj.payload("tcp", "flags"), ["syn", "ack"]]}, "syn", "!="),
                      nj.verdict("accept")], "non-opening TCP segments")
        for f in matrix.flows:
            if "udp" in f.protos:  # replies of approved UDP flows, matched by their source port
                lo, hi = f.ports
                _add_selector_sets(t, [f.source], seen)
                t.rule(base, [nj.match(_saddr(), f"@{f.destination.key}"), nj.match(_daddr(), f"@{f.source.key}"),
                              nj.match(nj.payload("udp", "sport"), nj.ports(lo, hi)), nj.counter(),
                              nj.verdict("accept")], f"flow {f.id} (udp replies)")
    t.rule(base, [nj.vmap(_saddr(), "src_dispatch")], "approved flows by source")
    for f in matrix.flows:
        if f.source.cidrs:  # sources named by network are not in the dispatch map
            for expr, comment in _flow_rules(f, _daddr(), f.destination.key):
                t.rule(base, [nj.match(_saddr(), f"@{f.source.key}"), *expr], comment)
    _deny_rules(t, base, "fabric", options)
    return t


def render_fabric(matrix: Matrix, options: RenderOptions = DEFAULT_OPTIONS, *, hook: str = "forward",
                  bridge: bool = True) -> dict[str, Any]:
    """The fabric's ruleset: ``inet`` on the routed path (``hook``), plus ``bridge`` on the zone bridges.

    ``hook="input"`` renders the same table for a single gateway namespace that terminates traffic
    (how the scale benchmark measures it).
    """
    if hook not in ("forward", "input"):
        raise EnforceError(f"fabric hook must be forward or input, not {hook!r}")
    inet = _fabric_table("inet", matrix, options, hook)
    cmds = [*_prologue("inet"), *inet.objects, *inet.rules]
    if bridge:
        br = _fabric_table("bridge", matrix, options, "forward")
        cmds += [*_prologue("bridge"), *br.objects, *br.rules]
    return {"nftables": cmds}


def ruleset_stats(doc: dict[str, Any]) -> dict[str, int]:
    """How big a rendered ruleset is: rules, chains, sets/maps and their elements."""
    stats = {"rules": 0, "chains": 0, "sets": 0, "elements": 0}
    for cmd in doc["nftables"]:
        obj = cmd.get("add")
        if not obj:
            continue
        if "rule" in obj:
            stats["rules"] += 1
        elif "chain" in obj:
            stats["chains"] += 1
        elif "set" in obj or "map" in obj:
            stats["sets"] += 1
            stats["elements"] += len((obj.get("set") or obj.get("map"))["elem"] if
                                     "elem" in (obj.get("set") or obj.get("map")) else [])
    return stats


def enforced_nodes(matrix: Matrix) -> tuple[str, ...]:
    """Nodes that get a ruleset of their own: every node inside the trust boundary."""
    return tuple(n for n, z in matrix.node_zone.items() if z not in matrix.external_zones)


class NftablesRenderer:
    """``fabric.nft.json`` plus ``node-<name>.nft.json`` per internal node, for ``nft -j -f``."""

    name = "nftables"

    def render(self, policy: Policy, options: RenderOptions = DEFAULT_OPTIONS) -> RenderResult:
        """Render every table; nftables expresses the whole matrix, so only encryption is reported."""
        matrix = resolve(policy)
        options = replace(options, timed=options.timed or expiry.timed_paths(policy))
        files = [RenderedFile("fabric.nft.json", dump_json(render_fabric(matrix, options)))]
        totals = {"flows": len(matrix.flows), "nodes": len(matrix.node_addresses)}
        files += [RenderedFile(f"node-{node}.nft.json", dump_json(render_node(matrix, node, options)))
                  for node in enforced_nodes(matrix)]
        for k, v in ruleset_stats(render_fabric(matrix, options)).items():
            totals[f"fabric_{k}"] = v
        return RenderResult("nftables", tuple(files), tuple(encryption_notes("nftables", policy)), totals)


def _rule_admits(expr: list[Any], proto: str, port: int) -> bool:
    """Whether one rule's matches admit ``proto``/``port`` (no protocol match admits any protocol)."""
    protos: set[Any] = set()
    ports: list[Any] = []
    for e in expr:
        m = e.get("match") if isinstance(e, dict) else None
        if not isinstance(m, dict):
            continue
        left, right = m.get("left"), m.get("right")
        if left == {"meta": {"key": "l4proto"}}:
            protos.add(right)
        elif isinstance(left, dict) and (
            left.get("ct", {}).get("key") == "proto-dst" or left.get("payload", {}).get("field") == "dport"
        ):
            ports.append(right)
            if "payload" in left:
                protos.add(left["payload"].get("protocol"))
    if protos and proto not in protos:
        return False
    for r in ports:
        lo, hi = r["range"] if isinstance(r, dict) and "range" in r else (r, r)
        if not (isinstance(lo, int) and isinstance(hi, int) and lo <= port <= hi):
            return False
    return True


def admits_outbound(doc: dict[str, Any], proto: str, port: int) -> bool | None:
    """Whether a node ruleset listed from the kernel (``nft -j list table inet ringfence``) lets a new
    ``proto`` connection to ``port`` out: an accept rule of its ``output`` chain that is neither the
    loopback nor the established-replies rule and admits them. None when no ruleset of ours is loaded."""
    rules = [i["rule"] for i in doc.get("nftables", []) if isinstance(i, dict) and isinstance(i.get("rule"), dict)]
    if not rules:
        return None
    for rule in rules:
        if rule.get("chain") != "output":
            continue
        expr = rule.get("expr", [])
        lefts = [e["match"].get("left") for e in expr if isinstance(e, dict) and isinstance(e.get("match"), dict)]
        if (
            any(isinstance(e, dict) and "accept" in e for e in expr)
            and {"meta": {"key": "oifname"}} not in lefts
            and {"ct": {"key": "state"}} not in lefts
            and _rule_admits(expr, proto, port)
        ):
            return True
    return False


__all__ = [
    "admits_outbound",
    "DENIED_SIZE",
    "TABLE",
    "NftablesRenderer",
    "enforced_nodes",
    "render_fabric",
    "render_node",
    "ruleset_stats",
]
