"""dnsmasq query-log reader: answers over time, the missing year, hostile input."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ringfence.observe.flows.events.dnsmasq import DnsmasqReader
from ringfence.observe.flows.events.interface import DNS_SCHEMA
from ringfence.observe.flows.interface import FlowSourceError

# As dnsmasq 2.90 wrote them here with --log-queries=extra --log-facility=FILE.
LOG = """Dec  1 11:52:53 dnsmasq[24401]: started, version 2.90 cache disabled
Dec  1 11:52:53 dnsmasq[24401]: read /tmp/rftx/hosts - 2 names
Dec  1 11:52:54 dnsmasq[24401]: 1 10.99.0.1/55756 query[A] storage.rftx.lab from 10.99.0.1
Dec  1 11:52:54 dnsmasq[24401]: 1 10.99.0.1/55756 /tmp/rftx/hosts storage.rftx.lab is 10.99.0.2
Dec  1 11:52:54 dnsmasq[24401]: 2 10.99.0.1/55756 config storage.rftx.lab is NODATA-IPv6
"""


def test_answers_with_client_and_time(tmp_path: Path) -> None:
    path = tmp_path / "dnsmasq.log"
    path.write_text(LOG + "Jan  2 00:00:01 dnsmasq[1]: reply example.com is 93.184.216.34\n")
    os.utime(path, (1799020800, 1799020800))  # the log last changed on 2027-01-04: no year given, that is the year
    res = DnsmasqReader().read(path)
    assert res.events.schema == DNS_SCHEMA and res.warnings == ()
    rows = res.events.to_pylist()
    assert [(r["client"], r["name"], r["answer"], r["address"]) for r in rows] == [
        ("10.99.0.1", "storage.rftx.lab", "10.99.0.2", "10.99.0.2"),
        ("10.99.0.1", "storage.rftx.lab", "NODATA-IPv6", None), (None, "example.com", "93.184.216.34", "93.184.216.34")]
    assert rows[0]["time"].isoformat() == "2026-12-01T11:52:54+00:00"  # December before a log's January: last year
    assert rows[2]["time"].year == 2027
    assert {r["time"].year for r in DnsmasqReader(year=2025).read(path).events.to_pylist()} == {2025}


def test_impossible_dates_and_foreign_lines_are_named(tmp_path: Path) -> None:
    path = tmp_path / "dnsmasq.log"
    path.write_bytes(LOG.encode() + b"Feb 30 11:52:54 dnsmasq[1]: 3 10.99.0.1/1 config a.lab is 1.2.3.4\n"
                     b"hello world\n\xff\n" + LOG.encode())
    res = DnsmasqReader(year=2026).read(path)
    assert [r["line"] for r in res.events.to_pylist()] == [4, 5, 12, 13]
    text = "\n".join(res.warnings)
    assert "line 6: no valid date" in text and "line 7: not a dnsmasq" in text and "line 8: not UTF-8" in text


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FlowSourceError):
        DnsmasqReader().read(tmp_path / "nope.log")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=400))
def test_random_tails_keep_the_answer(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "fuzz.log"
    path.write_bytes(LOG.encode() + data)
    try:
        res = DnsmasqReader(year=2026).read(path)
    except FlowSourceError:
        return
    assert res.events.num_rows >= 1
