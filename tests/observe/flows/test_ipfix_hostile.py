"""Hostile IPFIX (issue 11 causes 6, 22, 23): template count bounded, withdrawals honoured, no wrap-around."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from ringfence.observe.flows._netflow_raw import MAX_TEMPLATES
from ringfence.observe.flows.ipfix import IpfixReader
from rss_kit import PEAK_KB

# IE number, length: src4, dst4, sport, dport, proto, packets (8), octets (8), flowStartMs, flowEndMs.
FIELDS = ((8, 4), (12, 4), (7, 2), (11, 2), (4, 1), (2, 8), (1, 8), (152, 8), (153, 8))
START_MS = 1_700_000_000_000



def _message(*sets: bytes, domain: int = 1) -> bytes:
    body = b"".join(sets)
    return struct.pack(">HHIII", 10, 16 + len(body), 1_700_000_000, 0, domain) + body


def _set(set_id: int, payload: bytes) -> bytes:
    return struct.pack(">HH", set_id, 4 + len(payload)) + payload


def _template(tid: int, fields: tuple[tuple[int, int], ...] = FIELDS) -> bytes:
    return struct.pack(">HH", tid, len(fields)) + b"".join(struct.pack(">HH", ie, ln) for ie, ln in fields)


def _record(i: int, packets: int = 3, octets: int = 300, start: int = START_MS) -> bytes:
    return (
        bytes([10, 0, 0, 1, 10, 0, 0, 2])
        + struct.pack(">HHB", 40000 + i, 443, 6)
        + struct.pack(">QQQQ", packets, octets, start, start + 10)
    )


def test_withdrawal_of_all_templates_is_valid_and_keeps_flows(tmp_path: Path) -> None:
    f = tmp_path / "w.ipfix"
    f.write_bytes(
        _message(_set(2, _template(256)))
        + _message(_set(256, _record(1) + _record(2)))
        + _message(_set(2, struct.pack(">HH", 2, 0)))  # withdraw all templates (RFC 7011 §8.1)
        + _message(_set(2, _template(256)))
        + _message(_set(256, _record(3)))
    )
    result = IpfixReader().read(f)
    assert sorted(r["sport"] for r in result.flows.to_pylist()) == [40001, 40002, 40003]


def test_withdrawn_template_no_longer_decodes(tmp_path: Path) -> None:
    f = tmp_path / "w1.ipfix"
    f.write_bytes(
        _message(_set(2, _template(300)))
        + _message(_set(300, _record(1)))
        + _message(_set(2, struct.pack(">HH", 300, 0)))
        + _message(_set(300, _record(2)))
    )
    result = IpfixReader().read(f)
    assert [r["sport"] for r in result.flows.to_pylist()] == [40001]
    assert any("without its template" in w for w in result.warnings)


def test_all_ones_counters_do_not_wrap_to_minus_one(tmp_path: Path) -> None:
    f = tmp_path / "c.ipfix"
    f.write_bytes(
        _message(_set(2, _template(256)), _set(256, _record(1) + _record(2, packets=2**64 - 1, octets=2**64 - 1)))
    )
    result = IpfixReader().read(f)
    rows = result.flows.to_pylist()
    assert [r["sport"] for r in rows] == [40001] and rows[0]["packets"] == 3
    assert any("above 2^62" in w for w in result.warnings)
    assert all(r["packets"] >= 0 and r["bytes"] >= 0 for r in rows)


def test_flow_start_beyond_2262_is_unknown_not_1970(tmp_path: Path) -> None:
    f = tmp_path / "t.ipfix"
    f.write_bytes(_message(_set(2, _template(256)), _set(256, _record(1, start=2**62))))
    result = IpfixReader().read(f)
    rows = result.flows.to_pylist()
    assert len(rows) == 1 and rows[0]["first_seen"] is None
    assert any("beyond year 2262" in w for w in result.warnings)


def test_sixty_thousand_templates_are_bounded(tmp_path: Path) -> None:
    f = tmp_path / "many.ipfix"
    with f.open("wb") as fh:
        for domain in range(15):  # 60,000 distinct templates over 15 observation domains
            sets = [_set(2, b"".join(_template(256 + i) for i in range(k, k + 100))) for k in range(0, 4000, 100)]
            fh.write(b"".join(_message(s, domain=domain) for s in sets))
        fh.write(_message(_set(2, _template(256)), _set(256, _record(7)), domain=99))
    code = (
        "import resource, pathlib\n"
        "from ringfence.observe.flows.ipfix import IpfixReader\n"
        "from ringfence.observe.flows.interface import FlowSourceError\n"
        "try:\n"
        f"    IpfixReader().read(pathlib.Path({str(f)!r}))\n"
        "    said = 'read'\n"
        "except FlowSourceError as exc:\n"
        "    said = 'limit' if 'beyond the limit' in str(exc) else 'other'\n"
        f"print(said, {PEAK_KB})\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=dict(os.environ)
    )
    assert out.returncode == 0, out.stderr[-2000:]
    said, rss = out.stdout.split()
    assert int(rss) < 600_000  # was 1 GB and 51 s
    assert MAX_TEMPLATES < 60_000
    assert said == "limit"  # the template of domain 99 is beyond the bound: ignored, and the error says why


def _v5_datagram(i: int, secs: int, uptime: int) -> bytes:
    """One NetFlow v5 datagram of one TCP record whose flow started 1 s and ended 0.5 s before export."""
    record = struct.pack(
        ">IIIHHIIIIHHBBBBHHBBH",
        0x0A000001, 0x0A000002 + i % 250, 0, 0, 0, 4, 400, uptime - 1000, uptime - 500, 40000 + i, 443, 0, 0x12, 6,
        0, 0, 0, 0, 0, 0,
    )  # fmt: skip
    return struct.pack(">HHIIIIBBH", 5, 1, uptime, secs, 0, i, 0, 0, 0) + record


def test_many_small_v5_datagrams_decode_in_bulk_each_on_its_own_clock() -> None:
    """v5 datagrams (at most 30 records each) are gathered and decoded together, not one table a datagram
    (~1 ms of set-up each: a file of 1-record datagrams took ~14 s a MB); every record keeps the clock of
    the datagram it came in."""
    from ringfence.observe.flows._common import WarningLog
    from ringfence.observe.flows._netflow_raw import RawDatagramParser

    n = 3000
    data = b"".join(_v5_datagram(i, 1_700_000_000 + i, 50_000 + 7 * i) for i in range(n))
    tables = RawDatagramParser(Path("v5.dat"), WarningLog()).parse(data)
    assert len(tables) == 1 and tables[0].num_rows == n
    rows = tables[0].to_pylist()
    for i in (0, 1, n // 2, n - 1):
        assert rows[i]["sport"] == 40000 + i
        export_ns = (1_700_000_000 + i) * 10**9
        assert rows[i]["first_seen"].timestamp() * 10**9 == pytest.approx(export_ns - 10**9, abs=1000)
        assert rows[i]["last_seen"].timestamp() * 10**9 == pytest.approx(export_ns - 5 * 10**8, abs=1000)
