"""AWS VPC / Transit Gateway flow log reader: samples, folding, custom formats, hostile input."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ringfence.observe.flows.interface import FlowSourceError
from ringfence.observe.flows.vpc import REASON, VpcFlowLogReader
from ringfence.observe.schema import FLOW_SCHEMA

SAMPLES = Path(__file__).resolve().parents[3].parent / "shared" / "samples" / "vpc"
V2_HEADER = (
    "version account-id interface-id srcaddr dstaddr srcport dstport protocol packets bytes start end action log-status"
)


def _read(path: Path) -> tuple[list[dict[str, Any]], tuple[str, ...]]:
    result = VpcFlowLogReader().read(path)
    assert result.flows.schema == FLOW_SCHEMA
    rows = result.flows.to_pylist()
    return rows, result.warnings


@pytest.mark.parametrize("path", sorted(SAMPLES.glob("*.log")), ids=lambda p: p.name)
def test_every_sample_parses(path: Path) -> None:
    rows, _ = _read(path)
    assert all(r["protection"] == "unknown" and r["reason"] == REASON for r in rows)
    assert VpcFlowLogReader().sniff(path.read_bytes()[:4096])


def test_default_v2_accept_and_reject() -> None:
    rows, warnings = _read(SAMPLES / "otel_valid_vpc_flow_log_multi.log")
    assert warnings == ()
    ssh, rdp = rows
    assert (ssh["src"], ssh["sport"], ssh["dst"], ssh["dport"], ssh["proto"]) == (
        "172.31.16.139",
        20641,
        "172.31.16.21",
        22,
        6,
    )
    assert (ssh["packets"], ssh["bytes"], ssh["verdict"]) == (20, 4249, "ACCEPT")
    assert rdp["dport"] == 3389 and rdp["verdict"] == "REJECT"


def test_nodata_is_skipped_with_a_note() -> None:
    rows, warnings = _read(SAMPLES / "otel_valid_vpc_flow_log.log")
    assert rows == [] and any("1 NODATA record(s) skipped" in w for w in warnings)


def test_ecs_and_transit_gateway_fields() -> None:
    rows, _ = _read(SAMPLES / "otel_valid_vpc_flow_log_ecs.log")
    assert (rows[0]["src"], rows[0]["dport"], rows[0]["packets"], rows[0]["bytes"]) == ("10.0.1.100", 22, 15, 3500)
    result = VpcFlowLogReader().read(SAMPLES / "otel_valid_tgw_flow_log.log")
    tgw = result.flows.to_pylist()[0]
    assert (tgw["src"], tgw["dst"], tgw["dport"], tgw["packets"], tgw["bytes"]) == (
        "10.0.0.1",
        "10.0.1.1",
        443,
        10,
        1000,
    )
    assert tgw["verdict"] is None  # a TGW log has no action field
    assert result.flows["first_seen"][0].value == 1_700_000_000 * 10**9


def test_both_directions_fold_and_headerless_v2(tmp_path: Path) -> None:
    p = tmp_path / "flows.txt"
    p.write_text(
        "2 1 eni-a 10.0.0.2 10.0.0.1 443 50000 6 5 900 100 160 ACCEPT OK\n"
        "2 1 eni-a 10.0.0.1 10.0.0.2 50000 443 6 4 300 90 150 ACCEPT OK\n"
        "2 1 eni-b 10.0.0.1 10.0.0.2 50000 443 6 4 300 90 150 ACCEPT OK\n"
        "2 1 eni-a 10.0.0.1 10.0.0.9 - - 1 1 84 90 150 REJECT OK\n"
    )
    assert VpcFlowLogReader().sniff(p.read_bytes())
    rows, _ = _read(p)
    conv = [r for r in rows if r["dport"] == 443]
    assert len(conv) == 2  # one per interface: two observers are not added together
    a = next(r for r in conv if r["packets"] == 9)
    assert (a["src"], a["sport"], a["packets_fwd"], a["bytes"], a["bytes_fwd"]) == ("10.0.0.1", 50000, 4, 1200, 300)
    assert a["first_seen"].timestamp() == 90 and a["last_seen"].timestamp() == 160
    icmp = next(r for r in rows if r["proto"] == 1)
    assert icmp["sport"] is None and icmp["verdict"] == "REJECT"


def test_custom_field_order_with_flags_and_pkt_addresses(tmp_path: Path) -> None:
    p = tmp_path / "custom.log"
    p.write_text(
        "pkt-srcaddr pkt-dstaddr srcaddr dstaddr srcport dstport protocol packets bytes start end action "
        "log-status tcp-flags interface-id\n"
        "10.9.9.9 10.0.0.2 10.0.0.5 10.0.0.2 2000 3000 6 1 60 10 20 ACCEPT OK 18 eni-x\n"
        "10.0.0.2 10.9.9.9 10.0.0.2 10.0.0.5 3000 2000 6 1 60 10 20 ACCEPT OK 2 eni-x\n"
    )
    rows, _ = _read(p)
    assert len(rows) == 1
    # The SYN (2) record marks the initiator even though both ports look alike; pkt-* addresses win.
    assert (rows[0]["src"], rows[0]["sport"], rows[0]["dst"], rows[0]["dport"]) == ("10.0.0.2", 3000, "10.9.9.9", 2000)


def test_bad_records_name_their_lines(tmp_path: Path) -> None:
    p = tmp_path / "bad.log"
    p.write_text(
        V2_HEADER + "\n"
        "2 1 eni-a 10.0.0.1 10.0.0.2 50000 443 6 4 300 90 150 ACCEPT OK\n"
        "2 1 eni-a 10.0.0.1 10.0.0.2 50000 443 6 4 300 90\n"
        "2 1 eni-a 10.0.0.1 banana 50000 443 6 4 300 90 150 ACCEPT OK\n"
        "2 1 eni-a 10.0.0.1 10.0.0.2 99999 443 6 4 300 90 150 ACCEPT OK\n"
    )
    rows, warnings = _read(p)
    assert len(rows) == 1
    text = "\n".join(warnings)
    assert "line 3" in text and "lines 4, 5" in text


def test_header_without_addresses_is_an_error(tmp_path: Path) -> None:
    p = tmp_path / "x.log"
    p.write_text("version account-id foo\n2 1 x\n")
    with pytest.raises(FlowSourceError, match=r"x.log:1"):
        VpcFlowLogReader().read(p)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    body=st.lists(st.text(alphabet="0123456789.- abcdefOKACEPTRJ\n:", max_size=90), max_size=20),
    raw=st.binary(max_size=200),
)
def test_hostile_input_never_crashes(tmp_path: Path, body: list[str], raw: bytes) -> None:
    p = tmp_path / "h.log"
    p.write_bytes((V2_HEADER + "\n" + "\n".join(body)).encode() + raw)
    try:
        VpcFlowLogReader().read(p)
    except FlowSourceError:
        pass
