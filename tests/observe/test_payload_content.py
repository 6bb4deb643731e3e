"""The content tests under the verdicts: entropy, float structure, and the classifier's speed."""

from __future__ import annotations

import math
import os
import time
from collections import Counter

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ringfence.observe.payload import classify_flows
from ringfence.observe.recognise.content import RANDOM_ENTROPY, analyse, entropy
from ringfence.observe.recognise.labels import Kind
from ringfence.observe.samples import FlowKeys, PayloadSamples


def _direct_entropy(data: bytes) -> float:
    counts = Counter(data)
    n = len(data)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


@settings(max_examples=60, deadline=None)
@given(st.binary(min_size=64, max_size=64), st.integers(0, 63), st.integers(1, 64))
def test_entropy_matches_the_definition(row: bytes, start: int, length: int) -> None:
    stop = min(64, start + length)
    head = np.frombuffer(row, dtype=np.uint8).reshape(1, 64)
    got = entropy(head, np.array([start]), np.array([stop]))[0]
    assert math.isclose(got, _direct_entropy(row[start:stop]), abs_tol=1e-9)


def test_ciphertext_sits_at_the_random_entropy_and_tensors_below() -> None:
    rng = np.random.default_rng(7)
    random_rows = rng.integers(0, 256, (2000, 64), dtype=np.uint8)
    bf16 = (rng.normal(0, 1, (2000, 32)).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    full = (np.zeros(2000, dtype=np.int64), np.full(2000, 64, dtype=np.int64))
    h_random = entropy(random_rows, *full)
    h_bf16 = entropy(bf16.view(np.uint8), *full)
    assert abs(float(h_random.mean()) - RANDOM_ENTROPY[64]) < 0.01  # the exact expectation, 5.77 bits/byte
    assert 5.3 < float(h_random.min())
    assert float(h_bf16.mean()) < 5.0  # LAB-NOTES: bf16 4.6–4.7


def test_urandom_is_high_entropy_never_a_tensor() -> None:
    rows = np.frombuffer(os.urandom(64 * 5000), dtype=np.uint8).reshape(5000, 64)
    content = analyse(
        rows, np.zeros(5000, dtype=np.int64), np.full(5000, 64), with_entropy=np.ones(5000, dtype=np.bool_)
    )
    kinds = Counter(Kind(k) for k in content.kind.tolist())
    assert not kinds.keys() & {Kind.F32, Kind.BF16, Kind.F16, Kind.TEXT, Kind.ZERO, Kind.LOW}


def test_region_limits_are_respected() -> None:
    row = np.zeros((1, 64), dtype=np.uint8)
    row[0, :16] = np.frombuffer(b"plain text here!", dtype=np.uint8)
    row[0, 16:] = np.frombuffer(os.urandom(48), dtype=np.uint8)
    text = analyse(row, np.array([0]), np.array([16]), with_entropy=np.ones(1, dtype=np.bool_))
    rest = analyse(row, np.array([16]), np.array([64]), with_entropy=np.ones(1, dtype=np.bool_))
    assert Kind(int(text.kind[0])) == Kind.TEXT
    assert Kind(int(rest.kind[0])) == Kind.HIGH


def test_a_short_whole_line_of_text_is_text_and_other_short_regions_are_short() -> None:
    lines = [b"get key\r\n", b"RFB 003.008\n", b"ab\ncd\n", b"get keys\r", b"\x01et key\r\n"]
    rows = np.zeros((len(lines), 64), dtype=np.uint8)
    for i, line in enumerate(lines):
        rows[i, : len(line)] = np.frombuffer(line, dtype=np.uint8)
    stop = np.array([len(line) for line in lines])
    got = analyse(rows, np.zeros(len(lines), np.int64), stop, with_entropy=np.ones(len(lines), dtype=np.bool_))
    # 8+ printable bytes ending in LF; 6 bytes, no LF at the end, a control byte: too short to judge
    assert [Kind(int(k)) for k in got.kind] == [Kind.TEXT, Kind.TEXT, Kind.SHORT, Kind.SHORT, Kind.SHORT]


def _bulk(n: int, per_flow: int = 16) -> tuple[FlowKeys, PayloadSamples]:
    """n flows: a quarter TLS, a quarter float32 tensors, a quarter WireGuard, a quarter random."""
    rng = np.random.default_rng(0)
    m = n * per_flow
    head = rng.integers(0, 256, (m, 64), dtype=np.uint8)
    q = n // 4
    tls = np.arange(q * per_flow)
    head[tls, :5] = [23, 3, 3, 5, 0]
    head[tls[::per_flow], :11] = [22, 3, 1, 2, 0, 1, 0, 1, 252, 3, 3]
    head[q * per_flow : 2 * q * per_flow] = (
        rng.normal(0, 1, q * per_flow * 16).astype(np.float32).view(np.uint8).reshape(-1, 64)
    )
    wg = np.arange(2 * q * per_flow, 3 * q * per_flow)
    head[wg, :4] = [4, 0, 0, 0]
    head[wg, 12:16] = 0  # a session counter below 2^32
    proto = np.full(n, 6, dtype=np.uint8)
    proto[2 * q : 3 * q] = 17
    keys = FlowKeys(
        ethertype=np.full(n, 0x0800, dtype=np.uint16),
        proto=proto,
        sport=rng.integers(1024, 65535, n).astype(np.int32),
        dport=np.full(n, 443, dtype=np.int32),
        payload_bytes=np.full(n, 1424 * per_flow, dtype=np.int64),
        payload_packets=np.full(n, per_flow, dtype=np.int64),
    )
    samples = PayloadSamples(
        flow=np.repeat(np.arange(n, dtype=np.int64), per_flow),
        forward=np.arange(m) % 2 == 0,
        length=np.full(m, 1424, dtype=np.int32),
        head=head,
    )
    return keys, samples


def test_classifier_is_columnar_fast() -> None:
    n = 20_000  # 320 000 sampled packets; the 100 000-flow figure is in docs/verdicts.md
    keys, samples = _bulk(n)
    started = time.process_time()
    protection, protocol, _ = classify_flows(keys, samples)
    spent = time.process_time() - started
    q = n // 4
    assert Counter(zip(protection[:q], protocol[:q], strict=True)) == {
        ("encrypted", "tls"): q
    }  # no ServerHello: version unknown
    assert set(zip(protection[q : 2 * q], protocol[q : 2 * q], strict=True)) == {("plaintext", "tensor-f32")}
    assert set(zip(protection[2 * q : 3 * q], protocol[2 * q : 3 * q], strict=True)) == {("encrypted", "wireguard")}
    assert set(protection[3 * q :]) == {"unknown"}
    # ~0.1 s of CPU on the development machine; a loose bound so a busy CI runner does not flake
    assert spent < 2.0
