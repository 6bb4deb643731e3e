"""JobTable: the job holding a node at a moment (start inclusive, end exclusive, newest allocation wins)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from ringfence.jobs import JobSpan, JobTable

T0 = datetime(2026, 12, 1, 12, tzinfo=UTC)


def _span(job: str, nodes: tuple[str, ...], start: int, end: int | None) -> JobSpan:
    return JobSpan(job=job, user=f"u{job}", nodes=nodes, start=T0 + timedelta(minutes=start),
                   end=None if end is None else T0 + timedelta(minutes=end))


def test_job_at_by_node_and_time() -> None:
    table = JobTable([_span("2", ("a",), 10, None), _span("1", ("a", "b"), 0, 10)])
    assert [s.job for s in table.spans()] == ["1", "2"]  # oldest first
    at = lambda node, minute: table.job_at(node, T0 + timedelta(minutes=minute))  # noqa: E731
    assert at("a", 0).job == "1" and at("a", 9.99).job == "1"  # type: ignore[union-attr]
    assert at("a", 10).job == "2" and at("a", 10_000).job == "2"  # type: ignore[union-attr]
    assert at("b", 10) is None and at("b", -1) is None and at("c", 5) is None
