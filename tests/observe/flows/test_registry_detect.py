"""Flow-source registry: detection by content (never by name), stdin, unknown formats."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from ringfence.observe.flows.interface import FlowSourceError
from ringfence.observe.flows.registry import READERS, detect, read_all, read_any, reader

SHARED = Path(__file__).resolve().parents[3].parent / "shared"
SAMPLES = SHARED / "samples"
CASES = [
    (SAMPLES / "zeek" / "brimdata_zed_conn.log", "zeek"),
    (SAMPLES / "hubble" / "basic-sample-5-dns-flows.json", "hubble"),
    (SAMPLES / "vpc" / "otel_valid_vpc_flow_log_multi.log", "vpc"),
    (SAMPLES / "netflow" / "netflow5.dat", "ipfix"),
    (SAMPLES / "netflow" / "netflow9_test_softflowd_tpl_data.dat", "ipfix"),
    (SAMPLES / "netflow" / "ipfix_test_openbsd_pflow_tpl.dat", "ipfix"),
]


def test_registry_is_explicit() -> None:
    assert list(READERS) == ["pcap", "ipfix", "zeek", "hubble", "vpc"]
    assert reader("vpc").name == "vpc"
    with pytest.raises(FlowSourceError, match="unknown flow format"):
        reader("nope")


@pytest.mark.parametrize(("path", "fmt"), CASES, ids=lambda c: c.name if isinstance(c, Path) else c)
def test_detect_by_content(path: Path, fmt: str) -> None:
    assert detect(path.read_bytes()[:4096], path.name).name == fmt


def test_name_does_not_matter(tmp_path: Path) -> None:
    disguised = tmp_path / "flows.json"  # a Zeek TSV log with a misleading name
    disguised.write_bytes((SAMPLES / "zeek" / "zeek_btest_core.q-in-q_conn.log").read_bytes())
    result = read_any(disguised)
    assert result.flows.num_rows == 2 and result.flows["source"][0].as_py() == "zeek:flows.json"


def test_capture_goes_to_the_pcap_reader() -> None:
    cap = SHARED / "captures" / "tcpdump-tests" / "dns_udp.pcap"
    head = cap.read_bytes()[:4096]
    try:
        found = detect(head, cap.name)
    except FlowSourceError as exc:  # before the capture reader lands, say so instead of "unrecognised"
        assert "pcap reader is not installed" in exc.message
    else:
        assert found.name == "pcap"


def test_stdin_is_spooled_and_named(tmp_path: Path) -> None:
    data = (SAMPLES / "hubble" / "basic-sample-5-dns-flows.json").read_bytes()
    result = read_any("-", stdin=io.BytesIO(data))
    assert result.flows.num_rows == 1 and result.flows["source"][0].as_py() == "hubble:stdin"


def test_unknown_format_lists_what_was_tried(tmp_path: Path) -> None:
    p = tmp_path / "x.bin"
    p.write_bytes(b"hello world\n")
    with pytest.raises(FlowSourceError, match=r"x.bin: unrecognised flow format \(tried .*ipfix, zeek, hubble, vpc"):
        read_any(p)
    with pytest.raises(FlowSourceError, match="stdin: empty input"):
        read_any("-", stdin=io.BytesIO(b""))
    with pytest.raises(FlowSourceError, match="cannot read"):
        read_any(tmp_path / "missing.log")
    with pytest.raises(FlowSourceError, match="is a directory"):
        read_any(tmp_path)


def test_read_all_concatenates() -> None:
    result = read_all([CASES[0][0], CASES[2][0]])
    assert result.flows.num_rows == 92 + 2
    assert result.records == 92 + 2
