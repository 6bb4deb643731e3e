"""Windows of a mapped capture: small records start in a small window that grows; large ones map whole windows."""

from __future__ import annotations

import mmap
from pathlib import Path

import numpy as np
import pytest
from test_pcap_synthetic import TS0, eth, ipv4, pcap, rows, tcp, write

from ringfence.observe.flows import pcap as pcap_module
from ringfence.observe.flows._pcap_layout import Cols
from ringfence.observe.flows.pcap import PcapReader


def _capture(payload: int, n: int) -> bytes:
    frames = [eth(ipv4(f"10.0.{i % 7}.1", "10.1.0.1", 6, tcp(40000 + i % 11, 443, bytes([i % 251]) * payload)))
              for i in range(n)]  # fmt: skip
    return pcap([(TS0 + i * 1000, f) for i, f in enumerate(frames)])


def _window_lengths(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    lengths: list[int] = []
    real = mmap.mmap

    def spy(fileno: int, length: int, **kw: int) -> mmap.mmap:
        lengths.append(length)
        return real(fileno, length, **kw)

    monkeypatch.setattr(pcap_module.mmap, "mmap", spy)
    return lengths


@pytest.mark.parametrize(("payload", "grows"), [(40, True), (4000, False)])
def test_windows_grow_for_small_records_only_and_read_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               payload: int, grows: bool) -> None:  # fmt: skip
    path = write(tmp_path, _capture(payload, 3000))
    whole = rows(PcapReader(chunk_bytes=1 << 30, batch_packets=50).read(path).flows)
    monkeypatch.setattr(pcap_module, "FIRST_WINDOW_BYTES", 4096)
    lengths = _window_lengths(monkeypatch)
    got = PcapReader(chunk_bytes=1 << 16, batch_packets=50).read(path)
    assert rows(got.flows) == whole and got.records == 3000
    full = [n for n in lengths[:-1] if n == 1 << 16]  # every window but the file's last
    if grows:
        assert lengths[:5] == [4096, 8192, 16384, 32768, 65536]
    else:  # after the first window, whole windows at once
        assert lengths[0] == 4096 and len(full) == len(lengths) - 2
    assert len(full) >= 1


def test_a_decoded_column_left_unset_is_a_loud_error() -> None:
    cols = Cols(4, unset=frozenset({"sport", "dport"}))
    cols.sport = np.zeros(4, np.int64)
    with pytest.raises(RuntimeError, match="left unset: dport"):
        cols.check_set()
    cols.dport = np.zeros(4, np.int64)
    cols.check_set()


def test_every_declared_column_has_its_dtype_and_default() -> None:
    from ringfence.observe.flows._pcap_layout import _FIELDS

    declared = {name for name in Cols.__annotations__ if not name.startswith("_")}
    assert declared == set(_FIELDS)
    cols = Cols(3)
    for name, (dtype, default) in _FIELDS.items():
        arr = getattr(cols, name)
        assert arr.dtype == np.dtype(dtype) and arr.shape == (3,) and (arr == default).all(), name
