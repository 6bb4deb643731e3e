"""Aggregates of classified flows for controls and reports, computed in DuckDB.

* :func:`communication_matrix` — observed vs. approved: one row per (zone pair, class, rule) observed,
  plus one row per approved flow that was never observed (``status`` ``unused``);
* :func:`protection_breakdown` — per traffic class, bytes by what the payload showed;
* :func:`group_flows` — identical 5-tuples merged, largest first (what controls turn into findings).

Each takes observed flows (classified on the fly, also straight from Parquet) or already classified flows.
"""

from __future__ import annotations

import pyarrow as pa

from ringfence.analyze.classify import FlowInput, prepare
from ringfence.analyze.engine import Engine, EngineSpec, session
from ringfence.observe.schema import Protection
from ringfence.policy import Endpoint, Policy

MATRIX_SCHEMA = pa.schema(
    [
        ("src_zone", pa.string()),
        ("dst_zone", pa.string()),
        ("class", pa.string()),
        ("rule", pa.string()),
        ("status", pa.string()),  # approved | unapproved | unused
        ("flows", pa.int64()),
        ("bytes", pa.int64()),
        ("src_endpoint", pa.string()),  # the approved flow's selectors, e.g. "job:train-a"
        ("dst_endpoint", pa.string()),
    ]
)

_PROTECTIONS = tuple(p.value for p in Protection)
BREAKDOWN_SCHEMA = pa.schema(
    [("class", pa.string()), ("flows", pa.int64()), ("bytes", pa.int64())]
    + [(f"{p.replace('-', '_')}_bytes", pa.int64()) for p in _PROTECTIONS]
)


_COUNTS = (("count(*)", "flows"), ("coalesce(sum(bytes), 0)", "bytes"))


def _is_classified(flows: FlowInput) -> bool:
    return (
        isinstance(flows, pa.Table)
        and "class" in flows.column_names
        and flows.column("class").null_count < max(flows.num_rows, 1)
    )


def _grouped(
    con: Engine,
    flows: FlowInput,
    policy: Policy,
    by: tuple[str, ...],
    aggregates: tuple[tuple[str, str], ...],
) -> str:
    """SQL: src_zone, dst_zone, class, rule, approved, *by, aggregates — from classified or observed flows.

    ``aggregates`` are (SQL over source columns, name), summable (count, sum)."""
    if _is_classified(flows):
        assert isinstance(flows, pa.Table)
        con.register("rf_classified", flows)
        cols = ", ".join(f'"{c}"' for c in ("src_zone", "dst_zone", "class", "rule", "approved", *by))
        aggs = ", ".join(f"{expr} AS {name}" for expr, name in aggregates)
        return f"SELECT {cols}, {aggs} FROM rf_classified GROUP BY ALL"
    needed = tuple(dict.fromkeys(("bytes", *by)))
    return prepare(con, flows, policy, extra=needed).grouped_sql(by, aggregates)


def _endpoint_zone(policy: Policy, ep: Endpoint) -> str | None:
    """The one zone an endpoint lies in, if it names one unambiguously."""
    if ep.zone:
        return ep.zone
    node_names: tuple[str, ...] = ()
    if ep.node:
        node_names = (ep.node,)
    elif ep.service and (svc := policy.service(ep.service)):
        node_names = (svc.node,)
    elif ep.job and (job := policy.job(ep.job)):
        node_names = job.members
    zones = {n.zone for name in node_names if (n := policy.node(name)) is not None}
    return zones.pop() if len(zones) == 1 else None


def communication_matrix(flows: FlowInput, policy: Policy, *, engine: EngineSpec | None = None) -> pa.Table:
    """Observed vs. approved communication matrix (``MATRIX_SCHEMA``), largest observed first."""
    with session(engine=engine) as con:
        src = _grouped(con, flows, policy, (), _COUNTS)
        observed = con.query(
            f"""SELECT src_zone, dst_zone, "class", rule,
                       CASE WHEN approved THEN 'approved' ELSE 'unapproved' END AS status,
                       sum(flows)::BIGINT AS flows, sum(bytes)::BIGINT AS bytes
                FROM ({src}) GROUP BY ALL
                ORDER BY bytes DESC, flows DESC, src_zone NULLS LAST, dst_zone NULLS LAST, "class", rule NULLS LAST""",
        )
    seen = set(observed.column("rule").to_pylist())
    by_id = {r.id: r for r in policy.approved}
    observed_rules = [by_id.get(r) if r is not None else None for r in observed.column("rule").to_pylist()]
    observed_ep = {
        "src_endpoint": [r.source.describe() if r else None for r in observed_rules],
        "dst_endpoint": [r.destination.describe() if r else None for r in observed_rules],
    }
    unused = [r for r in policy.approved if r.id not in seen]
    rows = {
        "src_zone": observed.column("src_zone").to_pylist() + [_endpoint_zone(policy, r.source) for r in unused],
        "dst_zone": observed.column("dst_zone").to_pylist() + [_endpoint_zone(policy, r.destination) for r in unused],
        "class": observed.column("class").to_pylist() + [r.traffic_class.value for r in unused],
        "rule": observed.column("rule").to_pylist() + [r.id for r in unused],
        "status": observed.column("status").to_pylist() + ["unused"] * len(unused),
        "flows": observed.column("flows").to_pylist() + [0] * len(unused),
        "bytes": observed.column("bytes").to_pylist() + [0] * len(unused),
        "src_endpoint": observed_ep["src_endpoint"] + [r.source.describe() for r in unused],
        "dst_endpoint": observed_ep["dst_endpoint"] + [r.destination.describe() for r in unused],
    }
    return pa.Table.from_pydict(rows, schema=MATRIX_SCHEMA)


def protection_breakdown(flows: FlowInput, policy: Policy, *, engine: EngineSpec | None = None) -> pa.Table:
    """Per traffic class: flows, bytes, and bytes per protection verdict (``BREAKDOWN_SCHEMA``)."""
    sums = ", ".join(
        f"coalesce(sum(bytes) FILTER (WHERE protection = '{p}'), 0)::BIGINT AS {p.replace('-', '_')}_bytes"
        for p in _PROTECTIONS
    )
    with session(engine=engine) as con:
        src = _grouped(con, flows, policy, ("protection",), _COUNTS)
        table = con.query(
            f"""SELECT "class", sum(flows)::BIGINT AS flows, sum(bytes)::BIGINT AS bytes, {sums}
                FROM ({src}) GROUP BY "class" ORDER BY bytes DESC, "class" """,
        )
    return table.cast(BREAKDOWN_SCHEMA)


GROUPED_KEYS = (
    "src", "dst", "sport", "dport", "proto", "protection",
    "src_node", "dst_node", "src_zone", "dst_zone", "src_job", "dst_job", "class", "rule", "approved",
    "src_identity", "dst_identity",
)  # fmt: skip

_PROTO = {"tcp": 6, "udp": 17}


def group_flows(classified: pa.Table, policy: Policy, *, engine: EngineSpec | None = None) -> pa.Table:
    """Merge records of identical 5-tuples with identical classification (several sources, several
    captures), largest first, and add what controls need from the policy:

    ``records``, ``bytes``, ``payload_bytes`` (sums), ``protocol``, ``reason``, ``sources``,
    ``first_seen``, ``last_seen``, ``reply_packets`` (packets the responder sent; null when the flow
    source does not tell directions); ``service`` (the service at the responder's port, first declared),
    ``admin`` (that service is an administrative path), ``outside`` (the responder is in an external
    zone or not in the inventory at all), ``job_port`` (an end is a job member and the port lies in
    that job's collective range — what collective traffic looks like, approved or not).
    """
    # the users of scheduler-attributed flows (assess --jobs) are kept so findings can name them
    extra = tuple(k for k in ("src_user", "dst_user") if k in classified.column_names)
    keys = ", ".join(f'"{k}"' for k in GROUPED_KEYS + extra)
    services = pa.table(
        {
            "idx": pa.array(range(len(policy.services)), pa.int32()),
            "name": pa.array([s.name for s in policy.services], pa.string()),
            "node": pa.array([s.node for s in policy.services], pa.string()),
            "proto": pa.array([_PROTO[s.proto] for s in policy.services], pa.int32()),
            "lo": pa.array([s.port_range[0] for s in policy.services], pa.int32()),
            "hi": pa.array([s.port_range[1] for s in policy.services], pa.int32()),
            "admin": pa.array([s.admin for s in policy.services], pa.bool_()),
        }
    )
    jobs = pa.table(
        {
            "job": pa.array([j.name for j in policy.jobs], pa.string()),
            "lo": pa.array([j.collective_range[0] for j in policy.jobs], pa.int32()),
            "hi": pa.array([j.collective_range[1] for j in policy.jobs], pa.int32()),
        }
    )
    external = pa.table(
        {"zone": pa.array(sorted(z.name for z in policy.zones if z.trust.value == "external"), pa.string())}
    )
    tables = {"rf_classified": classified, "rf_services": services, "rf_jobs": jobs, "rf_external": external}
    with session(tables, engine=engine) as con:
        return con.query(
            f"""WITH g AS (
                  SELECT {keys}, count(*)::BIGINT AS records, coalesce(sum(bytes), 0)::BIGINT AS bytes,
                         sum(payload_bytes)::BIGINT AS payload_bytes, min(protocol) AS protocol,
                         min(reason) AS reason, string_agg(DISTINCT source, ', ' ORDER BY source) AS sources,
                         min(first_seen) AS first_seen, max(last_seen) AS last_seen,
                         -- packets the responder sent back; NULL when the source cannot tell directions
                         sum(packets - packets_fwd)::BIGINT AS reply_packets
                  FROM rf_classified GROUP BY {keys}
                ), s AS (
                  SELECT g.src, g.dst, g.sport, g.dport, g.proto, g.dst_node,
                         arg_min(v.name, v.idx) AS service, arg_min(v.admin, v.idx) AS admin
                  FROM g JOIN rf_services AS v
                    ON v.node = g.dst_node AND v.proto = g.proto AND g.dport BETWEEN v.lo AND v.hi
                  GROUP BY ALL
                )
                SELECT g.*, s.service, coalesce(s.admin, false) AS admin,
                       (g.dst_node IS NULL OR g.dst_zone IN (SELECT zone FROM rf_external)) AS outside,
                       (g.proto IN (6, 17) AND EXISTS (
                          SELECT 1 FROM rf_jobs AS j
                          WHERE (j.job = g.src_job OR j.job = g.dst_job) AND g.dport BETWEEN j.lo AND j.hi)) AS job_port
                FROM g LEFT JOIN s ON s.src = g.src AND s.dst = g.dst AND s.dst_node = g.dst_node AND s.proto = g.proto
                  AND s.sport IS NOT DISTINCT FROM g.sport AND s.dport IS NOT DISTINCT FROM g.dport
                ORDER BY g.bytes DESC, g.src, g.dst, g.sport NULLS FIRST, g.dport NULLS FIRST, g.proto, g.protection""",
        )


__all__ = [
    "BREAKDOWN_SCHEMA",
    "GROUPED_KEYS",
    "MATRIX_SCHEMA",
    "communication_matrix",
    "group_flows",
    "protection_breakdown",
]
