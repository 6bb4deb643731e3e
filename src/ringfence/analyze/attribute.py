"""Attribute flows to the jobs that held their endpoints' nodes *at the time of the flow*.

The static inventory says which nodes a job may use; a scheduler says which job actually held a node
from when to when (:class:`~ringfence.jobs.interface.JobSpan`). A flow's end is attributed to the job
holding that end's node at the flow's ``first_seen``: one DuckDB ``ASOF`` join per side (node equal,
latest span started at or before the flow), then the span's end is checked. Where allocations on one
node overlap (jobs sharing a node), the most recently started job wins — the same rule as
:meth:`ringfence.jobs.JobTable.job_at`. Rows keep their order: the joins return row numbers and span
numbers, scattered back into place, so no 10-million-row sort is needed.

ASOF joins are DuckDB's; this analysis runs on the embedded engine only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ringfence.analyze.engine import AnalyzeError, session
from ringfence.jobs.interface import JobSpan
from ringfence.observe.schema import TS

#: Columns :func:`attribute_flows` adds (or replaces).
JOB_COLUMNS = ("src_job", "src_user", "dst_job", "dst_user")


def spans_table(spans: Iterable[JobSpan],
                label: Callable[[JobSpan], str] | None = None) -> tuple[pa.Table, pa.Table]:
    """``(per_node, per_span)``: one row per (span, node) with ``node``, ``rf_start``, ``rf_end`` (null = still
    running) and ``rf_s`` (the span's number); and one row per span with its ``job`` (``label(span)`` when
    given) and ``user``."""
    spans = list(spans)
    rows = [(i, n) for i, s in enumerate(spans) for n in s.nodes]
    return pa.table({
        "node": pa.array([n for _, n in rows], pa.string()),
        "rf_start": pa.array([spans[i].start for i, _ in rows], TS),
        "rf_end": pa.array([spans[i].end for i, _ in rows], TS),
        "rf_s": pa.array([i for i, _ in rows], pa.int64()),
    }), pa.table({
        "job": pa.array([label(s) if label else s.job for s in spans], pa.string()),
        "user": pa.array([s.user for s in spans], pa.string()),
    })


def _nodes(flows: pa.Table, side: str, addresses: Mapping[str, str] | None) -> pa.Array:
    """The node of each row's ``side`` end: the classified ``src_node``/``dst_node`` column where the table has
    one, else the address looked up in ``addresses`` (address → inventory node name)."""
    col = f"{side}_node"
    if col in flows.column_names and addresses is None:
        return flows.column(col)
    if addresses is None:
        raise AnalyzeError(f"flows have no {col} column", hint="give addresses (address → node) to attribute them")
    keys = pa.array(list(addresses), pa.string())
    values = pa.array(list(addresses.values()), pa.string())
    idx = pc.index_in(flows.column(side), value_set=keys)
    return pc.take(values, idx)


def attribute_flows(
    flows: pa.Table,
    spans: Iterable[JobSpan],
    addresses: Mapping[str, str] | None = None,
    *,
    at: str = "first_seen",
    label: Callable[[JobSpan], str] | None = None,
) -> pa.Table:
    """``flows`` with ``src_job``, ``src_user``, ``dst_job``, ``dst_user`` set from ``spans`` (null where no
    job held that end's node at the flow's ``at`` time). ``label`` names the job (default: ``span.job``)."""
    per_node, per_span = spans_table(spans, label)
    n = flows.num_rows
    base = pa.table({"rf_i": pa.array(np.arange(n, dtype=np.int64)), "ts": flows.column(at).cast(TS),
                     "sn": _nodes(flows, "src", addresses), "dn": _nodes(flows, "dst", addresses)})
    picked: dict[str, np.ndarray] = {}
    with session({"rf_f": base, "rf_spans": per_node}) as con:
        for side, col in (("src", "sn"), ("dst", "dn")):
            got = con.query(
                f"""SELECT f.rf_i, CASE WHEN s.rf_end IS NULL OR f.ts < s.rf_end THEN s.rf_s END AS rf_s
                    FROM rf_f AS f ASOF LEFT JOIN rf_spans AS s ON f.{col} = s.node AND f.ts >= s.rf_start"""
            )
            out = np.full(n, -1, dtype=np.int64)
            rows = got.column("rf_i").to_numpy()
            out[rows] = got.column("rf_s").fill_null(-1).to_numpy()
            picked[side] = out
    table = flows
    for side in ("src", "dst"):
        idx = pa.array(picked[side], mask=picked[side] < 0)
        for what in ("job", "user"):
            name = f"{side}_{what}"
            values = pc.take(per_span.column(what), idx)
            i = table.schema.get_field_index(name)
            table = table.set_column(i, name, values) if i >= 0 else table.append_column(name, values)
    return table


__all__ = ["JOB_COLUMNS", "attribute_flows", "spans_table"]
