"""The coverage-guided campaign: its entry points, its bookkeeping, and a short run of every target in CI.

``make fuzz`` (benchmarks/fuzz/run_fuzz.py) runs each target of ``fuzz_entries`` under atheris for
10^6 inputs, one process each; here every target shares one process (one start-up and one
instrumentation, the input's first byte choosing the target) for :data:`CI_SECONDS` after the seeds,
so a parser change that crashes on a nearby input fails ``make test`` too.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from fuzz_entries import entries, tokens_dictionary, written_seeds

from ringfence.errors import RingfenceError

ROOT = Path(__file__).resolve().parents[2]
RUNNER = ROOT / "benchmarks" / "fuzz" / "run_fuzz.py"
ENTRIES = entries()
#: Seconds of coverage-guided fuzzing in CI, all targets together (~1 s each), after ~5 s of start-up and seeds.
CI_SECONDS = 20


def _runner() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_rf_run_fuzz", RUNNER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_entry_has_seeds_and_takes_them_without_a_foreign_exception(name: str) -> None:
    entry = ENTRIES[name]
    seeds = entry.seeds()
    assert seeds, f"no seeds for {name}: is ../shared present?"
    accepted = 0
    for seed in seeds:
        for call in (entry.one, entry.full):
            if call is None:
                continue
            try:
                call(seed)
                accepted += 1
            except RingfenceError:
                pass
    assert accepted, f"{name}: every seed is refused, so the fuzzer would start from error paths only"


def test_made_seeds_are_written_and_shared_ones_read_in_place(tmp_path: Path) -> None:
    made = written_seeds(ENTRIES["facts-probes"], tmp_path / "made")
    assert [p.parent for p in made] == [tmp_path / "made"] and json.loads(made[0].read_bytes())["format"]
    shared = written_seeds(ENTRIES["ipfix"], tmp_path / "ipfix")
    assert shared and all(p.parent.name == "netflow" for p in shared) and not list((tmp_path / "ipfix").iterdir())


def test_tokens_dictionary_is_in_libfuzzer_syntax() -> None:
    lines = tokens_dictionary().splitlines()
    assert lines and all(line.startswith('"') and line.endswith('"') for line in lines)
    assert '"\\xff"' in lines and '"nan"' in lines


def test_recorder_counts_every_failure_and_keeps_a_few_per_signature(tmp_path: Path) -> None:
    run_fuzz = _runner()
    rec = run_fuzz.Recorder(tmp_path)
    try:
        {}["missing"]
    except KeyError as exc:
        signature = run_fuzz._signature(exc)
    assert signature == "KeyError at ?"  # raised outside ringfence: no ringfence frame to name
    for i in range(5):
        rec.failure("crash", signature, bytes([i]), "traceback")
    rec.failure("hang", "over 1.0 s of CPU", b"slow", "1.5 s")
    counts = json.loads((tmp_path / "counts.json").read_text())
    assert counts["crashes"] == 5 and counts["hangs"] == 1
    assert counts["signatures"] == {"crash: KeyError at ?": 5, "hang: over 1.0 s of CPU": 1}
    assert len(list(tmp_path.glob("crash-*.bin"))) == run_fuzz.KEEP_PER_SIGNATURE
    assert len(list(tmp_path.glob("hang-*.bin"))) == 1


def test_final_stats_are_read_from_the_libfuzzer_log() -> None:
    log = (
        "#2\tINITED cov: 48 ft: 48 corp: 2/1548b exec/s: 0 rss: 156Mb\n"
        "#20000\tDONE   cov: 137 ft: 324 corp: 63/9Kb lim: 1424 exec/s: 10000 rss: 156Mb\n"
        "stat::number_of_executed_units: 20000\nstat::average_exec_per_sec:     10000\n"
        "stat::slowest_unit_time_sec:    0\nstat::peak_rss_mb:              156\n"
    )
    stats = _runner()._final_stats(log)
    assert stats["inputs"] == 20000 and stats["edges"] == 137 and stats["features"] == 324
    assert stats["corpus"] == 63 and stats["inputs_per_s"] == 10000 and stats["libfuzzer_peak_rss_mb"] == 156


def test_every_target_survives_a_short_coverage_guided_run(tmp_path: Path) -> None:
    pytest.importorskip("atheris")
    cmd = [sys.executable, str(RUNNER), "--mux", "--seconds", str(CI_SECONDS), "--out", str(tmp_path / "out"),
           "--corpus", str(tmp_path / "corpus")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=540, check=False)
    results = tmp_path / "out" / "results.json"
    assert results.is_file(), proc.stdout[-2000:] + proc.stderr[-2000:]
    (row,) = json.loads(results.read_text())["targets"]
    assert not (row["crashes"] or row["hangs"]), f"reproducers under {tmp_path / 'out'}: {row['signatures']}"
    assert row["exit"] == 0 and row["edges"] > 0, row
    assert sorted(row["inputs_by_target"]) == sorted(ENTRIES), "a target's seeds never ran"
    assert proc.returncode == 0
