"""Classify flows against a policy: node, zone, job, traffic class, approving rule — all in SQL.

Flows meet the compiled policy (:mod:`ringfence.analyze.plan`) in four equality joins on DuckDB:
initiator address → source class, responder address → destination class, (destination class,
protocol, port segment) → service class, (source class, destination class, protocol, port segment)
→ first approved flow and shared collective job. Port *ranges* are matched by the segment join
(:mod:`ringfence.analyze.ports`); nothing loops in Python per flow.

Class precedence: the service listening at the responder's port; else ``collective`` when both ends
are members of one job and the port is inside that job's collective range; else the class of the
approved flow that allows it; else ``unclassified``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

from ringfence.analyze.engine import AnalyzeError, Engine, EngineSpec, session
from ringfence.analyze.plan import Plan, Principal, compile_plan, selects_by_ipv6_cidr
from ringfence.errors import InputError
from ringfence.observe.schema import CLASSIFIED_FIELDS, CLASSIFIED_SCHEMA, FLOW_SCHEMA, conform
from ringfence.policy import Policy

#: Flows to analyse: an Arrow table, or a Parquet file / directory / glob.
FlowInput: TypeAlias = "pa.Table | str | Path"

#: Columns classification reads from a flow source.
_KEY_COLUMNS = ("src", "dst", "proto", "dport", "src_identity", "dst_identity")


@dataclass(frozen=True)
class Prepared:
    """A flow source registered on a connection, and the SQL that classifies it.

    ``ctes`` defines ``rf_j``: the source columns plus ``src_node``, ``dst_node``, ``src_zone``,
    ``dst_zone``, ``rf_sjob``, ``rf_djob`` and ``rf_key`` (the ``cells`` key of the flow).
    ``key_ctes`` defines ``rf_k`` for aggregation: the source columns, ``rf_k0`` (the key of the
    inventory classes and the port cell) and ``rf_su`` / ``rf_du`` (an address outside the inventory
    whose CIDR class is still to be added, only on a side where a CIDR selector can give one).
    """

    plan: Plan
    ctes: str
    key_ctes: str  # defines rf_k: source columns, rf_k0 (key without CIDR classes), rf_su / rf_du
    columns: tuple[str, ...]  # source columns passed through

    @property
    def flows_sql(self) -> str:
        """SELECT: one row per flow, the source columns plus the classification columns."""
        plan = self.plan
        if plan.services_merged:
            svc_join, svc_col = "", "c.svc_class"
        else:
            svc_join, svc_col = "LEFT JOIN rf_svc AS v ON v.key = j.rf_db + j.rf_cell", "v.svc_class"
        passthrough = ", ".join(f'j."{c}"' for c in self.columns)
        return f"""{self.ctes}
SELECT {passthrough}, j.src_node, j.dst_node, j.src_zone, j.dst_zone,
       coalesce(c.cjob, j.rf_sjob) AS src_job, coalesce(c.cjob, j.rf_djob) AS dst_job,
       {_CLASS_SQL.format(svc=svc_col)} AS "class", c.rule AS rule, c.rule IS NOT NULL AS approved
FROM rf_j AS j {svc_join} LEFT JOIN rf_cells AS c ON c.key = j.rf_key"""

    def grouped_sql(self, by: tuple[str, ...], aggregates: tuple[tuple[str, str], ...]) -> str:
        """SELECT ``src_zone, dst_zone, class, rule, approved, *by, *aggregate names`` over all flows.

        Flows are first grouped by their inventory key (one integer: address classes + port cell), the
        addresses outside the inventory and ``by``; the classification is looked up for the groups, not
        for every flow — what keeps 10 M flows near a bare join + group-by. Addresses outside the
        inventory get their CIDR class after that first group-by, so their text is parsed once per group
        rather than once per flow (measured: that parse was ~40 % of the matrix's CPU time). Where the plan
        lists every address its IPv4 CIDR selectors cover (:attr:`Plan.v4_enumerated`) the address join alone
        classifies them and that text key is left out; port slots no rule tells apart share one cell
        (:attr:`Plan.slot_rep`), so the groups are the cells that differ.
        ``aggregates`` are (SQL over source columns, name) and must be re-aggregatable by ``sum``.
        """
        plan = self.plan
        if not plan.services_merged:
            raise AnalyzeError("grouped classification needs services folded into the cell table")
        inner = ", ".join(f"{expr} AS {name}" for expr, name in aggregates)
        outer = ", ".join(f"sum(g.{name})::BIGINT AS {name}" for _, name in aggregates)
        by_cols = "".join(f', "{b}"' for b in by)
        g_by = "".join(f', g."{b}"' for b in by)
        per_dst, per_src = plan.per_dst, plan.per_src
        s_v4, d_v4 = plan.needs_v4_lookup(dst=False), plan.needs_v4_lookup(dst=True)
        s_cls = plan.v4_class_sql("g.rf_sip", dst=False) if s_v4 else "0"
        d_cls = plan.v4_class_sql("g.rf_dip", dst=True) if d_v4 else "0"
        # Only a side a CIDR selector can classify groups by its unknown address: every group key costs
        # (a text key, even all NULL, made the first group-by ~1.5x dearer than one integer key).
        unknown = ("rf_su, " if s_v4 else "") + ("rf_du, " if d_v4 else "")
        sip = plan.ipv4_sql("g.rf_su") if s_v4 else "NULL"
        dip = plan.ipv4_sql("g.rf_du") if d_v4 else "NULL"
        return f"""{self.key_ctes}, rf_g0 AS (
  SELECT {unknown}rf_k0{by_cols}, {inner} FROM rf_k GROUP BY ALL
), rf_g1 AS (
  SELECT g.*, {sip} AS rf_sip, {dip} AS rf_dip FROM rf_g0 AS g
), rf_g AS (
  SELECT g.*, g.rf_k0 + {s_cls}::BIGINT * {per_src} + {d_cls}::BIGINT * {per_dst} AS rf_key FROM rf_g1 AS g
)
SELECT zs.zone AS src_zone, zd.zone AS dst_zone, {_CLASS_SQL.format(svc="c.svc_class")} AS "class",
       c.rule AS rule, c.rule IS NOT NULL AS approved{g_by}, {outer}
FROM rf_g AS g LEFT JOIN rf_cells AS c ON c.key = g.rf_key
LEFT JOIN rf_class_zone AS zs ON zs.side = 'src' AND zs."class" = (g.rf_key // {per_src})
LEFT JOIN rf_class_zone AS zd ON zd.side = 'dst' AND zd."class" = (g.rf_key // {per_dst}) % {plan.n_dst_classes}
GROUP BY ALL"""


_CLASS_SQL = "coalesce({svc}, CASE WHEN c.cjob IS NOT NULL THEN 'collective' END, c.rule_class, 'unclassified')"


def _duck_type(field: pa.Field) -> str:
    return {
        pa.string(): "VARCHAR",
        pa.int32(): "INTEGER",
        pa.int64(): "BIGINT",
        pa.uint8(): "SMALLINT",  # Spark has no unsigned types; a protocol number fits
        pa.bool_(): "BOOLEAN",
    }.get(field.type, "VARCHAR")


def _source_sql(con: Engine, flows: FlowInput, extra: tuple[str, ...]) -> tuple[str, bool]:
    """Register ``flows``; return a SQL table expression with the key columns (plus ``extra``), and
    whether any flow carries a workload identity."""
    if isinstance(flows, pa.Table):
        missing = [c for c in ("src", "dst", "proto") if c not in flows.column_names]
        if missing:
            raise AnalyzeError(f"flow table lacks required column(s) {', '.join(missing)}")
        wanted = [c for c in (*_KEY_COLUMNS, *extra) if c in flows.column_names]
        con.register("rf_flows", flows.select(wanted))
        have = set(wanted)
        identities = any(
            c in have and flows.column(c).null_count < flows.num_rows for c in ("src_identity", "dst_identity")
        )
        source = "rf_flows"
    else:
        con.register_parquet("rf_src", str(flows))
        source = "rf_src"
        have = set(con.column_names(source))
        needed = ("src", "dst", "proto", *[e for e in extra if e in ("bytes", "protection")])
        missing = [c for c in needed if c not in have]
        if missing:
            raise InputError(str(flows), f"not a ringfence flow file: no column(s) {', '.join(missing)}")
        ident_cols = tuple(c for c in ("src_identity", "dst_identity") if c in have)
        identities = bool(ident_cols) and con.any_present(source, ident_cols)
    select = []
    for name in (*_KEY_COLUMNS, *extra):
        fld = FLOW_SCHEMA.field(name) if name in FLOW_SCHEMA.names else None
        if name in have:
            select.append(f'"{name}"' if fld is None else f'CAST("{name}" AS {_duck_type(fld)}) AS "{name}"')
        elif fld is not None and fld.nullable:
            select.append(f'CAST(NULL AS {_duck_type(fld)}) AS "{name}"')
        else:
            raise AnalyzeError(f"flow input lacks column {name!r}")
    return f"(SELECT {', '.join(select)} FROM {source})", identities


def _extra_principals(
    con: Engine, source: str, policy: Policy, *, identities: bool, cidrs: bool
) -> list[Principal]:
    """Principals the inventory alone does not list: (address, identity) pairs carried by flow records,
    and — only when the policy has IPv6 CIDR selectors — IPv6 addresses outside the inventory (IPv4
    ones are classified in SQL, see :meth:`Plan.unknown_class_sql`)."""
    if not identities and not cidrs:
        return []
    addresses = [a for n in policy.nodes for a in n.addresses]
    inventory = pa.table({"address": pa.array(addresses, pa.string())})
    con.register("rf_inventory", inventory)
    unknown = "OR (contains(a, ':') AND a NOT IN (SELECT address FROM rf_inventory))" if cidrs else ""
    rows = con.query(
        f"""SELECT DISTINCT a, i FROM (
              SELECT src AS a, coalesce(src_identity, '') AS i FROM {source}
              UNION ALL SELECT dst, coalesce(dst_identity, '') FROM {source})
            WHERE i <> '' {unknown}""",
    )
    return list(zip(rows.column("a").to_pylist(), rows.column("i").to_pylist(), strict=True))


#: How many compiled policies a process keeps (least recently used first out). More than one: a caller
#: that alternates between policies (a candidate and the running one, a rollout's before and after) would
#: otherwise compile each of them on every call (~0.1 s at 10,000 nodes); a few: each plan holds the
#: inventory's tables.
PLANS_KEPT = 4

# The compiled policies, most recently used last: a policy is compiled once and then classifies any number
# of flow inputs. An entry keeps the policy itself alive, so its id cannot be reused while cached.
_plans: list[tuple[Policy, Plan]] = []


def _base_plan(policy: Policy) -> Plan:
    for i, (cached, plan) in enumerate(_plans):
        if cached is policy:
            _plans.append(_plans.pop(i))
            return plan
    plan = compile_plan(policy)
    _plans.append((policy, plan))
    del _plans[:-PLANS_KEPT]
    return plan


def prepare(con: Engine, flows: FlowInput, policy: Policy, extra: tuple[str, ...] = ()) -> Prepared:
    """Register ``flows`` and the compiled ``policy`` on ``con``; return the classifying SQL.

    The SQL yields the key columns, ``extra`` source columns, and ``src_node`` … ``approved``.
    """
    source, identities = _source_sql(con, flows, extra)
    extra_principals = _extra_principals(con, source, policy, identities=identities, cidrs=selects_by_ipv6_cidr(policy))
    plan = compile_plan(policy, extra_principals) if extra_principals else _base_plan(policy)
    con.register("rf_addr", plan.addresses)
    con.register("rf_cells", plan.cells)
    con.register("rf_svc", plan.services)
    con.register("rf_class_zone", plan.class_zones)
    # Without identities in the flows every address has exactly one row (ident ''), so join on it alone.
    on_ident = any(i for _, i in extra_principals)
    s_on = "s.address = f.src" + (" AND s.ident = coalesce(f.src_identity, '')" if on_ident else "")
    d_on = "d.address = f.dst" + (" AND d.ident = coalesce(f.dst_identity, '')" if on_ident else "")

    # Addresses outside the inventory get a class from the IPv4 CIDR selectors. The address is parsed
    # once, inside a CASE so that only those rows pay for it (COALESCE would evaluate it for all).
    def side(alias: str, col: str, dst: bool) -> tuple[str, str]:
        base, stride, own = ("dbase", plan.per_dst, "i.rf_d0") if dst else ("sbase", plan.per_src, "i.rf_s0")
        if not plan.needs_v4_lookup(dst=dst):
            return f"coalesce({own}, 0)", "NULL"
        lookup = plan.v4_class_sql(f"i.rf_{alias}ip", dst=dst)
        return (
            f"coalesce({own}, {lookup}::BIGINT * {stride})",
            f"CASE WHEN {alias}.{base} IS NULL THEN {plan.ipv4_sql(f'f.{col}')} END",
        )

    sb, sip = side("s", "src", False)
    db, dip = side("d", "dst", True)
    ctes = f"""WITH rf_f AS (
  SELECT f.*, {plan.port_cell_sql("f.proto", "f.dport")} AS rf_cell FROM {source} AS f
), rf_i AS (
  SELECT f.*, s.node AS src_node, d.node AS dst_node, s.zone AS src_zone, d.zone AS dst_zone,
         s.job AS rf_sjob, d.job AS rf_djob, s.sbase AS rf_s0, d.dbase AS rf_d0, {sip} AS rf_sip, {dip} AS rf_dip
  FROM rf_f AS f LEFT JOIN rf_addr AS s ON {s_on} LEFT JOIN rf_addr AS d ON {d_on}
), rf_h AS (
  SELECT i.*, {sb} AS rf_sb, {db} AS rf_db FROM rf_i AS i
), rf_j AS (
  SELECT h.*, h.rf_sb + h.rf_db + h.rf_cell AS rf_key FROM rf_h AS h
)"""
    def unknown(alias: str, col: str, dst: bool) -> str:
        base = "dbase" if dst else "sbase"
        return f"CASE WHEN {alias}.{base} IS NULL THEN f.{col} END" if plan.needs_v4_lookup(dst=dst) else "NULL"

    key_ctes = f"""WITH rf_f AS (
  SELECT f.*, {plan.port_cell_sql("f.proto", "f.dport")} AS rf_cell FROM {source} AS f
), rf_k AS (
  SELECT f.*, coalesce(s.sbase, 0) + coalesce(d.dbase, 0) + f.rf_cell AS rf_k0,
         {unknown("s", "src", False)} AS rf_su, {unknown("d", "dst", True)} AS rf_du
  FROM rf_f AS f LEFT JOIN rf_addr AS s ON {s_on} LEFT JOIN rf_addr AS d ON {d_on}
)"""
    return Prepared(plan, ctes, key_ctes, (*_KEY_COLUMNS, *extra))


def classify(flows: pa.Table, policy: Policy, *, engine: EngineSpec | None = None) -> pa.Table:
    """Observed flows (``FLOW_SCHEMA``; classification columns, if any, are recomputed) →
    ``CLASSIFIED_SCHEMA``, rows in the input order, observed columns unchanged. ``engine``: where the
    SQL runs (DuckDB by default)."""
    try:
        observed = conform(flows)
    except ValueError as exc:
        raise AnalyzeError(f"not a flow table: {exc}") from exc
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise AnalyzeError(f"flow table has a column of the wrong type: {exc}") from exc
    keyed = observed.select(list(_KEY_COLUMNS)).append_column("rf_row", pa.array(range(observed.num_rows), pa.int64()))
    with session(engine=engine) as con:
        prepared = prepare(con, keyed, policy, extra=("rf_row",))
        out = con.query(f"SELECT * FROM ({prepared.flows_sql}) ORDER BY rf_row")
    # Order is restored by row number, so the observed columns are taken from the input untouched
    # (DuckDB would round nanosecond timestamps to microseconds).
    if out.num_rows != observed.num_rows or (
        observed.num_rows and not pc.all(pc.equal(out.column("rf_row"), keyed.column("rf_row"))).as_py()
    ):
        raise AnalyzeError("classification lost or duplicated flows; the compiled policy is inconsistent")
    new_cols = [out.column(f.name).cast(f.type) for f in CLASSIFIED_FIELDS]
    return pa.Table.from_arrays([*observed.columns, *new_cols], schema=CLASSIFIED_SCHEMA)


__all__ = ["FlowInput", "Prepared", "classify", "prepare"]
