"""NetFlow/IPFIX reader: raw datagram samples, hostile input, and the real exporter → collector path.

The exporter test writes a small capture, replays it through ``softflowd`` (NetFlow v9 and IPFIX) into
``nfcapd`` on loopback, reads the collector's file and compares the flows with the capture.
"""

from __future__ import annotations

import shutil
import socket
import struct
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ringfence.observe.flows.interface import FlowSourceError
from ringfence.observe.flows.ipfix import REASON, IpfixReader
from ringfence.observe.schema import FLOW_SCHEMA

SAMPLES = Path(__file__).resolve().parents[3].parent / "shared" / "samples" / "netflow"
V5 = SAMPLES / "netflow5.dat"
V9 = SAMPLES / "netflow9_test_softflowd_tpl_data.dat"
IPFIX_TPL = SAMPLES / "ipfix_test_openbsd_pflow_tpl.dat"
IPFIX_DATA = SAMPLES / "ipfix_test_openbsd_pflow_data.dat"


def _rows(path: Path) -> list[dict[str, Any]]:
    result = IpfixReader().read(path)
    assert result.flows.schema == FLOW_SCHEMA
    rows: list[dict[str, Any]] = result.flows.drop_columns(["first_seen", "last_seen"]).to_pylist()
    return rows


def test_v5_sample() -> None:
    result = IpfixReader().read(V5)
    assert result.records == 30
    rows = result.flows.to_pylist()
    # First two v5 records: 10.0.2.15:22 -> 10.0.2.2:54435 (5 pkts, 230 B) is the reply of the reverse record.
    ssh = next(r for r in rows if r["sport"] == 54435)
    assert (ssh["src"], ssh["dst"], ssh["dport"], ssh["proto"]) == ("10.0.2.2", "10.0.2.15", 22, 6)
    assert (ssh["packets"], ssh["bytes"], ssh["packets_fwd"], ssh["bytes_fwd"]) == (171, 11040, 86, 3956)
    assert {r["protection"] for r in rows} == {"unknown"} and {r["reason"] for r in rows} == {REASON}
    assert sum(r["packets"] for r in rows) == sum(
        struct.unpack_from(">I", V5.read_bytes(), off + 16)[0] for off in _v5_record_offsets(V5.read_bytes())
    )


def _v5_record_offsets(data: bytes) -> Iterator[int]:
    off = 0
    while off < len(data):
        count = struct.unpack_from(">H", data, off + 2)[0]
        yield from (off + 24 + 48 * i for i in range(count))
        off += 24 + 48 * count


def test_v9_sample_with_ipv6() -> None:
    rows = _rows(V9)
    ntp = next(r for r in rows if r["dst"] == "172.16.32.248")
    assert (ntp["src"], ntp["sport"], ntp["dport"], ntp["proto"], ntp["packets"], ntp["bytes"]) == (
        "172.16.32.100",
        123,
        123,
        17,
        2,
        152,
    )
    v6 = next(r for r in rows if r["proto"] == 58)
    assert (v6["src"], v6["dst"], v6["packets"], v6["bytes"]) == ("fe80::20c:29ff:fe83:3b6e", "ff02::1", 7, 672)


def test_ipfix_template_then_data(tmp_path: Path) -> None:
    both = tmp_path / "ipfix.dat"
    both.write_bytes(IPFIX_TPL.read_bytes() + IPFIX_DATA.read_bytes())
    result = IpfixReader().read(both)
    rows = result.flows.to_pylist()
    first = next(r for r in rows if r["sport"] == 64020)
    # data record 1: 192.168.0.17:64020 -> 192.168.0.1:80, 7 packets, 373 bytes, start 0x1560da603d8 ms
    assert (first["src"], first["dst"], first["dport"], first["packets_fwd"], first["bytes_fwd"]) == (
        "192.168.0.17",
        "192.168.0.1",
        80,
        7,
        373,
    )
    assert result.flows["first_seen"][rows.index(first)].value == 0x1560DA603D8 * 1_000_000
    assert _rows(IPFIX_TPL) == []  # templates only: no flows, no error


def test_data_without_template_is_an_error() -> None:
    with pytest.raises(FlowSourceError, match="none of their templates") as info:
        IpfixReader().read(IPFIX_DATA)
    assert info.value.hint and "cat" in info.value.hint


@pytest.mark.parametrize("cut", [3, 20, 100, 1000])
def test_truncated_datagrams(tmp_path: Path, cut: int) -> None:
    p = tmp_path / "t.dat"
    p.write_bytes(V5.read_bytes()[:cut])
    with pytest.raises(FlowSourceError, match=r"t.dat@\d+"):
        IpfixReader().read(p)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prefix=st.sampled_from([V5, V9, IPFIX_TPL]), junk=st.binary(max_size=300), flip=st.integers(0, 459))
def test_hostile_datagrams_never_crash(tmp_path: Path, prefix: Path, junk: bytes, flip: int) -> None:
    data = bytearray(prefix.read_bytes() + junk)
    data[flip % len(data)] ^= 0xFF
    p = tmp_path / "h.dat"
    p.write_bytes(bytes(data))
    try:
        IpfixReader().read(p)
    except FlowSourceError:
        pass


# --- the real exporter: softflowd -> nfcapd on loopback ---------------------------------------------


def _packet(src: str, dst: str, proto: int, sport: int, dport: int, payload: bytes, flags: int = 0x18) -> bytes:
    if proto == 6:
        l4 = struct.pack(">HHIIBBHHH", sport, dport, 1, 1, 5 << 4, flags, 65535, 0, 0) + payload
    else:
        l4 = struct.pack(">HHHH", sport, dport, 8 + len(payload), 0) + payload
    ip = struct.pack(
        ">BBHHHBBH4s4s", 0x45, 0, 20 + len(l4), 1, 0, 64, proto, 0, socket.inet_aton(src), socket.inet_aton(dst)
    )
    return b"\x02\x00\x00\x00\x00\x02\x02\x00\x00\x00\x00\x01\x08\x00" + ip + l4


#: (src, dst, proto, sport, dport, payload length, tcp flags) in capture order.
PACKETS = [
    ("10.7.0.1", "10.7.0.2", 6, 40000, 8443, 0, 0x02),
    ("10.7.0.2", "10.7.0.1", 6, 8443, 40000, 0, 0x12),
    ("10.7.0.1", "10.7.0.2", 6, 40000, 8443, 300, 0x18),
    ("10.7.0.2", "10.7.0.1", 6, 8443, 40000, 1200, 0x18),
    ("10.7.0.1", "10.7.0.2", 6, 40000, 8443, 0, 0x11),
    ("10.7.0.3", "10.7.0.4", 17, 5353, 53, 40, 0),
    ("10.7.0.4", "10.7.0.3", 17, 53, 5353, 90, 0),
]


def _write_pcap(path: Path) -> None:
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)]
    for i, (src, dst, proto, sport, dport, size, flags) in enumerate(PACKETS):
        frame = _packet(src, dst, proto, sport, dport, b"x" * size, flags)
        out.append(struct.pack("<IIII", 1_700_000_000, 1000 * i, len(frame), len(frame)) + frame)
    path.write_bytes(b"".join(out))


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ctl(sock: Path, command: str) -> str:
    return subprocess.run(["softflowctl", "-c", str(sock), command], capture_output=True, text=True, timeout=10).stdout


def _export(tmp: Path, version: str) -> Path:
    """Replay the capture through softflowd into nfcapd; return nfcapd's file."""
    cap = tmp / "cap.pcap"
    _write_pcap(cap)
    out = tmp / f"nfcapd-v{version}"
    out.mkdir()
    port = _free_udp_port()
    with (tmp / f"nfcapd-v{version}.log").open("wb") as log:
        collector = subprocess.Popen(
            ["nfcapd", "-b", "127.0.0.1", "-p", str(port), "-w", str(out)], stdout=log, stderr=subprocess.STDOUT
        )
    exporter: subprocess.Popen[bytes] | None = None
    try:
        time.sleep(0.4)
        sock = tmp / f"softflowd-v{version}.ctl"
        exporter = subprocess.Popen(
            [
                "softflowd",
                "-d",
                "-r",
                str(cap),
                "-n",
                f"127.0.0.1:{port}",
                "-v",
                version,
                "-c",
                str(sock),
                "-p",
                str(tmp / f"softflowd-v{version}.pid"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(100):
            if sock.exists():
                break
            time.sleep(0.05)
        # softflowd 1.1.0 reading a file waits on its control socket between passes: each command
        # lets it process more; "shutdown" then expires and exports every flow.
        for _ in range(20):
            if f"Packets processed: {len(PACKETS)}" in _ctl(sock, "statistics"):
                break
            time.sleep(0.05)
        _ctl(sock, "shutdown")
        try:
            exporter.wait(timeout=3)
        except subprocess.TimeoutExpired:
            exporter.kill()
            exporter.wait()
        time.sleep(0.3)
    finally:
        if exporter is not None and exporter.poll() is None:
            exporter.kill()
            exporter.wait()
        collector.terminate()
        collector.wait(timeout=10)
    files = sorted(p for p in out.iterdir() if p.name.startswith("nfcapd.") and "current" not in p.name)
    assert files, (tmp / f"nfcapd-v{version}.log").read_text()
    return files[-1]


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    if not (
        shutil.which("softflowd") and shutil.which("softflowctl") and shutil.which("nfcapd") and shutil.which("nfdump")
    ):
        pytest.skip("softflowd/nfcapd/nfdump not installed")
    tmp = tmp_path_factory.mktemp("exporter")
    return {v: _export(tmp, v) for v in ("9", "10")}


def _expected() -> dict[tuple[str, int, str, int, int], tuple[int, int, int, int]]:
    """Per conversation from the capture itself: packets, IP bytes, and the initiator's share."""
    flows: dict[tuple[str, int, str, int, int], list[int]] = {}
    for src, dst, proto, sport, dport, size, _ in PACKETS:
        ip_len = 20 + (20 if proto == 6 else 8) + size
        key = (src, sport, dst, dport, proto)
        rev = (dst, dport, src, sport, proto)
        if rev in flows:
            flows[rev][0] += 1
            flows[rev][1] += ip_len
        else:
            acc = flows.setdefault(key, [0, 0, 0, 0])
            acc[0] += 1
            acc[1] += ip_len
            acc[2] += 1
            acc[3] += ip_len
    return {k: (v[0], v[1], v[2], v[3]) for k, v in flows.items()}


@pytest.mark.parametrize("version", ["9", "10"])
def test_real_exporter_matches_capture(exported: dict[str, Path], version: str) -> None:
    reader = IpfixReader()
    path = exported[version]
    assert reader.sniff(path.read_bytes()[:4096])
    result = reader.read(path)
    got = {
        (r["src"], r["sport"], r["dst"], r["dport"], r["proto"]): (
            r["packets"],
            r["bytes"],
            r["packets_fwd"],
            r["bytes_fwd"],
        )
        for r in result.flows.to_pylist()
    }
    assert got == _expected()
    assert set(result.flows["source"].to_pylist()) == {f"nfcapd:{path.name}"}


def test_corrupt_nfcapd_file(tmp_path: Path) -> None:
    if shutil.which("nfdump") is None:
        pytest.skip("nfdump not installed")
    p = tmp_path / "nfcapd.bad"
    p.write_bytes(b"\x0c\xa5\x02\x00" + b"\xff" * 200)
    with pytest.raises(FlowSourceError, match="nfcapd.bad"):
        IpfixReader().read(p)
