"""Compile a policy into small lookup tables that classify flows with equality joins only.

Classification depends on a flow only through (initiator, responder, protocol, destination port). The
compiler groups *principals* (an address, optionally with the workload identity a flow record
carries) into classes that no rule can tell apart: a source class is the set of approved-flow
*source* selectors a principal matches plus its jobs; a destination class adds the services it hosts.
Ten thousand nodes in a hundred jobs collapse to a few hundred classes. Three tables result:

``addresses``  (address, ident) → node, zone, job, source class ``sc``, destination class ``dc``
``services``   (dc, bucket, segment) → the class of the service listening there
``pairs``      (sc, dc, bucket, segment) → the first approved flow matching, the shared collective job

where ``bucket`` is 0 tcp, 1 udp, 2 any other protocol and ``segment`` comes from
:class:`~ringfence.analyze.ports.Segments`. The work here is per node, per rule and per class pair —
never per flow; flows meet these tables in SQL (:mod:`ringfence.analyze.classify`).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field

import pyarrow as pa

from ringfence.analyze.ports import MAX_PORT, Segments
from ringfence.policy import ApprovedFlow, Endpoint, Node, Policy, Trust

BUCKET_TCP, BUCKET_UDP, BUCKET_OTHER = 0, 1, 2
_PROTO_BUCKETS = {"tcp": (BUCKET_TCP,), "udp": (BUCKET_UDP,), "any": (BUCKET_TCP, BUCKET_UDP, BUCKET_OTHER)}
#: Protocols a job's collective may use (gloo/NCCL sockets are TCP; RoCEv2 rides UDP).
_COLLECTIVE_BUCKETS = (BUCKET_TCP, BUCKET_UDP)

Principal = tuple[str, str]  # (address, identity or "")
_Net = tuple[int, int, int]  # (family, first, last) as integers
_ServiceShape = tuple[int, int, int, str]  # (bucket, lo, hi, class) of one service on a node


def _ip(address: str) -> tuple[int, int] | None:
    # inet_pton is ~30x faster than ipaddress.ip_address, which matters for 10k-node inventories.
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            return family, int.from_bytes(socket.inet_pton(family, address), "big")
        except OSError:
            continue
    return None


def _net(cidr: str) -> _Net:
    net = ipaddress.ip_network(cidr, strict=False)
    family = socket.AF_INET if net.version == 4 else socket.AF_INET6
    return family, int(net.network_address), int(net.broadcast_address)


def _key(ep: Endpoint) -> str:
    return ep.describe()


@dataclass(frozen=True)
class RuleRange:
    """An approved flow's protocol buckets and inclusive destination port range."""

    buckets: tuple[int, ...]
    lo: int
    hi: int


def rule_range(policy: Policy, rule: ApprovedFlow) -> RuleRange:
    """The buckets and ports an approved flow allows (ports default to the destination service's)."""
    buckets = _PROTO_BUCKETS[rule.proto]
    if rule.port_range is not None:
        lo, hi = rule.port_range
    elif rule.destination.service is not None and (svc := policy.service(rule.destination.service)) is not None:
        lo, hi = svc.port_range
    else:
        # proto "any" with neither ports nor a service: every port, and port-less protocols too (port 0).
        lo, hi = 0, MAX_PORT
    return RuleRange(buckets, lo, hi)


@dataclass(frozen=True)
class _Own:
    """One side's selectors that name a principal itself, as sets to test a name against."""

    nodes: frozenset[str]
    identities: frozenset[str]
    services: dict[str, tuple[str, ...]]  # node → its services' selectors that a rule uses
    cidrs: list[tuple[str, _Net]]

    @classmethod
    def of(cls, policy: Policy, want: set[str], cidrs: list[tuple[str, _Net]]) -> _Own:
        services: dict[str, tuple[str, ...]] = {}
        for svc in policy.services:
            if (k := "service:" + svc.name) in want:
                services[svc.node] = (*services.get(svc.node, ()), k)
        return cls(
            frozenset(k.removeprefix("node:") for k in want if k.startswith("node:")),
            frozenset(k.removeprefix("identity:") for k in want if k.startswith("identity:")),
            services,
            cidrs,
        )


@dataclass
class _Inventory:
    """Name lookups built once from the policy (dicts, because the policy's own lookups are linear)."""

    policy: Policy
    node_by_addr: dict[str, Node] = field(default_factory=dict)
    node_by_identity: dict[str, Node] = field(default_factory=dict)
    job_by_identity: dict[str, str] = field(default_factory=dict)
    jobs_of: dict[str, list[str]] = field(default_factory=dict)
    services_of: dict[str, list[int]] = field(default_factory=dict)
    src_keys: set[str] = field(default_factory=set)
    dst_keys: set[str] = field(default_factory=set)
    src_cidrs: list[tuple[str, _Net]] = field(default_factory=list)
    dst_cidrs: list[tuple[str, _Net]] = field(default_factory=list)
    own_src: _Own | None = None
    own_dst: _Own | None = None

    @classmethod
    def of(cls, policy: Policy) -> _Inventory:
        inv = cls(policy)
        for n in policy.nodes:
            for a in n.addresses:
                inv.node_by_addr.setdefault(a, n)
            if n.identity:
                inv.node_by_identity.setdefault(n.identity, n)
        for j in policy.jobs:
            inv.job_by_identity.setdefault(j.identity, j.name)
            for m in j.members:
                inv.jobs_of.setdefault(m, []).append(j.name)
        for i, s in enumerate(policy.services):
            inv.services_of.setdefault(s.node, []).append(i)
        for r in policy.approved:
            inv.src_keys.add(_key(r.source))
            inv.dst_keys.add(_key(r.destination))
            if r.source.cidr:
                inv.src_cidrs.append((_key(r.source), _net(r.source.cidr)))
            if r.destination.cidr:
                inv.dst_cidrs.append((_key(r.destination), _net(r.destination.cidr)))
        inv.own_src = _Own.of(policy, inv.src_keys, inv.src_cidrs)
        inv.own_dst = _Own.of(policy, inv.dst_keys, inv.dst_cidrs)
        return inv

    def resolve(self, address: str, ident: str) -> tuple[Node | None, list[str]]:
        """The node behind a principal (address first, then a node identity) and its jobs in order."""
        node = self.node_by_addr.get(address)
        if node is None and ident:
            node = self.node_by_identity.get(ident)
        jobs = list(self.jobs_of.get(node.name, ())) if node is not None else []
        by_ident = self.job_by_identity.get(ident) if ident else None
        if by_ident is not None:
            # A job identity carried by the flow record is the most specific fact about the workload.
            jobs = [by_ident, *[j for j in jobs if j != by_ident]]
        return node, jobs

    def own_keys(self, ip: tuple[int, int] | None, ident: str, node: Node | None, *, dst: bool) -> tuple[str, ...]:
        """The approved-flow selectors this principal matches on one side by its own names — its node, an
        identity, the node's services, a CIDR (``ip``: its address as :func:`_ip` reads it) — usually none.

        Names are tested against the sets of those the rules use (built once in :meth:`of`): this runs per
        principal, twice, and most of an inventory's names appear in no rule.
        """
        own = self.own_dst if dst else self.own_src
        assert own is not None  # set by of()
        found: tuple[str, ...] = ()
        if node is not None:
            if node.name in own.nodes:
                found += ("node:" + node.name,)
            if node.identity and node.identity in own.identities:
                found += ("identity:" + node.identity,)
            found += own.services.get(node.name, ())
        if ident and ident in own.identities:
            found += ("identity:" + ident,)
        if own.cidrs and ip is not None:
            fam, value = ip
            for k, (f, lo, hi) in own.cidrs:
                if f == fam and lo <= value <= hi:
                    found += (k,)
        return found

    def group_keys(self, zone: str | None, jobs: tuple[str, ...], *, dst: bool) -> tuple[str, ...]:
        """The selectors a principal in ``zone`` running ``jobs`` matches on one side by those alone."""
        want = self.dst_keys if dst else self.src_keys
        found = [k for j in jobs if (k := "job:" + j) in want]
        if zone is not None and (k := "zone:" + zone) in want:
            found.append(k)
        return tuple(found)


@dataclass(frozen=True)
class Plan:
    """A policy compiled for classification: lookup tables, port segments, unknown-address classes.

    ``cells`` maps (sc, dc, bucket, segment) → rule, rule class, shared collective job and — when
    ``services_merged`` — the service class too, so that a flow needs one lookup after the two
    address joins. When folding services into every source class would make ``cells`` too large,
    ``services`` holds them keyed by (dc, bucket, segment) instead.
    """

    addresses: pa.Table
    services: pa.Table
    cells: pa.Table
    segments: Segments
    n_dst_classes: int
    services_merged: bool
    v4_cuts: tuple[int, ...]  # IPv4 space cut by the CIDR selectors (addresses outside the inventory)
    v4_src_classes: tuple[int, ...]  # source class of each IPv4 segment
    v4_dst_classes: tuple[int, ...]
    class_zones: pa.Table  # side ("src"/"dst"), class → zone (classes of the inventory only)
    #: Every IPv4 address a CIDR selector gives a class is a row of ``addresses`` (the selectors cover at
    #: most ``ENUMERATE_LIMIT`` addresses): the address join alone classifies them, nothing is parsed.
    v4_enumerated: bool = False
    #: (bucket * segments + segment) → the first such slot that every cell and service treats alike
    slot_rep: tuple[int, ...] = ()

    @property
    def per_dst(self) -> int:
        """Key stride of one destination class: the ``dbase`` of class ``dc`` is ``dc * per_dst``."""
        return 3 * self.segments.count

    @property
    def per_src(self) -> int:
        """Key stride of one source class: the ``sbase`` of class ``sc`` is ``sc * per_src``."""
        return self.n_dst_classes * self.per_dst

    def port_cell_sql(self, proto: str, port: str) -> str:
        """SQL: the port cell of a flow — ``bucket * segments + segment`` of the first (bucket, segment) that no
        cell, rule, service or job tells apart from the flow's own (:attr:`slot_rep`) — with ``sbase + dbase``
        its ``cells`` key (and with ``dbase`` alone its ``services`` key). Additions only, per flow.

        Mapping to the representative keeps the first group-by at the cells that differ (ephemeral ports of
        an unapproved pair are one group, not one per segment they cross) and lets a CASE tree stop early:
        runs of segments with one representative are one leaf, a bucket whose segments are all alike a
        constant."""
        p = f"coalesce({port}, 0)"
        n = self.segments.count
        trees = [self._bucket_sql(p, self.slot_rep[b * n : (b + 1) * n]) for b in range(3)]
        if trees[1] == trees[2]:
            return f"(CASE WHEN {proto} = 6 THEN {trees[0]} ELSE {trees[1]} END)" if trees[0] != trees[1] else trees[0]
        return f"(CASE {proto} WHEN 6 THEN {trees[0]} WHEN 17 THEN {trees[1]} ELSE {trees[2]} END)"

    def _bucket_sql(self, port: str, reps: tuple[int, ...]) -> str:
        """One bucket's cell: runs of segments with one representative are one leaf of a balanced CASE tree;
        up to ``POINT_LIMIT`` single-port runs (a service's port, a rule's) are tested for equality first and
        the tree is built over the rest (measured: 0.16 s instead of 0.23 s per 10 M flows on the benchmark's
        policy, one thread — a wide run no longer needs a comparison per level)."""
        runs: list[tuple[int, int, int]] = []  # (first port, last port, representative)
        for seg, rep in enumerate(reps):
            lo, hi = self.segments.bounds(seg)
            if runs and runs[-1][2] == rep:
                runs[-1] = (runs[-1][0], hi, rep)
            else:
                runs.append((lo, hi, rep))
        # not the first or last run: a port outside 0-65535 falls into those through the tree's comparisons
        points = [r for r in runs[1:-1] if r[0] == r[1]]
        if not points or len(points) > POINT_LIMIT:
            points = []
        rest: list[tuple[int, int, int]] = []
        for run in runs:
            if run in points or (rest and rest[-1][2] == run[2]):
                rest[-1] = (rest[-1][0], run[1], rest[-1][2])  # a point's port is caught before the tree
            else:
                rest.append(run)
        tree = bisect_sql(port, tuple(r[0] for r in rest), tuple(r[2] for r in rest))
        if not points:
            return tree
        whens = " ".join(f"WHEN {lo} THEN {rep}" for lo, _, rep in points)
        return f"(CASE {port} {whens} ELSE {tree} END)"

    def needs_v4_lookup(self, *, dst: bool) -> bool:
        """Whether an IPv4 CIDR selector can give an address outside ``addresses`` a class (then the address
        text must be parsed in SQL: :meth:`ipv4_sql`, :meth:`v4_class_sql`)."""
        return not self.v4_enumerated and any(self.v4_dst_classes if dst else self.v4_src_classes)

    @staticmethod
    def ipv4_sql(address: str) -> str:
        """SQL: the IPv4 address ``address`` as an integer (NULL for anything else: IPv6, NULL, text that
        is not a dotted quad of 0-255 without leading zeros — what ``inet_pton`` accepts)."""
        octet = "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
        parts = [f"CAST(split_part({address}, '.', {i}) AS BIGINT)" for i in range(1, 5)]
        return (
            f"(CASE WHEN regexp_matches({address}, '^{octet}(\\.{octet}){{3}}\\z') "
            f"THEN {parts[0]} * 16777216 + {parts[1]} * 65536 + {parts[2]} * 256 + {parts[3]} END)"
        )

    def v4_class_sql(self, as_int: str, *, dst: bool) -> str:
        """SQL: the class of an address outside the inventory from its integer (0 unless a CIDR covers it,
        0 for NULL — an address that is not IPv4 must not fall into the CASE tree's last leaf).

        ``as_int`` must be a plain column: the CASE tree repeats it, and a repeated *expression* would be
        hoisted by the optimizer and computed for every flow."""
        leaves = self.v4_dst_classes if dst else self.v4_src_classes
        return f"(CASE WHEN {as_int} IS NULL THEN 0 ELSE {bisect_sql(as_int, self.v4_cuts, leaves)} END)"


ADDRESS_SCHEMA = pa.schema(
    [
        ("address", pa.string()),
        ("ident", pa.string()),
        ("node", pa.string()),
        ("zone", pa.string()),
        ("trust", pa.string()),
        ("job", pa.string()),
        ("sc", pa.int32()),
        ("dc", pa.int32()),
        ("sbase", pa.int64()),  # sc * per_src: precomputed so a flow's key is two additions
        ("dbase", pa.int64()),  # dc * per_dst
    ]
)
SERVICE_SCHEMA = pa.schema([("key", pa.int64()), ("svc_class", pa.string())])
CELL_SCHEMA = pa.schema(
    [
        ("key", pa.int64()),
        ("svc_class", pa.string()),
        ("rule", pa.string()),
        ("rule_class", pa.string()),
        ("cjob", pa.string()),
    ]
)
CLASS_ZONE_SCHEMA = pa.schema([("side", pa.string()), ("class", pa.int32()), ("zone", pa.string())])
#: Above this many rows, services stay in their own lookup instead of being folded into ``cells``.
MERGE_LIMIT = 2_000_000
#: IPv4 CIDR selectors covering at most this many addresses (all of them together, e.g. a /16 or 256 /24s) have
#: each address listed in ``addresses``: an address join then classifies a flow to one of them exactly, and the
#: matrix's first group-by needs no text key for addresses outside the inventory (measured: that key cost
#: ~0.15x the bare join on 10 M flows). Wider selectors (``0.0.0.0/0``) keep the parse-after-grouping path.
ENUMERATE_LIMIT = 65_536
#: At most this many single-port runs of a bucket are tested by equality before its CASE tree (a chain of
#: equalities costs a comparison each for the rows that match none).
POINT_LIMIT = 8

_SrcClasses = dict[tuple[frozenset[str], tuple[str, ...]], int]
_DstClasses = dict[tuple[frozenset[str], tuple[str, ...], tuple[_ServiceShape, ...]], int]
_SvcCells = dict[tuple[int, int, int], str]  # (dc, bucket, seg) → service class (first declared wins)
_Cell = tuple[int, int, int, int]  # (sc, dc, bucket, seg)


def bisect_sql(expr: str, cuts: tuple[int, ...], leaves: tuple[int, ...]) -> str:
    """SQL giving ``leaves[k]`` for ``cuts[k] <= expr < cuts[k+1]`` (NULL below ``cuts[0]`` is not
    checked: callers cut from the bottom of the space). A balanced CASE, log₂(len(leaves)) deep."""

    def go(first: int, end: int) -> str:
        if end - first == 1:
            return str(leaves[first])
        mid = (first + end) // 2
        return f"(CASE WHEN {expr} < {cuts[mid]} THEN {go(first, mid)} ELSE {go(mid, end)} END)"

    return go(0, len(leaves))


def _v4_segments(inv: _Inventory) -> tuple[tuple[int, ...], list[tuple[frozenset[str], frozenset[str]]]]:
    """Cut the IPv4 space by the IPv4 CIDR selectors; per segment, the (source, destination) keys."""
    nets = [(k, lo, hi, False) for k, (fam, lo, hi) in inv.src_cidrs if fam == socket.AF_INET]
    nets += [(k, lo, hi, True) for k, (fam, lo, hi) in inv.dst_cidrs if fam == socket.AF_INET]
    cuts = sorted({0, 1 << 32, *[lo for _, lo, _, _ in nets], *[hi + 1 for _, _, hi, _ in nets]})
    keys = []
    for first in cuts[:-1]:
        src = frozenset(k for k, lo, hi, d in nets if not d and lo <= first <= hi)
        dst = frozenset(k for k, lo, hi, d in nets if d and lo <= first <= hi)
        keys.append((src, dst))
    return tuple(cuts), keys


def compile_plan(policy: Policy, extra: Iterable[Principal] = ()) -> Plan:
    """Compile ``policy``; ``extra`` adds principals seen in flows (identities, IPv6 addresses a CIDR
    selector may cover). Addresses outside the inventory are covered by :meth:`Plan.unknown_class_sql`."""
    inv = _Inventory.of(policy)
    ranges = [rule_range(policy, r) for r in policy.approved]
    segs = Segments.of(
        [(r.lo, r.hi) for r in ranges]
        + [s.port_range for s in policy.services]
        + [j.collective_range for j in policy.jobs]
    )
    trust = {z.name: z.trust.value for z in policy.zones}

    principals: dict[Principal, None] = {}
    for n in policy.nodes:
        for a in n.addresses:
            principals[(a, "")] = None
    for p in extra:
        principals.setdefault(p, None)

    # Class 0 on each side is "matches nothing": unknown addresses fall there via COALESCE in SQL.
    src_classes: _SrcClasses = {(frozenset(), ()): 0}
    dst_classes: _DstClasses = {(frozenset(), (), ()): 0}
    cols: dict[str, list[object]] = {name: [] for name in ADDRESS_SCHEMA.names}
    # the columns appended to directly: this loop runs once per address of the inventory
    c_address, c_ident, c_node, c_zone = cols["address"], cols["ident"], cols["node"], cols["zone"]
    c_trust, c_job, c_sc, c_dc = cols["trust"], cols["job"], cols["sc"], cols["dc"]
    any_cidr = bool(inv.src_cidrs or inv.dst_cidrs)
    # A class is decided by the zone, the jobs and the few selectors a principal matches by its own names
    # (usually none), so most of a 10,000-node inventory shares a handful: each is built once, then looked up.
    shapes_of = {name: tuple(_shape(policy, si) for si in sis) for name, sis in inv.services_of.items()}
    s_memo: dict[tuple[object, ...], int] = {}
    d_memo: dict[tuple[object, ...], int] = {}
    for address, ident in principals:
        node, job_list = inv.resolve(address, ident)
        jobs = tuple(job_list)
        ip = _ip(address) if any_cidr else None  # parsed once for both sides
        zname = node.zone if node is not None else None
        # The zone is part of both classes so that a grouped query can recover it from the class alone.
        zone = ("@zone:" + zname,) if zname is not None else ()
        s_own = inv.own_keys(ip, ident, node, dst=False)
        sc = s_memo.get(s_at := (zname, jobs, s_own))
        if sc is None:
            skey = (frozenset(inv.group_keys(zname, jobs, dst=False) + s_own + zone), jobs)
            sc = s_memo[s_at] = src_classes.setdefault(skey, len(src_classes))
        # Services enter the destination class by shape, not name: a thousand storage nodes serving
        # port 8080 are one class unless a rule names one of their services.
        shapes = shapes_of.get(node.name, ()) if node is not None else ()
        d_own = inv.own_keys(ip, ident, node, dst=True)
        dc = d_memo.get(d_at := (zname, jobs, d_own, shapes))
        if dc is None:
            dkey = (frozenset(inv.group_keys(zname, jobs, dst=True) + d_own + zone), jobs, shapes)
            dc = d_memo[d_at] = dst_classes.setdefault(dkey, len(dst_classes))
        c_address.append(address)
        c_ident.append(ident)
        c_node.append(node.name if node else None)
        c_zone.append(node.zone if node else None)
        c_trust.append(trust.get(node.zone) if node else None)
        c_job.append(jobs[0] if jobs else None)
        c_sc.append(sc)
        c_dc.append(dc)
    v4_cuts, v4_keys = _v4_segments(inv)
    v4_src = tuple(src_classes.setdefault((k, ()), len(src_classes)) for k, _ in v4_keys)
    v4_dst = tuple(dst_classes.setdefault((k, (), ()), len(dst_classes)) for _, k in v4_keys)

    enumerated = _enumerate_v4(cols, principals, v4_cuts, v4_src, v4_dst)

    svc_cells = _service_cells(segs, dst_classes)
    rules = _rule_cells(policy, segs, ranges, src_classes, dst_classes, svc_cells)
    merged = len(src_classes) * len(svc_cells) <= MERGE_LIMIT
    nseg, ndc = segs.count, len(dst_classes)
    cols["sbase"] = [int(sc) * ndc * 3 * nseg for sc in cols["sc"]]  # type: ignore[call-overload]
    cols["dbase"] = [int(dc) * 3 * nseg for dc in cols["dc"]]  # type: ignore[call-overload]
    addresses = pa.Table.from_pydict(cols, schema=ADDRESS_SCHEMA)
    svc_table = SERVICE_SCHEMA.empty_table()
    if merged:
        by_dc: dict[int, list[tuple[int, int, str]]] = {}
        for (dc, b, seg), cls in svc_cells.items():
            by_dc.setdefault(dc, []).append((b, seg, cls))
        cell_svc = {
            (sc, dc, b, seg): cls for dc, items in by_dc.items() for sc in src_classes.values() for b, seg, cls in items
        }
    else:
        cell_svc = {}
        svc_table = pa.Table.from_pydict(
            {"key": [(dc * 3 + b) * nseg + seg for (dc, b, seg) in svc_cells], "svc_class": list(svc_cells.values())},
            schema=SERVICE_SCHEMA,
        )
    keys = sorted(set(rules) | set(cell_svc))
    columns: dict[str, list[object]] = {name: [] for name in CELL_SCHEMA.names}
    for cell in keys:
        sc, dc, b, seg = cell
        hit, shared = rules.get(cell, (None, None))
        rule = policy.approved[hit] if hit is not None else None
        columns["key"].append(((sc * ndc + dc) * 3 + b) * nseg + seg)
        columns["svc_class"].append(cell_svc.get(cell))
        columns["rule"].append(rule.id if rule else None)
        columns["rule_class"].append(rule.traffic_class.value if rule else None)
        columns["cjob"].append(policy.jobs[shared].name if shared is not None else None)
    cells = pa.Table.from_pydict(columns, schema=CELL_SCHEMA)
    zone_rows: dict[str, list[object]] = {"side": [], "class": [], "zone": []}
    sides = (
        ("src", [(k, c) for (k, _), c in src_classes.items()]),
        ("dst", [(k, c) for (k, _, _), c in dst_classes.items()]),
    )
    for side, keysets in sides:
        for keyset, klass in keysets:
            in_zone = next((k.removeprefix("@zone:") for k in keyset if k.startswith("@zone:")), None)
            if in_zone is not None:
                zone_rows["side"].append(side)
                zone_rows["class"].append(klass)
                zone_rows["zone"].append(in_zone)
    class_zones = pa.Table.from_pydict(zone_rows, schema=CLASS_ZONE_SCHEMA)
    reps = _slot_representatives(nseg, rules, svc_cells)
    return Plan(addresses, svc_table, cells, segs, ndc, merged, v4_cuts, v4_src, v4_dst, class_zones, enumerated, reps)


def _slot_representatives(
    nseg: int, rules: dict[_Cell, tuple[int | None, int | None]], svc_cells: _SvcCells
) -> tuple[int, ...]:
    """Per (bucket, segment) slot, the first slot with the same rules, shared jobs and services for every
    (source class, destination class): what a flow's port is classified by is the same at both, so the
    cells and service tables hold the same rows at both and either key finds the same classification."""
    sig: dict[int, set[tuple[object, ...]]] = {}
    for (sc, dc, b, seg), (hit, shared) in rules.items():
        sig.setdefault(b * nseg + seg, set()).add(("r", sc, dc, hit, shared))
    for (dc, b, seg), cls in svc_cells.items():
        sig.setdefault(b * nseg + seg, set()).add(("s", dc, cls))
    first: dict[frozenset[tuple[object, ...]], int] = {}
    return tuple(first.setdefault(frozenset(sig.get(slot, ())), slot) for slot in range(3 * nseg))


def _enumerate_v4(
    cols: dict[str, list[object]],
    principals: dict[Principal, None],
    cuts: tuple[int, ...],
    src: tuple[int, ...],
    dst: tuple[int, ...],
) -> bool:
    """Add a row to ``cols`` for every IPv4 address a CIDR selector classifies that is not a principal already
    (its classes are its segment's), when they are at most ``ENUMERATE_LIMIT``; whether they were.

    The text is the canonical dotted quad (``inet_ntoa``), the one form :meth:`Plan.ipv4_sql` accepts, so the
    equality join classifies exactly the addresses the parse would."""
    segments = [k for k in range(len(cuts) - 1) if src[k] or dst[k]]
    if sum(cuts[k + 1] - cuts[k] for k in segments) > ENUMERATE_LIMIT:
        return False
    for k in segments:
        for value in range(cuts[k], cuts[k + 1]):
            address = socket.inet_ntoa(value.to_bytes(4, "big"))
            if (address, "") in principals:
                continue  # an inventory address: its row already has its CIDR keys (see _Inventory.keys)
            for name, item in (
                ("address", address), ("ident", ""), ("node", None), ("zone", None), ("trust", None),
                ("job", None), ("sc", src[k]), ("dc", dst[k]),
            ):  # fmt: skip
                cols[name].append(item)
    return True


def _shape(policy: Policy, si: int) -> _ServiceShape:
    svc = policy.services[si]
    lo, hi = svc.port_range
    return (BUCKET_TCP if svc.proto == "tcp" else BUCKET_UDP), lo, hi, svc.traffic_class.value


def _service_cells(segs: Segments, dst_classes: _DstClasses) -> _SvcCells:
    cells: _SvcCells = {}
    for (_, _, shapes), dc in dst_classes.items():
        for bucket, lo, hi, cls in shapes:
            for seg in segs.covering(lo, hi):
                cells.setdefault((dc, bucket, seg), cls)
    return cells


def _rule_cells(
    policy: Policy,
    segs: Segments,
    ranges: list[RuleRange],
    src_classes: _SrcClasses,
    dst_classes: _DstClasses,
    svc_cells: _SvcCells,
) -> dict[_Cell, tuple[int | None, int | None]]:
    """(sc, dc, bucket, seg) → (index of the first approved flow, index of the first shared job)."""
    src_by_key: dict[str, list[int]] = {}
    src_by_job: dict[str, list[int]] = {}
    for (keys, jobs), sc in src_classes.items():
        for k in keys:
            src_by_key.setdefault(k, []).append(sc)
        for j in jobs:
            src_by_job.setdefault(j, []).append(sc)
    dst_by_key: dict[str, list[int]] = {}
    dst_by_job: dict[str, list[int]] = {}
    for (keys, jobs, _), dc in dst_classes.items():
        for k in keys:
            dst_by_key.setdefault(k, []).append(dc)
        for j in jobs:
            dst_by_job.setdefault(j, []).append(dc)

    # Rules and jobs are visited in declaration order and setdefault keeps the first: the rule a
    # flow is attributed to is deterministic (the first approved flow that allows it).
    rule_at: dict[_Cell, int] = {}
    for ri, (rule, rr) in enumerate(zip(policy.approved, ranges, strict=True)):
        for sc in src_by_key.get(_key(rule.source), ()):
            for dc in dst_by_key.get(_key(rule.destination), ()):
                for b in rr.buckets:
                    for seg in segs.covering(rr.lo, rr.hi):
                        rule_at.setdefault((sc, dc, b, seg), ri)
    job_at: dict[_Cell, int] = {}
    for ji, job in enumerate(policy.jobs):
        lo, hi = job.collective_range
        dsts = set(dst_by_job.get(job.name, ()))
        for sc in src_by_job.get(job.name, ()):
            for dc in dsts:
                for b in _COLLECTIVE_BUCKETS:
                    for seg in segs.covering(lo, hi):
                        # A port where the responder runs a service carries that service's class.
                        if (dc, b, seg) not in svc_cells:
                            job_at.setdefault((sc, dc, b, seg), ji)
    return {cell: (rule_at.get(cell), job_at.get(cell)) for cell in set(rule_at) | set(job_at)}


def selects_by_ipv6_cidr(policy: Policy) -> bool:
    """Whether an approved flow names an IPv6 CIDR (IPv6 addresses outside the inventory then need a
    look before classification; IPv4 ones are handled in SQL)."""
    return any(":" in (ep.cidr or "") for r in policy.approved for ep in (r.source, r.destination))


def external_zones(policy: Policy) -> frozenset[str]:
    """Zones outside the trust boundary."""
    return frozenset(z.name for z in policy.zones if z.trust is Trust.EXTERNAL)


__all__ = [
    "ADDRESS_SCHEMA",
    "BUCKET_OTHER",
    "BUCKET_TCP",
    "BUCKET_UDP",
    "CELL_SCHEMA",
    "CLASS_ZONE_SCHEMA",
    "ENUMERATE_LIMIT",
    "MERGE_LIMIT",
    "SERVICE_SCHEMA",
    "Plan",
    "Principal",
    "RuleRange",
    "bisect_sql",
    "compile_plan",
    "external_zones",
    "rule_range",
    "selects_by_ipv6_cidr",
]
