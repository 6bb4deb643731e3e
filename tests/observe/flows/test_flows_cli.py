"""``ringfence flows``: output formats, stdin, errors without tracebacks."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from ringfence.cli import main
from ringfence.cli.flows_cmd import JSONL_KEYS, TABLE_ROWS

SAMPLES = Path(__file__).resolve().parents[3].parent / "shared" / "samples"
BRIM = SAMPLES / "zeek" / "brimdata_zed_conn.log"
VPC = SAMPLES / "vpc" / "otel_valid_vpc_flow_log_multi.log"


def test_jsonl(capsys: pytest.CaptureFixture[str]) -> None:
    dns = SAMPLES / "hubble" / "basic-sample-5-dns-flows.json"
    assert main(["flows", "--format", "jsonl", str(VPC), str(dns)]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert len(lines) == 3
    assert all(set(JSONL_KEYS) <= set(obj) for obj in lines)
    assert lines[0]["first_seen"] == "2014-12-14T04:06:50.000000000Z" and lines[0]["class"] is None
    assert lines[2]["protocol"] == "dns" and lines[2]["protection"] == "plaintext"


def test_table_is_truncated(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["flows", str(BRIM)]) == 0
    out = capsys.readouterr().out
    assert "92 flows" in out and f"{92 - TABLE_ROWS} more flows" in out


def test_parquet_needs_output_and_writes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["flows", "--format", "parquet", str(VPC)]) == 2
    assert "needs -o" in capsys.readouterr().err
    out = tmp_path / "f.parquet"
    assert main(["flows", "--format", "parquet", "-o", str(out), str(VPC)]) == 0
    assert pq.read_table(out).num_rows == 2


def test_stdin(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(VPC.read_bytes())))
    assert main(["flows", "--format", "jsonl", "-"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[0])["source"] == "vpc:stdin"


def test_bad_input_exits_2_without_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "junk.log"
    bad.write_bytes(b"\x00\x01garbage")
    assert main(["flows", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {bad}: unrecognised flow format") and "Traceback" not in err


def test_warnings_go_to_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "v.log"
    p.write_text(VPC.read_text() + "\n2 1 eni x y\n")
    assert main(["flows", "--format", "jsonl", str(p)]) == 0
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == 2 and "warning:" in captured.err and "line 4" in captured.err


def test_timestamps_are_iso_text_with_the_columns_digits_and_nulls_stay_null() -> None:
    import pyarrow as pa

    from ringfence.cli.flows_cmd import _iso

    ns = pa.array([0, 1_500_000_000_123_456_789, None, -1], pa.timestamp("ns", tz="UTC"))
    us = pa.array([1_500_000_000_123_456, None, 0, 5], pa.timestamp("us", tz="UTC"))
    out = _iso(pa.table({"first_seen": ns, "last_seen": us}))
    assert out["first_seen"].to_pylist() == [
        "1970-01-01T00:00:00.000000000Z", "2017-07-14T02:40:00.123456789Z", None, "1969-12-31T23:59:59.999999999Z",
    ]  # fmt: skip
    assert out["last_seen"].to_pylist() == [
        "2017-07-14T02:40:00.123456Z", None, "1970-01-01T00:00:00.000000Z", "1970-01-01T00:00:00.000005Z",
    ]  # fmt: skip
    assert out.schema.field("first_seen").type == pa.string()
