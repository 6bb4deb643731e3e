"""Each published driver pattern (ReDMArk Table 1) is flagged with its id; CSPRNG keys, QPNs and PSNs are not."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rdma_kit import conns, lfsr8, rand_va, write, writes
from ringfence.rdma import RdmaFinding, Vuln, check_captures, rkey_entropy
from ringfence.rdma.analysis import RKEY_BITS


def _findings(tmp_path: Path, frames: list[bytes], name: str = "c.pcap") -> list[RdmaFinding]:
    (summary,) = check_captures([write(tmp_path / name, frames)])
    assert summary.connections > 0
    return list(summary.findings)


def _ids(found: list[RdmaFinding]) -> set[Vuln]:
    return {f.id for f in found}


BASE = 0x1A2B00


def test_bnxt_re_constant_stride_has_no_entropy(tmp_path: Path) -> None:
    found = _findings(tmp_path, writes(conns(8, rkeys=lambda i: BASE + 0x100 * i)))
    assert _ids(found) == {Vuln.V1}
    (v1,) = found
    assert v1.min_entropy_bits == 0.0 and "+0x100" in v1.pattern
    assert v1.src == "10.1.0.1" and v1.dst == "10.1.0.2"


def test_mlx4_stride_and_reuse_after_deregistration(tmp_path: Path) -> None:
    # Regions 0..5 at +0x100; region 2 is deregistered and a new region elsewhere gets its key back.
    first = conns(6, rkeys=lambda i: BASE + 0x100 * i)
    again = conns(1, rkeys=lambda _: BASE + 0x200)
    found = _findings(tmp_path, writes(first + again))
    assert _ids(found) == {Vuln.V1, Vuln.V2}
    (v2,) = [f for f in found if f.id == Vuln.V2]
    assert f"{BASE + 0x200:#010x}" in v2.pattern


def test_rxe_counter_with_lfsr_byte(tmp_path: Path) -> None:
    low = lfsr8(0xA5, 10)  # rxe's key byte from an 8-bit LFSR with a fixed seed
    found = _findings(tmp_path, writes(conns(10, rkeys=lambda i: ((0x300 + i) << 8) | low[i])))
    assert _ids(found) == {Vuln.V1}
    assert found[0].min_entropy_bits is not None and found[0].min_entropy_bits <= 9.0


def test_mlx5_small_increasing_steps(tmp_path: Path) -> None:
    steps = [0x101, 0x102, 0x101, 0x101, 0x102, 0x101, 0x13C, 0x101, 0x102, 0x101, 0x101]
    keys = [BASE]
    for s in steps:
        keys.append(keys[-1] + s)
    found = _findings(tmp_path, writes(conns(len(keys), rkeys=lambda i: keys[i])))
    assert _ids(found) == {Vuln.V1}
    assert found[0].min_entropy_bits is not None and found[0].min_entropy_bits < 2.0


def test_sequential_qpns(tmp_path: Path) -> None:
    found = _findings(tmp_path, writes(conns(5, qpns=lambda i: 0x48 + i)))
    assert _ids(found) == {Vuln.V4}
    assert found[0].dst == "10.1.0.2"


def test_fixed_starting_psn(tmp_path: Path) -> None:
    found = _findings(tmp_path, writes(conns(4, psns=lambda _: 0)))
    assert _ids(found) == {Vuln.V6}
    assert "PSN 0x0" in found[0].pattern


def test_adjacent_regions(tmp_path: Path) -> None:
    base = rand_va()
    found = _findings(tmp_path, writes(conns(4, vas=lambda i: base + i * 0x10000)))
    assert _ids(found) == {Vuln.V3}


def test_plaintext_payload(tmp_path: Path) -> None:
    text = b"layer.17.weight gradient shard 0042 of 0128, step 9000;" + bytes(9)
    found = _findings(tmp_path, writes(conns(3, payload=lambda _: text)))
    assert _ids(found) == {Vuln.V8}
    assert (found[0].src, found[0].dst) == ("10.1.0.1", "10.1.0.2")


def test_csprng_connections_show_nothing(tmp_path: Path) -> None:
    hosts = [f"10.2.{i // 250}.{i % 250 + 1}" for i in range(20)]
    frames: list[bytes] = []
    for i in range(1000):
        a, b = hosts[i % 20], hosts[(i * 7 + 3) % 20]
        if a == b:
            b = hosts[(i + 1) % 20]
        frames += writes(conns(1, src=a, dst=b), writes_each=1)
    (summary,) = check_captures([write(tmp_path / "random.pcap", frames)])
    assert summary.connections >= 2000 and summary.keys == 1000
    assert summary.findings == ()


@pytest.mark.parametrize("n", [3, 10, 100])
def test_random_keys_estimate_near_full_width(n: int) -> None:
    keys = [int.from_bytes(os.urandom(4), "big") for _ in range(n)]
    bits, _ = rkey_entropy(keys)
    assert bits > RKEY_BITS
