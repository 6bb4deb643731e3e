"""Observed flows → a few aggregated *observations*, in DuckDB (the only per-flow step of discovery).

Flows are classified against the inventory by the shared classifier SQL
(:func:`ringfence.analyze.classify.prepare`) and grouped, in the same query, by who talked to whom
on which port: (source node or address, destination node or address, protocol, class, collective
job, port bucket). A job's collective traffic and unclassified traffic on ports of the OS ephemeral
range share one bucket (``-1``) per pair, so a capture with thousands of ephemeral ports still gives
one row per pair; the lowest and highest port are kept for the evidence. Everything after this step works
on these rows — never on flows.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.compute as pc

from ringfence.analyze.classify import prepare
from ringfence.analyze.engine import AnalyzeError, EngineSpec, session
from ringfence.observe.schema import conform
from ringfence.policy import Policy

#: Port bucket shared by a pair's ephemeral-range ports (collective and unclassified traffic).
EPHEMERAL_BUCKET = -1


@dataclass(frozen=True)
class Observation:
    """One group of flows: same ends, protocol, class, collective job and port bucket.

    ``src_node``/``dst_node`` are inventory node names, or None when the address is not in the
    inventory (then ``src_addr``/``dst_addr`` and the identity a flow record carried, if any).
    ``bucket`` is the destination port, or :data:`EPHEMERAL_BUCKET` for a collapsed ephemeral range
    (``port_lo``–``port_hi``); None for protocols without ports.
    """

    src_node: str | None
    dst_node: str | None
    src_addr: str | None
    dst_addr: str | None
    src_ident: str | None
    dst_ident: str | None
    proto: int
    traffic_class: str
    cjob: str | None  # the job both ends share when the classifier called it that job's collective
    bucket: int | None
    flows: int
    bytes: int
    first_seen: datetime | None
    last_seen: datetime | None
    port_lo: int | None
    port_hi: int | None


def _ns_column(flows: pa.Table, name: str) -> pa.Array | pa.ChunkedArray:
    # Epoch nanoseconds as int64: the classifier passes unknown extra columns through untouched,
    # while a timestamp column would be turned into text on the way.
    return pc.cast(flows.column(name), pa.int64())


def _ts(ns: int | None) -> datetime | None:
    if ns is None:
        return None
    return datetime.fromtimestamp(ns // 1_000_000_000, UTC).replace(microsecond=(ns // 1000) % 1_000_000)


def observe(
    flows: pa.Table, inventory: Policy, ephemeral: tuple[int, int], engine: EngineSpec | None = None
) -> list[Observation]:
    """Classify ``flows`` (``FLOW_SCHEMA``) against ``inventory`` and aggregate them (see the module doc)."""
    try:
        observed = conform(flows)
    except ValueError as exc:
        raise AnalyzeError(f"not a flow table: {exc}") from exc
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise AnalyzeError(f"flow table has a column of the wrong type: {exc}") from exc
    keyed = observed.select(["src", "dst", "proto", "dport", "src_identity", "dst_identity", "bytes"])
    keyed = keyed.append_column("rf_first", _ns_column(observed, "first_seen"))
    keyed = keyed.append_column("rf_last", _ns_column(observed, "last_seen"))
    elo, ehi = ephemeral
    with session(engine=engine) as con:
        prepared = prepare(con, keyed, inventory, extra=("bytes", "rf_first", "rf_last"))
        table = con.query(
            f"""WITH c AS ({prepared.flows_sql}), k AS (
                  SELECT *, ("class" = 'collective' AND src_job = dst_job) AS rf_coll FROM c
                )
                SELECT src_node, dst_node,
                       CASE WHEN src_node IS NULL THEN src END AS src_addr,
                       CASE WHEN dst_node IS NULL THEN dst END AS dst_addr,
                       CASE WHEN src_node IS NULL THEN src_identity END AS src_ident,
                       CASE WHEN dst_node IS NULL THEN dst_identity END AS dst_ident,
                       proto::INTEGER AS proto, "class",
                       CASE WHEN rf_coll THEN src_job END AS cjob,
                       CASE WHEN dport BETWEEN {elo:d} AND {ehi:d} AND (rf_coll OR "class" = 'unclassified')
                            THEN {EPHEMERAL_BUCKET:d} ELSE dport END AS bucket,
                       count(*)::BIGINT AS flows, coalesce(sum(bytes), 0)::BIGINT AS bytes,
                       min(rf_first) AS first_ns, max(rf_last) AS last_ns,
                       min(dport) AS port_lo, max(dport) AS port_hi
                FROM k GROUP BY ALL
                ORDER BY bytes DESC, flows DESC, src_node, dst_node, src_addr, dst_addr, proto, bucket""",
        )
    return [
        Observation(
            src_node=r["src_node"],
            dst_node=r["dst_node"],
            src_addr=r["src_addr"],
            dst_addr=r["dst_addr"],
            src_ident=r["src_ident"],
            dst_ident=r["dst_ident"],
            proto=r["proto"],
            traffic_class=r["class"],
            cjob=r["cjob"],
            bucket=r["bucket"],
            flows=r["flows"],
            bytes=r["bytes"],
            first_seen=_ts(r["first_ns"]),
            last_seen=_ts(r["last_ns"]),
            port_lo=r["port_lo"],
            port_hi=r["port_hi"],
        )
        for r in table.to_pylist()
    ]


__all__ = ["EPHEMERAL_BUCKET", "Observation", "observe"]
