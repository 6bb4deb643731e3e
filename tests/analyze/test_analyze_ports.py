"""Port segments: every range is an exact union of segments; the SQL agrees with Python."""

from __future__ import annotations

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringfence.analyze import Segments

_range = st.tuples(st.integers(0, 65535), st.integers(0, 65535)).map(lambda t: (min(t), max(t)))


@settings(max_examples=200, deadline=None)
@given(ranges=st.lists(_range, max_size=12), port=st.integers(0, 65535))
def test_ranges_are_unions_of_segments(ranges: list[tuple[int, int]], port: int) -> None:
    segs = Segments.of(ranges)
    seg = segs.segment(port)
    lo, hi = segs.bounds(seg)
    assert lo <= port <= hi
    for rlo, rhi in ranges:
        covered = seg in segs.covering(rlo, rhi)
        assert covered == (rlo <= port <= rhi)


@settings(max_examples=25, deadline=None)
@given(ranges=st.lists(_range, max_size=40), ports=st.lists(st.integers(0, 65535), min_size=1, max_size=30))
def test_sql_matches_python(ranges: list[tuple[int, int]], ports: list[int]) -> None:
    segs = Segments.of(ranges)
    con = duckdb.connect()
    sql = segs.sql("p")
    got = [
        r[0]
        for r in con.sql(
            f"SELECT {sql} FROM (SELECT unnest($ports) AS p, generate_subscripts($ports, 1) AS i) ORDER BY i",
            params={"ports": ports},
        ).fetchall()
    ]
    assert got == [segs.segment(p) for p in ports]


def test_rejects_out_of_range() -> None:
    with pytest.raises(ValueError, match="outside"):
        Segments.of([(10, 70000)])
