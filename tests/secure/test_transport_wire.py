"""The RFT1 record layer on its own: sealing, opening, ratchet, and every refusal, without sockets."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringfence.secure.transport.wire import (
    HEADER_SIZE,
    MAGIC,
    TAG_SIZE,
    RecordError,
    RecordType,
    RxState,
    TxState,
    derive_chains,
    unpack_header,
)


def _pair(rekey_bytes: int = 1 << 30, rekey_seconds: float = 3600.0) -> tuple[TxState, RxState, list[int], list[int]]:
    i2r, _ = derive_chains(os.urandom(32), os.urandom(32))
    tx_epochs: list[int] = []
    rx_epochs: list[int] = []
    return (
        TxState(i2r, rekey_bytes, rekey_seconds, tx_epochs.append),
        RxState(i2r, rx_epochs.append),
        tx_epochs,
        rx_epochs,
    )


def _seal(tx: TxState, data: bytes) -> bytes:
    out = bytearray(HEADER_SIZE + len(data) + TAG_SIZE)
    n = tx.seal_into(RecordType.DATA, data, memoryview(out))
    return bytes(out[:n])


def _open(rx: RxState, record: bytes) -> bytes:
    kind, epoch, seq, length = unpack_header(record[:HEADER_SIZE], peer=1)
    out = bytearray(length - TAG_SIZE)
    rx.open_into(record[:HEADER_SIZE], epoch, seq, memoryview(record[HEADER_SIZE:]), memoryview(out), peer=1)
    return bytes(out)


def test_records_start_with_magic_and_hide_the_payload() -> None:
    tx, rx, _, _ = _pair()
    payload = b"gradient bytes " * 20
    rec = _seal(tx, payload)
    assert rec[:4] == MAGIC and rec[4] == RecordType.DATA
    assert b"gradient" not in rec
    assert _open(rx, rec) == payload


def test_directions_have_different_keys() -> None:
    i2r, r2i = derive_chains(b"s" * 32, b"t" * 32)
    assert i2r != r2i
    rec = _seal(TxState(i2r, 1 << 30, 3600.0), b"x" * 64)
    with pytest.raises(RecordError, match="authentication tag failed"):
        _open(RxState(r2i), rec)


def test_ratchet_by_bytes_keeps_nonces_unique_and_is_followed_by_the_receiver() -> None:
    tx, rx, tx_epochs, rx_epochs = _pair(rekey_bytes=1000)
    nonces = set()
    for i in range(50):
        rec = _seal(tx, bytes([i]) * 300)
        _, epoch, seq, _ = unpack_header(rec[:HEADER_SIZE], peer=1)
        nonces.add((epoch, seq))
        assert _open(rx, rec) == bytes([i]) * 300
    assert len(nonces) == 50
    assert tx_epochs == rx_epochs and len(tx_epochs) >= 12
    assert rx.epoch == tx.epoch


def test_old_epoch_record_is_refused_after_rekey() -> None:
    tx, rx, _, _ = _pair(rekey_bytes=10)
    first = _seal(tx, b"a" * 20)
    _open(rx, first)
    second = _seal(tx, b"b" * 20)  # epoch 1
    # the same bytes again: already received
    _open(rx, second)
    with pytest.raises(RecordError, match="replayed record"):
        _open(rx, second)


def test_skipping_an_epoch_is_refused() -> None:
    tx, rx, _, _ = _pair(rekey_bytes=10)
    _seal(tx, b"a" * 20)
    _seal(tx, b"a" * 20)  # epochs 0 and 1 never delivered: sequence 0 is still expected
    rec = _seal(tx, b"a" * 20)
    with pytest.raises(RecordError, match="reordered or dropped"):
        _open(rx, rec)


def test_unknown_epoch_is_refused_before_decryption() -> None:
    tx, rx, _, _ = _pair()
    rec = bytearray(_seal(tx, b"z" * 32))
    rec[8:12] = (9).to_bytes(4, "big")
    with pytest.raises(RecordError, match="unknown epoch 9"):
        _open(rx, bytes(rec))
    assert rx.epoch == 0  # nothing was installed


def test_forged_next_epoch_does_not_advance_the_receiver() -> None:
    tx, rx, _, _ = _pair()
    rec = bytearray(_seal(tx, b"z" * 32))
    rec[8:12] = (1).to_bytes(4, "big")  # claims the next epoch; the tag (header is AAD) fails
    with pytest.raises(RecordError, match="authentication tag failed"):
        _open(rx, bytes(rec))
    assert rx.epoch == 0


@settings(max_examples=60, deadline=None)
@given(pos=st.integers(min_value=0), bit=st.integers(min_value=0, max_value=7))
def test_any_single_bit_flip_is_detected(pos: int, bit: int) -> None:
    tx, rx, _, _ = _pair()
    rec = bytearray(_seal(tx, b"payload!" * 8))
    i = pos % len(rec)
    rec[i] ^= 1 << bit
    with pytest.raises(RecordError):
        _open(rx, bytes(rec))


@settings(max_examples=60, deadline=None)
@given(data=st.binary(min_size=HEADER_SIZE, max_size=HEADER_SIZE))
def test_headers_without_the_magic_are_refused(data: bytes) -> None:
    if data[:4] == MAGIC:
        data = b"XXXX" + data[4:]
    with pytest.raises(RecordError, match="is not RFT1 records"):
        unpack_header(data, peer=3)


@settings(max_examples=60, deadline=None)
@given(rtype=st.integers(min_value=0, max_value=255).filter(lambda t: t not in set(RecordType)))
def test_unknown_record_types_are_refused(rtype: int) -> None:
    header = MAGIC + bytes([rtype]) + bytes(HEADER_SIZE - 5)
    with pytest.raises(RecordError, match=f"unknown record type {rtype}"):
        unpack_header(header, peer=3)


def test_oversized_record_is_refused() -> None:
    header = MAGIC + bytes([RecordType.DATA, 0, 0, 0]) + bytes(12) + (1 << 31).to_bytes(4, "big")
    with pytest.raises(RecordError, match="announces"):
        unpack_header(header, peer=3)
