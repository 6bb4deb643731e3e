"""BTH and RETH gathered by the pcap reader: tshark's field values are the reference; hostile input never crashes."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from rdma_kit import (
    ACK,
    READ_REQUEST,
    SEND_ONLY,
    WRITE_FIRST,
    WRITE_ONLY,
    bth,
    erf_record,
    ib_frame,
    reth,
    roce_frame,
    write,
)
from ringfence.observe.flows.pcap import PcapReader
from ringfence.observe.schema import RdmaFacts

CAPTURES = Path(__file__).resolve().parents[3].parent / "shared" / "captures" / "rdma"
FIELDS = ("ip.src", "ip.dst", "infiniband.lrh.slid", "infiniband.lrh.dlid", "infiniband.grh.sgid",
          "infiniband.grh.dgid", "infiniband.bth.opcode", "infiniband.bth.p_key", "infiniband.bth.destqp",
          "infiniband.bth.psn", "infiniband.reth.va", "infiniband.reth.r_key", "infiniband.reth.dmalen")  # fmt: skip
#: IBTA operations (low 5 bits of the opcode) that are requests, carrying the sender's own PSN.
REQUESTS = {*range(0x0D), 0x13, 0x14, 0x16, 0x17}


def _tshark(path: Path, *decode_as: str) -> list[dict[str, str]]:
    if shutil.which("tshark") is None:
        pytest.skip("tshark is not installed")
    args = ["tshark", "-r", str(path), "-Y", "infiniband.bth", "-T", "fields", "-E", "occurrence=f"]
    for d in decode_as:
        args += ["-d", d]
    for f in FIELDS:
        args += ["-e", f]
    out = subprocess.run(args, capture_output=True, text=True, check=True, timeout=120).stdout
    return [dict(zip(FIELDS, line.split("\t"), strict=True)) for line in out.splitlines()]


def _host(row: dict[str, str], side: str) -> str:
    if not row["infiniband.lrh.slid"]:  # RoCEv2 (an IPoIB packet's own IP header is inside its payload)
        return row[f"ip.{side}"]
    gid = row["infiniband.grh.sgid" if side == "src" else "infiniband.grh.dgid"]
    return gid or f"LID {int(row['infiniband.lrh.slid' if side == 'src' else 'infiniband.lrh.dlid'], 0)}"


def _expected(rows: list[dict[str, str]]) -> tuple[dict[Any, Any], dict[Any, Any]]:
    """(connection → (packets, highest P_Key, first request PSN), rkey → (first VA, first length, packets))."""
    conns: dict[Any, list[Any]] = defaultdict(lambda: [0, -1, None])
    keys: dict[Any, list[Any]] = {}
    for r in rows:
        conn = (_host(r, "src"), _host(r, "dst"), int(r["infiniband.bth.destqp"], 0))
        c = conns[conn]
        c[0] += 1
        c[1] = max(c[1], int(r["infiniband.bth.p_key"], 0))
        if c[2] is None and int(r["infiniband.bth.opcode"]) & 0x1F in REQUESTS:
            c[2] = int(r["infiniband.bth.psn"])
        if r["infiniband.reth.r_key"]:
            k = (*conn, int(r["infiniband.reth.r_key"], 0))
            if k not in keys:
                keys[k] = [int(r["infiniband.reth.va"], 0), int(r["infiniband.reth.dmalen"], 0), 0]
            keys[k][2] += 1
    return {k: tuple(v) for k, v in conns.items()}, {k: tuple(v) for k, v in keys.items()}


def _ours(facts: RdmaFacts) -> tuple[dict[Any, Any], dict[Any, Any]]:
    conns = {(r["src"], r["dst"], r["dest_qp"]): (r["packets"], r["pkey"], r["first_psn"])
             for r in facts.conns.to_pylist()}  # fmt: skip
    keys = {(r["src"], r["dst"], r["dest_qp"], r["rkey"]): (r["va_first"], r["dma_len"], r["packets"])
            for r in facts.keys.to_pylist()}  # fmt: skip
    return conns, keys


def _facts(path: Path) -> RdmaFacts:
    return PcapReader().read_rdma(path)[1]


@pytest.mark.parametrize(("name", "decode_as", "packets"), [
    ("roce.pcap", ("udp.port==69,infiniband",), 105),
    ("infiniband.pcap", (), 43),
])  # fmt: skip
def test_real_captures_match_tshark(name: str, decode_as: tuple[str, ...], packets: int) -> None:
    path = CAPTURES / name
    if not path.exists():
        pytest.skip(f"{path} is not here")
    rows = _tshark(path, *decode_as)
    assert len(rows) == packets
    facts = _facts(path)
    assert facts.packets == packets and facts.truncated == 0
    assert _ours(facts) == _expected(rows)


def _generated() -> list[bytes]:
    return [
        roce_frame("10.0.0.1", "10.0.0.2", 50001, bth(WRITE_FIRST, 0x8001, 0x123, 77)
                   + reth(0x7F0012340000, 0xDEADBEEF, 8192) + os.urandom(256)),
        roce_frame("10.0.0.1", "10.0.0.2", 50001, bth(0x07, 0x8001, 0x123, 78) + os.urandom(256)),  # WRITE Middle
        roce_frame("10.0.0.1", "10.0.0.2", 50001, bth(WRITE_ONLY, 0x8001, 0x123, 79)
                   + reth(0x7F0012350000, 0x1234, 64) + os.urandom(64)),
        roce_frame("10.0.0.2", "10.0.0.1", 50002, bth(READ_REQUEST, 0x8002, 0x777, 5)
                   + reth(0x7F00AAAA0000, 0x99887766, 4096)),
        roce_frame("10.0.0.1", "10.0.0.2", 50002, bth(ACK, 0x8001, 0x321, 79) + bytes(4)),
        roce_frame("10.0.0.1", "10.0.0.2", 50003, bth(0x0B, 0x8001, 0x124, 1)  # WRITE Only with Immediate
                   + reth(0x10000, 0xABCD, 16) + bytes(4) + os.urandom(16), vlan=12),
    ]  # fmt: skip


def test_generated_reth_matches_tshark(tmp_path: Path) -> None:
    path = write(tmp_path / "reth.pcap", _generated())
    rows = _tshark(path)
    assert len(rows) == 6 and sum(1 for r in rows if r["infiniband.reth.r_key"]) == 4
    facts = _facts(path)
    assert _ours(facts) == _expected(rows)


def _ib_frames() -> list[bytes]:
    return [
        ib_frame(1, 2, bth(WRITE_FIRST, 0x7FFF, 0x55, 3) + reth(0x1000, 0x42, 8192) + os.urandom(256)),
        ib_frame(1, 2, bth(READ_REQUEST, 0x7FFF, 0x55, 4) + reth(0x9000, 0x43, 512)),
        ib_frame(3, 4, bth(SEND_ONLY, 0xFFFF, 0x56, 9) + os.urandom(32), gids=("fe80::1", "fe80::2")),
        ib_frame(2, 1, bth(ACK, 0x7FFF, 0x99, 4) + bytes(4)),
    ]


def test_native_infiniband_and_erf_match_tshark(tmp_path: Path) -> None:
    # tshark cannot read LINKTYPE_INFINIBAND (247), but reads the same frames in ERF records: the reference for both.
    frames = _ib_frames()
    erf = write(tmp_path / "ib-erf.pcap", [erf_record(f) for f in frames], 197)
    native = write(tmp_path / "ib-native.pcap", frames, 247)
    expected = _expected(_tshark(erf))
    assert len(expected[1]) == 2
    assert _ours(_facts(erf)) == expected
    assert _ours(_facts(native)) == expected


def test_flows_carry_pkey_beside_vlan(tmp_path: Path) -> None:
    path = write(tmp_path / "pkey.pcap", _generated())
    flows = PcapReader().read(path).flows.to_pylist()
    tagged = [f for f in flows if f["vlan"] == 12]
    assert [f["pkey"] for f in tagged] == [0x8001]
    assert {f["pkey"] for f in flows} == {0x8001, 0x8002}


def test_non_rdma_flows_have_null_pkey(tmp_path: Path) -> None:
    frame = roce_frame("10.0.0.1", "10.0.0.2", 50001, bth(SEND_ONLY, 0x8001, 1, 1))
    other = frame[:36] + b"\x12\x00" + frame[38:]  # the same datagram to port 4608: not RoCEv2
    result, facts = PcapReader().read_rdma(write(tmp_path / "udp.pcap", [other]))
    assert result.flows.column("pkey").to_pylist() == [None]
    assert not facts.seen and facts.packets == 0


def test_truncated_bth_and_reth_are_counted_not_read(tmp_path: Path) -> None:
    whole = _generated()[0]
    udp_payload = 14 + 20 + 8
    cut_bth = whole[: udp_payload + 7]
    cut_reth = whole[: udp_payload + 12 + 9]
    path = write(tmp_path / "cut.pcap", [cut_bth, cut_reth, whole])
    result, facts = PcapReader().read_rdma(path)
    assert facts.packets == 3 and facts.truncated == 2
    assert facts.keys.num_rows == 1  # only the whole packet's RETH
    assert any("RDMA packet(s) with their BTH or RETH cut short" in w for w in result.warnings)


@pytest.mark.parametrize("linktype", [1, 197, 247])
def test_hostile_rdma_frames_never_crash(tmp_path: Path, linktype: int) -> None:
    frames: list[bytes] = []
    for f in _generated() + _ib_frames():
        for cut in range(0, len(f), 7):
            noisy = bytearray(f[:cut])
            for i in range(0, len(noisy), 11):
                noisy[i] ^= os.urandom(1)[0]
            frames.append(bytes(noisy))
    if linktype == 197:
        frames = [erf_record(f) for f in frames] + [os.urandom(40) for _ in range(50)]
    path = write(tmp_path / f"hostile-{linktype}.pcap", frames, linktype)
    try:
        _, facts = PcapReader().read_rdma(path)
    except Exception as exc:  # only our own input error may leave the reader
        from ringfence.errors import InputError

        assert isinstance(exc, InputError), exc
        return
    assert facts.packets >= facts.conns.num_rows


def test_payload_samples_do_not_depend_on_the_batch_size(tmp_path: Path) -> None:
    # Two connections of one pair, interleaved; the first writes carry readable text, the later ones
    # random bytes. A pair's samples are its first 16 payload heads in file order, however the reader
    # batches the packets — so the V8 facts (how many sampled heads read as plaintext) are the same too.
    text = b"checkpoint shard 0001 of 0064: tensor bytes follow here, plain. " * 2
    frames: list[bytes] = []
    for k in range(40):
        for sport in (49152, 49153):
            payload = text[:64] if k < 6 else os.urandom(64)
            t = bth(WRITE_ONLY, 0x8001, 0x11 + sport % 2, k) + reth(0x1000 + 64 * k, 0xBEEF, 64) + payload
            frames.append(roce_frame("10.9.0.1", "10.9.0.2", sport, t))
            frames.append(roce_frame("10.9.0.2", "10.9.0.1", sport, bth(ACK, 0x8001, 0x22, k) + bytes(4)))
    path = write(tmp_path / "pair.pcap", frames)
    tables = [PcapReader(batch_packets=b).read_rdma(path)[1].payload for b in (3, 7, 64, 1 << 16)]
    assert tables[0].num_rows and all(t.equals(tables[0]) for t in tables), [t.to_pylist() for t in tables]
