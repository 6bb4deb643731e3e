"""Hostile text flow logs (issue 11 causes 3, 4, 5, 20, 21): bounded, named, valid records kept."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringfence.cli import main
from ringfence.observe.flows._common import (
    BLOCK_SIZE,
    MAX_LINE_BYTES,
    WarningLog,
    invalid_utf8_rows,
    iter_line_blocks,
    line_spans,
)
from ringfence.observe.flows.interface import FlowSourceError
from ringfence.observe.flows.vpc import VpcFlowLogReader
from ringfence.observe.flows.zeek import ZeekReader
from rss_kit import PEAK_KB

SHARED = Path(__file__).resolve().parents[3].parent / "shared" / "samples"
ZEEK = (SHARED / "zeek" / "brimdata_zed_conn.log").read_bytes()
VPC = (SHARED / "vpc" / "otel_valid_vpc_flow_log.log").read_bytes()
HEADER = b"".join(ln + b"\n" for ln in ZEEK.split(b"\n") if ln.startswith(b"#"))
DATA = [ln for ln in ZEEK.split(b"\n") if ln and not ln.startswith(b"#")]



def _peak_rss_kb(reader: str, path: Path) -> tuple[int, int]:
    """Read ``path`` in a fresh interpreter: (flows, peak RSS in KiB) — memory is the process's own."""
    code = (
        "import resource, sys\n"
        f"from ringfence.observe.flows.{reader.lower().removesuffix('reader')} import {reader}\n"
        f"r = {reader}().read(__import__('pathlib').Path({str(path)!r}))\n"
        f"print(r.flows.num_rows, {PEAK_KB})\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=dict(os.environ)
    )
    assert out.returncode == 0, out.stderr[-2000:]
    rows, rss = out.stdout.split()
    return int(rows), int(rss)


def _baseline_rss_kb() -> int:
    code = f"import resource, ringfence.observe.flows.zeek\nprint({PEAK_KB})"
    return int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)


def test_header_then_50_mb_of_empty_lines_is_bounded(tmp_path: Path) -> None:
    f = tmp_path / "empty.log"
    f.write_bytes(HEADER + b"\n" * (50 << 20))
    rows, rss = _peak_rss_kb("ZeekReader", f)
    assert rows == 0
    assert rss - _baseline_rss_kb() < 400_000  # was 1.1-1.3 GB: memory per block, not per file


def test_one_gigabyte_line_of_zeros_is_skipped_in_bounded_memory(tmp_path: Path) -> None:
    f = tmp_path / "zeros.log"
    f.write_bytes(HEADER + b"\n".join(DATA[:20]) + b"\n")
    with f.open("r+b") as fh:
        fh.truncate(f.stat().st_size + (1 << 30))  # sparse: 1 GB of zero bytes, no newline
    rows, rss = _peak_rss_kb("ZeekReader", f)
    assert rows == 20  # the good records before it are kept
    assert rss - _baseline_rss_kb() < 400_000  # was 2.2 GB


def test_long_line_warning_names_its_line_and_reading_goes_on(tmp_path: Path) -> None:
    f = tmp_path / "long.log"
    # Longer than a block plus the line limit: it reaches the carry-over, where it is dropped unread.
    f.write_bytes(HEADER + DATA[0] + b"\n" + b"x" * (BLOCK_SIZE + MAX_LINE_BYTES + 10) + b"\n" + DATA[1] + b"\n")
    result = ZeekReader().read(f)
    assert result.flows.num_rows == 2
    line = HEADER.count(b"\n") + 2
    assert any(f"long.log:{line}: longer than" in w for w in result.warnings)


def test_long_line_without_warnings_is_an_error(tmp_path: Path) -> None:
    f = tmp_path / "long"
    f.write_bytes(b"a\n" + b"x" * 100 + b"\nb\n")
    with pytest.raises(FlowSourceError, match=r"long:2: longer than 50 bytes"):
        list(iter_line_blocks(f, block_size=16, max_line=50))
    blocks = list(iter_line_blocks(f, block_size=16, max_line=50, warnings=WarningLog()))
    assert b"".join(b for _, b in blocks) == b"a\nb\n" and blocks[-1][0] == 3


def test_zeek_json_flood_of_wrong_types_is_linear_and_keeps_the_good_record(tmp_path: Path) -> None:
    good = {
        "ts": 1521911721.255387,
        "uid": "C1",
        "id.orig_h": "10.0.0.1",
        "id.orig_p": 1,
        "id.resp_h": "10.0.0.2",
        "id.resp_p": 80,
        "proto": "tcp",
        "service": "http",
    }
    f = tmp_path / "flood.json"
    f.write_bytes(
        json.dumps(good).encode() + b"\n" + b'{"id.orig_h": 1}\n' * 200_000 + json.dumps(good).encode() + b"\n"
    )
    result = ZeekReader().read(f)
    assert result.flows.num_rows == 2
    assert any("flood.json:2: skipped, field 'id.orig_h'" in w for w in result.warnings)
    assert len(result.warnings) <= 21  # bounded, not one per line


def test_cr_only_line_endings_are_one_short_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "cr.log"
    f.write_bytes(ZEEK.replace(b"\n", b"\r") * 200)
    assert main(["flows", str(f), "--format", "jsonl"]) == 2
    err = capsys.readouterr().err
    assert "cr.log:1: lines end in CR alone" in err and len(err) < 500  # was 29 MB of stderr


def test_one_bad_utf8_byte_costs_its_line_only_zeek(tmp_path: Path) -> None:
    lines = (HEADER + b"\n".join(DATA[:30]) + b"\n").split(b"\n")
    lines[13] = lines[13][:10] + b"\xff" + lines[13][10:]  # line 14 of the file
    f = tmp_path / "utf8.log"
    f.write_bytes(b"\n".join(lines))
    result = ZeekReader().read(f)
    assert result.flows.num_rows == 29
    assert any("line 14: not UTF-8" in w for w in result.warnings)


def test_one_bad_utf8_byte_costs_its_line_only_vpc(tmp_path: Path) -> None:
    multi = (SHARED / "vpc" / "otel_valid_vpc_flow_log_multi.log").read_bytes().rstrip(b"\n").split(b"\n")
    lines = [multi[0], *(multi[1:] * 20)]
    lines[13] = lines[13].replace(b" OK", b" O\xffK")  # line 14 of the file
    f = tmp_path / "vpc.log"
    f.write_bytes(b"\n".join(lines) + b"\n")
    result = VpcFlowLogReader().read(f)
    assert result.records == 40 and result.flows["packets"].to_numpy().sum() == 800 - 20  # only line 14 is lost
    assert any("line 14: not UTF-8" in w for w in result.warnings)


def test_invalid_utf8_rows_finds_every_bad_line_even_when_most_are_bad() -> None:
    lines = [b"ok", b"\xff", b"fine \xc3\xa9", b"\xc3", b"good"] * 20
    buf = b"\n".join(lines) + b"\n"
    starts, ends = line_spans(buf)
    bad = invalid_utf8_rows(buf, starts, ends, np.ones(starts.size, dtype=bool))
    assert bad.tolist() == [ln in (b"\xff", b"\xc3") for ln in lines]


def test_ipv4_mapped_flow_addresses_are_the_ipv4_host() -> None:
    import pyarrow as pa

    from ringfence.observe.flows._common import canonical_ips

    texts, ok = canonical_ips(pa.array(["::ffff:10.77.1.10", "10.77.1.10", "fe80::1", "bogus"]))
    assert texts.to_pylist() == ["10.77.1.10", "10.77.1.10", "fe80::1", None] and ok.tolist() == [
        True,
        True,
        True,
        False,
    ]


def test_a_file_of_no_records_says_so(tmp_path: Path) -> None:
    f = tmp_path / "nothing.log"
    f.write_bytes(HEADER + b"\n" * 1000)
    result = ZeekReader().read(f)
    assert result.flows.num_rows == 0 and any("no flow records" in w for w in result.warnings)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64).map(lambda b: bytes(b"\r\na"[x % 3] for x in b)))
def test_line_spans_match_a_plain_split(buf: bytes) -> None:
    starts, ends = line_spans(buf)
    lines = buf.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    assert [buf[a:b] for a, b in zip(starts.tolist(), ends.tolist(), strict=True)] == [
        ln[:-1] if ln.endswith(b"\r") else ln for ln in lines
    ]
