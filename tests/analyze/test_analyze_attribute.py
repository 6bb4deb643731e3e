"""Attribution of flows to jobs by node and time interval, checked against JobTable.job_at row by row."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringfence.analyze import AnalyzeError
from ringfence.analyze.attribute import attribute_flows
from ringfence.jobs import JobSpan, JobTable
from ringfence.observe.schema import TS

T0 = datetime(2026, 12, 1, 12, tzinfo=UTC)
ADDR = {"10.0.0.1": "w0", "10.0.0.2": "w1", "10.0.0.3": "w2"}


def _flows(rows: list[tuple[str, str, int]]) -> pa.Table:
    return pa.table({"src": [r[0] for r in rows], "dst": [r[1] for r in rows],
                     "first_seen": pa.array([T0 + timedelta(seconds=r[2]) for r in rows], TS)})


def test_the_same_node_belongs_to_different_jobs_over_time() -> None:
    spans = [JobSpan(job="1", user="alice", nodes=("w0", "w1"), start=T0, end=T0 + timedelta(seconds=60)),
             JobSpan(job="2", user="bob", nodes=("w0",), start=T0 + timedelta(seconds=60))]
    out = attribute_flows(_flows([("10.0.0.1", "10.0.0.2", 5), ("10.0.0.1", "10.0.0.2", 60),
                                  ("10.0.0.3", "10.0.0.1", -5), ("8.8.8.8", "10.0.0.1", 99)]), spans, ADDR)
    assert out.column("src_job").to_pylist() == ["1", "2", None, None]
    assert out.column("dst_user").to_pylist() == ["alice", None, None, "bob"]


def test_a_classified_table_uses_its_node_columns_and_keeps_row_order() -> None:
    flows = _flows([("x", "y", s) for s in range(50)]).append_column("src_node", pa.array(["w0"] * 50)) \
        .append_column("dst_node", pa.array(["w1"] * 50)).append_column("src_job", pa.array(["static"] * 50))
    spans = [JobSpan(job=str(i), user="u", nodes=("w0",), start=T0 + timedelta(seconds=i * 10)) for i in range(5)]
    out = attribute_flows(flows, spans, label=lambda s: f"slurm:{s.job}")
    assert out.column("src_job").to_pylist() == [f"slurm:{s // 10}" for s in range(50)]
    assert out.column_names.count("src_job") == 1 and out.column("dst_job").null_count == 50


def test_without_node_columns_addresses_are_required() -> None:
    with pytest.raises(AnalyzeError, match="src_node"):
        attribute_flows(_flows([("a", "b", 0)]), [])


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(["w0", "w1", "w2"]), st.integers(0, 100), st.integers(1, 50) | st.none()),
             max_size=8),
    st.lists(st.tuples(st.sampled_from(list(ADDR)), st.sampled_from(list(ADDR)), st.integers(-10, 200)),
             min_size=1, max_size=30),
)
def test_sql_agrees_with_job_at(raw_spans: list[tuple[str, int, int | None]],
                                raw_flows: list[tuple[str, str, int]]) -> None:
    spans = [JobSpan(job=str(i), user=f"u{i}", nodes=(n,), start=T0 + timedelta(seconds=s),
                     end=None if d is None else T0 + timedelta(seconds=s + d))
             for i, (n, s, d) in enumerate(raw_spans)]
    # distinct starts per node: with equal starts, which of two newest spans wins is not defined
    seen = {(s.nodes, s.start) for s in spans}
    if len(seen) != len(spans):
        return
    out = attribute_flows(_flows(raw_flows), spans, ADDR)
    table = JobTable(spans)
    for (src, dst, sec), sj, dj in zip(raw_flows, out.column("src_job").to_pylist(),
                                       out.column("dst_job").to_pylist(), strict=True):
        want = [table.job_at(ADDR[a], T0 + timedelta(seconds=sec)) for a in (src, dst)]
        assert [sj, dj] == [w.job if w else None for w in want]
