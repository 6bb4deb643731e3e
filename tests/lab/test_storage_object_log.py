"""The object server's access log stays bounded: past its size it moves aside once and starts again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ringfence.lab.agents import storage


def test_the_object_log_rotates_past_its_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(storage, "OBJECT_LOG_MAX", 1000)
    log = tmp_path / "objects.json"
    store = storage.Store(object_log=log)
    for i in range(100):
        store.record({"time": float(i), "peer": "10.77.1.10", "job": "train-a", "result": "served", "bytes": i})
    kept = [json.loads(line) for line in log.read_text().splitlines()]
    older = [json.loads(line) for line in (tmp_path / "objects.json.1").read_text().splitlines()]
    assert log.stat().st_size <= 1000 + 200 and (tmp_path / "objects.json.1").stat().st_size <= 1000 + 200
    assert kept[-1]["bytes"] == 99 and older[-1]["time"] < kept[0]["time"]  # nothing newer was dropped
    assert not (tmp_path / "objects.json.2").exists()
    storage.Store().record({"time": 0.0})  # no log configured: nothing written, nothing raised
