"""The run format: the configuration hash, round trips and bad files."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from ringfence.bench.run import (
    BenchConfig,
    BenchRun,
    Repeat,
    RunFileError,
    config_differences,
    load_run,
    save_run,
    size_result_from_times,
)

CFG = BenchConfig(tool="ringfence", sizes=(1 << 20, 2 << 20), dtype="float32", world_size=2, nodes=("a", "b"),
                  warmup=2, iterations=4, versions=(("torch", "2.13.0"),))


def _run(cfg: BenchConfig = CFG) -> BenchRun:
    results = tuple(size_result_from_times(s, s // 4, [100.0, 110.0, 90.0, 100.0], cfg.world_size, 0)
                    for s in cfg.sizes)
    return BenchRun(cfg, (Repeat(results, started="2025-01-01T00:00:00+00:00", source="test"),))


def test_label_fields_do_not_change_the_hash() -> None:
    other = replace(CFG, backend="ringfence", layer="wireguard", interfaces=("wg0", "wg0"))
    assert other.config_hash == CFG.config_hash


@pytest.mark.parametrize("change", [
    {"sizes": (1 << 20,)}, {"dtype": "bfloat16"}, {"world_size": 4}, {"nodes": ("a", "c")}, {"warmup": 5},
    {"iterations": 20}, {"versions": (("torch", "2.12.0"),)}, {"placement": "out-of-place"}, {"tool": "nccl-tests"},
    {"params": (("device", "cuda:0"),)},
])
def test_test_fields_change_the_hash(change: dict[str, object]) -> None:
    other = replace(CFG, **change)  # type: ignore[arg-type]
    assert other.config_hash != CFG.config_hash
    assert config_differences(CFG, other)


def test_round_trip(tmp_path: Path) -> None:
    run = _run()
    save_run(run, tmp_path / "r.json")
    back = load_run(tmp_path / "r.json")
    assert back == run
    r = back.repeats[0].results[0]
    assert r.time_us == 100.0 and r.p99_us == 110.0 and r.p50_us == 100.0 and r.wrong == 0
    assert r.busbw == pytest.approx((1 << 20) / 100.0 / 1e3)  # n = 2: busbw = algbw


def test_edited_file_is_refused(tmp_path: Path) -> None:
    save_run(_run(), tmp_path / "r.json")
    doc = json.loads((tmp_path / "r.json").read_text())
    doc["config"]["iterations"] = 5
    (tmp_path / "r.json").write_text(json.dumps(doc))
    with pytest.raises(RunFileError, match="config_hash"):
        load_run(tmp_path / "r.json")


@pytest.mark.parametrize("text, match", [
    ("{not json", "not JSON"), ("[]", "JSON object"), ('{"format": "x"}', "format"),
])
def test_malformed_files(tmp_path: Path, text: str, match: str) -> None:
    (tmp_path / "r.json").write_text(text)
    with pytest.raises(RunFileError, match=match) as info:
        load_run(tmp_path / "r.json")
    assert str(tmp_path / "r.json") in info.value.where


def test_merge_adds_repeats_of_the_same_test_only() -> None:
    run = _run()
    assert len(run.merged(_run()).repeats) == 2
    with pytest.raises(RunFileError, match="different test"):
        run.merged(_run(replace(CFG, iterations=9)))
