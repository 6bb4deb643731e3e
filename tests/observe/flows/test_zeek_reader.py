"""Zeek conn.log reader: real samples, the JSON writer's format, and hostile input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ringfence.observe.flows.interface import FlowSourceError
from ringfence.observe.flows.zeek import ZeekReader
from ringfence.observe.schema import FLOW_SCHEMA

SAMPLES = Path(__file__).resolve().parents[3].parent / "shared" / "samples" / "zeek"
BRIM = SAMPLES / "brimdata_zed_conn.log"
TEREDO = SAMPLES / "zeek_btest_core.tunnels.teredo_conn.log"
VXLAN = SAMPLES / "zeek_btest_core.tunnels.vxlan_conn.log"
QINQ = SAMPLES / "zeek_btest_core.q-in-q_conn.log"
HEADER = BRIM.read_bytes().split(b"\n1521911721.255387")[0] + b"\n"


def _rows(path: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = ZeekReader().read(path).flows.to_pylist()
    return rows


def _ns(table: pa.Table, col: str, i: int) -> int:
    return int(table[col][i].value)


@pytest.mark.parametrize("path", sorted(SAMPLES.glob("*.log")), ids=lambda p: p.name)
def test_every_sample_parses(path: Path) -> None:
    result = ZeekReader().read(path)
    assert result.flows.schema == FLOW_SCHEMA
    assert result.flows.num_rows == result.records > 0
    assert ZeekReader().sniff(path.read_bytes()[:4096])


def test_brimdata_first_record_by_eye() -> None:
    # 1521911721.255387 C8Tful1TvM3Zf5x8fl 10.164.94.120 39681 10.47.3.155 3389 tcp - 0.004266 97 19 RSTR
    #   - - 0 ShADTdtr 10 730 6 342 -
    table = ZeekReader().read(BRIM).flows
    row = table.slice(0, 1).to_pylist()[0]
    assert (row["src"], row["sport"], row["dst"], row["dport"], row["proto"]) == (
        "10.164.94.120",
        39681,
        "10.47.3.155",
        3389,
        6,
    )
    assert (row["packets"], row["bytes"], row["packets_fwd"], row["bytes_fwd"]) == (16, 1072, 10, 730)
    assert row["payload_bytes"] == 116
    assert _ns(table, "first_seen", 0) == 1521911721_255387000
    assert _ns(table, "last_seen", 0) == 1521911721_259653000
    assert row["protection"] == "unknown" and row["source"] == "zeek:brimdata_zed_conn.log"
    assert row["src_identity"] is None and row["verdict"] is None
    assert table.num_rows == 92  # no #close trailer: every record still read


def test_teredo_services_tunnels_and_ipv6() -> None:
    rows = _rows(TEREDO)
    http = [r for r in rows if r["protocol"] == "http"]
    assert http and all(r["protection"] == "plaintext" for r in http)
    dns = next(r for r in rows if r["dport"] == 53)
    assert dns["protection"] == "plaintext" and dns["reason"] == "zeek service=dns (parsed as cleartext)"
    tunnelled = next(r for r in rows if r["src"] == "2001:0:4137:9e50:8000:f12a:b9c8:2815" and r["dport"] == 80)
    assert tunnelled["outer"] == "teredo 192.168.2.16→83.170.1.38"
    assert (tunnelled["packets"], tunnelled["bytes"], tunnelled["payload_bytes"]) == (22, 13470, 12142)
    icmp6 = next(r for r in rows if r["src"] == "fe80::8000:f227:bec8:61af")
    assert icmp6["proto"] == 58 and icmp6["sport"] is None and icmp6["dport"] is None
    assert icmp6["outer"] == "tunnel 192.168.2.16→65.55.158.81"  # the parent has no service yet
    unset = next(r for r in rows if r["sport"] == 1576 and r["packets"] == 1)  # duration/bytes '-'
    assert unset["payload_bytes"] is None


def test_vxlan_canonified_times_and_two_parents() -> None:
    result = ZeekReader().read(VXLAN)
    assert any("ts not a time" in w for w in result.warnings)
    icmp = next(r for r in result.flows.to_pylist() if r["proto"] == 1)
    assert icmp["first_seen"] is None
    assert icmp["outer"] == "vxlan 192.168.56.12→192.168.56.11; vxlan 192.168.56.11→192.168.56.12"


def test_older_column_set() -> None:
    rows = _rows(QINQ)  # 2013: no local_resp, tunnel_parents typed table[string]
    assert [(r["src"], r["dst"], r["payload_bytes"]) for r in rows] == [
        ("172.19.51.37", "172.19.51.63", 36),
        ("193.1.186.60", "224.2.127.254", 552),
    ]


def test_any_column_order_and_vlan(tmp_path: Path) -> None:
    text = (
        "#separator \\x09\n#set_separator\t,\n#empty_field\t(empty)\n#unset_field\t-\n"
        "#fields\tid.resp_p\tproto\tid.orig_h\tid.resp_h\tts\tvlan\tinner_vlan\tservice\tid.orig_p\n"
        "#types\tport\tenum\taddr\taddr\ttime\tint\tint\tstring\tport\n"
        "443\ttcp\t10.0.0.1\t10.0.0.2\t1700000000.5\t100\t200\tssl\t40000\n"
        "22\ttcp\t10.0.0.1\t10.0.0.3\t1700000001.0\t100\t-\tssh\t40001\n"
    )
    p = tmp_path / "conn.log"
    p.write_text(text)
    rows = _rows(p)
    assert rows[0]["dport"] == 443 and rows[0]["vlan"] == 200 and rows[1]["vlan"] == 100
    assert rows[0]["protection"] == "encrypted"
    assert rows[0]["reason"] == "zeek service=ssl (TLS handshake seen; payload not inspected)"
    assert rows[0]["protocol"] == "tls" and rows[1]["protocol"] == "ssh"
    assert rows[0]["packets"] == 0  # counters absent from this column set


def test_json_lines(tmp_path: Path) -> None:
    recs = [
        {
            "ts": 1521911721.255387,
            "uid": "C1",
            "id.orig_h": "10.1.1.1",
            "id.orig_p": 5000,
            "id.resp_h": "10.1.1.2",
            "id.resp_p": 443,
            "proto": "tcp",
            "service": "ssl",
            "duration": 1.5,
            "orig_bytes": 10,
            "resp_bytes": 20,
            "orig_pkts": 3,
            "orig_ip_bytes": 130,
            "resp_pkts": 2,
            "resp_ip_bytes": 120,
            "tunnel_parents": [],
        },
        {
            "ts": 1521911722.0,
            "uid": "C2",
            "id.orig_h": "10.1.1.1",
            "id.orig_p": "bad",
            "id.resp_h": "10.1.1.2",
            "id.resp_p": 80,
            "proto": "tcp",
        },
        {
            "ts": 1521911723.0,
            "uid": "C3",
            "id.orig_h": "10.1.1.1",
            "id.orig_p": 1,
            "id.resp_h": "10.1.1.9",
            "id.resp_p": 53,
            "proto": "udp",
            "service": "dns",
            "orig_pkts": 1,
            "resp_pkts": 1,
        },
    ]
    p = tmp_path / "conn.json"
    p.write_text("\n".join(json.dumps(r) for r in recs) + "\n{truncated\n")
    result = ZeekReader().read(p)
    rows = result.flows.to_pylist()
    assert [r["dport"] for r in rows] == [443, 53]
    assert rows[0]["protection"] == "encrypted" and rows[1]["protection"] == "plaintext"
    assert rows[0]["packets"] == 5 and rows[0]["bytes"] == 250 and rows[0]["payload_bytes"] == 30
    assert int(result.flows["last_seen"][0].value) == 1521911722_755387000
    assert any(":2:" in w for w in result.warnings) and any(":4:" in w for w in result.warnings)


def test_json_iso_timestamps(tmp_path: Path) -> None:
    p = tmp_path / "conn.log"
    p.write_text(
        json.dumps(
            {
                "ts": "2021-06-16T16:52:13.136834Z",
                "id.orig_h": "::1",
                "id.orig_p": 1,
                "id.resp_h": "::2",
                "id.resp_p": 2,
                "proto": "udp",
            }
        )
        + "\n"
    )
    table = ZeekReader().read(p).flows
    assert table["first_seen"][0].value == 1623862333_136834000


def test_bad_lines_are_skipped_with_their_line(tmp_path: Path) -> None:
    good = BRIM.read_bytes().splitlines()[8]
    p = tmp_path / "conn.log"
    p.write_bytes(HEADER + good + b"\n" + b"only\tthree\tfields\n" + good.replace(b"39681", b"x9681") + b"\n" + good)
    result = ZeekReader().read(p)
    assert result.flows.num_rows == 2
    assert any("line 10" in w and "fields" in w for w in result.warnings)
    assert any("line 11" in w and "id.orig_p" in w for w in result.warnings)


def test_data_before_header_is_an_error(tmp_path: Path) -> None:
    p = tmp_path / "conn.log"
    p.write_bytes(b"1\t2\t3\n")
    with pytest.raises(FlowSourceError, match=r"conn.log:1"):
        ZeekReader().read(p)


def test_fields_without_addresses_is_an_error(tmp_path: Path) -> None:
    p = tmp_path / "conn.log"
    p.write_bytes(b"#separator \\x09\n#fields\tts\tuid\n1\tC\n")
    with pytest.raises(FlowSourceError, match=r"conn.log:2: #fields lacks id.orig_h"):
        ZeekReader().read(p)


def test_an_empty_set_separator_is_named_not_a_traceback(tmp_path: Path) -> None:
    """Found by the fuzz campaign: Arrow refused to split the set fields on an empty separator."""
    p = tmp_path / "conn.log"
    fields = "\t".join(("ts", "uid", "id.orig_h", "id.orig_p", "id.resp_h", "id.resp_p", "proto", "tunnel_parents"))
    p.write_bytes(f"#separator \\x09\n#set_separator\t\n#fields\t{fields}\n"
                  "1.0\tC1\t10.0.0.1\t1\t10.0.0.2\t80\ttcp\t-\n".encode())  # fmt: skip
    with pytest.raises(FlowSourceError, match=r"conn.log:2: empty #set_separator"):
        ZeekReader().read(p)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tail=st.binary(max_size=600), cut=st.integers(min_value=0, max_value=4000))
def test_hostile_input_never_crashes(tmp_path: Path, tail: bytes, cut: int) -> None:
    p = tmp_path / "hostile.log"
    p.write_bytes(BRIM.read_bytes()[:cut] + tail)
    try:
        result = ZeekReader().read(p)
    except FlowSourceError:
        return
    assert result.flows.schema == FLOW_SCHEMA


def test_huge_field_is_bounded(tmp_path: Path) -> None:
    p = tmp_path / "conn.log"
    good = BRIM.read_bytes().splitlines()[8]
    p.write_bytes(HEADER + good.replace(b"C8Tful1TvM3Zf5x8fl", b"U" * 3_000_000) + b"\n" + good + b"\n")
    assert ZeekReader().read(p).flows.num_rows == 2


def test_pyarrow_converts_a_literal_without_trying_an_import() -> None:
    """pyarrow looks for ``dateutil`` each time it converts an untyped Python literal; without the package
    every ``pc.equal(column, "-")`` of the readers pays a failed import (the readers' cost on small logs
    doubled). The dependency is declared; this fails if it is dropped or pyarrow starts importing again."""
    import sys

    import pyarrow as pa
    import pyarrow.compute as pc

    col = pa.array(["-", "tcp"])
    pc.equal(col, "-")
    tried: list[str] = []

    class Watch:
        def find_spec(self, name: str, path: object, target: object = None) -> None:
            tried.append(name)

    watch = Watch()
    sys.meta_path.insert(0, watch)
    try:
        assert pc.equal(col, "-").to_pylist() == [True, False]
    finally:
        sys.meta_path.remove(watch)
    assert tried == []
