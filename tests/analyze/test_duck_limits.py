"""Bounded DuckDB: every analysis database has a memory limit and its own spill directory, removed when the
process's databases close; a session sees nothing of the one before it; an analysis over a hive-partitioned
dataset several times larger than the limit streams it to the same answer.

The big test runs the analysis in a fresh interpreter (its peak RSS, VmHWM, is its own, not pytest's) with a
64 MB limit over ~170 MB of uncompressed Parquet in 8 ``day=…/hour=…`` partitions, and checks the matrix
against the one partition analysed in memory, times eight (the partitions are copies of one file).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from flow_kit import policy_variant
from ringfence.analyze import EngineSpec, communication_matrix
from ringfence.analyze.engine.duck import DuckEngine, _invalidate, close_databases
from ringfence.analyze.engine.interface import AnalyzeError
from ringfence.analyze.engine.limits import MEMORY_ENV, SPILL_ENV, memory_limit, parse_size, threads_for
from ringfence.errors import InputError
from ringfence.policy import Policy
from rss_kit import PEAK_KB

TESTS = Path(__file__).resolve().parents[1]
ROWS, PARTS = 1_000_000, 8
LIMIT = "64MB"


# A CIDR destination: unknown addresses are grouped by their text before the CIDR class is added, so the
# first group-by is keyed by ~65,000 distinct addresses, not a handful of integers.
RULE = {"id": "cgnat-tls", "from": {"zone": "workload"}, "to": {"cidr": "100.64.0.0/10"}, "ports": 443,
        "class": "replication"}  # fmt: skip


def _policy() -> Policy:
    return policy_variant(lambda doc: doc["approved"].append(RULE))


def _octets(*cols: np.ndarray) -> pa.Array:
    return pc.binary_join_element_wise(*[pc.cast(pa.array(c), pa.string()) for c in cols], ".")


def _partition(n: int) -> pa.Table:
    rng = np.random.default_rng(12)
    ones = np.ones(n, np.int64)
    return pa.table(
        {
            "src": _octets(ones * 10, ones * 77, ones, rng.integers(10, 12, n)),  # the lab's two workers
            "dst": _octets(ones * 100, ones * 64, rng.integers(0, 256, n), rng.integers(0, 256, n)),
            "sport": pa.array(rng.integers(32768, 61000, n).astype(np.int32)),
            "dport": pa.array(np.where(rng.random(n) < 0.5, 443, 8443).astype(np.int32)),
            "proto": pa.array(np.full(n, 6, np.uint8)),
            "bytes": pa.array(rng.integers(1, 1_000_000, n)),
            "protection": pa.array(np.array(["encrypted", "plaintext"])[rng.integers(0, 2, n)]),
        }
    )


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pa.Table]:
    root = tmp_path_factory.mktemp("flows-ds")
    table = _partition(ROWS)
    first = root / "day=2026-12-01" / "hour=00" / "part-0.parquet"
    first.parent.mkdir(parents=True)
    pq.write_table(table, first, compression="none", row_group_size=1 << 17)  # uncompressed: as big as it reads
    for h in range(1, PARTS):
        d = root / "day=2026-12-01" / f"hour={h:02d}"
        d.mkdir(parents=True)
        shutil.copyfile(first, d / "part-0.parquet")
    return root, table


_CHILD = f"""
import json, sys
sys.path.insert(0, {str(TESTS)!r})
from flow_kit import policy_variant
from ringfence.analyze import communication_matrix
from ringfence.analyze.engine import session
policy = policy_variant(lambda doc: doc["approved"].append({json.dumps(RULE)}))
with session() as con:  # DuckDB loaded and a connection opened: the fixed cost, before the analysis
    con.query("SELECT 1 AS one")
before = {PEAK_KB}
m = communication_matrix(sys.argv[1], policy)
print(json.dumps({{"before_kb": before, "after_kb": {PEAK_KB}, "rows": m.to_pylist()}}))
"""


def _key(rows: list[dict[str, object]]) -> list[str]:
    return sorted(json.dumps([r[k] for k in ("src_zone", "dst_zone", "class", "rule", "status", "flows", "bytes")])
                  for r in rows)  # fmt: skip


def test_dataset_larger_than_the_limit_streams_to_the_same_matrix(
    dataset: tuple[Path, pa.Table], tmp_path: Path
) -> None:
    root, one = dataset
    size = sum(p.stat().st_size for p in root.rglob("*.parquet"))
    assert size > 2.5 * parse_size(LIMIT, "test")  # the input is several times the limit
    spill = tmp_path / "spill"
    env = {**os.environ, MEMORY_ENV: LIMIT, SPILL_ENV: str(spill), "RINGFENCE_THREADS": "2"}
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(root)], capture_output=True, text=True, env=env,
                          timeout=120, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    expected = communication_matrix(one, _policy(), engine=EngineSpec())
    want = [dict(r, flows=r["flows"] * PARTS, bytes=r["bytes"] * PARTS) for r in expected.to_pylist()]
    assert _key(out["rows"]) == _key(want)
    assert any(r["rule"] == "cgnat-tls" and r["flows"] > 0 for r in out["rows"])
    grown_mb = (out["after_kb"] - out["before_kb"]) / 1024
    # The analysis adds no more than the limit plus what DuckDB keeps outside its buffer pool (Parquet
    # metadata, per-thread state) and the Arrow result: far below the 170 MB it reads.
    assert grown_mb < 64 + 48, f"peak RSS grew {grown_mb:.0f} MB under a {LIMIT} limit"
    assert spill.is_dir() and not any(spill.iterdir())  # the connection's spill directory is gone


def test_database_gets_limit_and_own_spill_dir(tmp_path: Path) -> None:
    eng = DuckEngine(EngineSpec(memory_limit=200 * 1024**2, spill_dir=str(tmp_path)))
    try:
        got = eng.query("SELECT current_setting('memory_limit') AS m, current_setting('temp_directory') AS t")
        row = got.to_pylist()[0]
        assert row["m"] in ("200.0 MiB", "209.7 MB")
        assert Path(row["t"]).parent == tmp_path and Path(row["t"]).name.startswith("ringfence-duckdb-")
        assert eng.spill_dir.is_dir()
        two = eng.query("SELECT current_setting('threads') AS n").column("n")[0].as_py()
        assert int(two) == 1  # 200 MiB gives one thread its 125 MB, not two
    finally:
        eng.close()
    assert eng.spill_dir.is_dir()  # the database stays for the next session with these limits
    close_databases()
    assert not any(tmp_path.iterdir())


def test_nothing_of_one_session_reaches_the_next(tmp_path: Path) -> None:
    """Sessions with the same limits share a database (no ~20 ms open and close each), never each other's
    tables, views or session settings."""
    spec = EngineSpec(memory_limit=256 * 1024**2, spill_dir=str(tmp_path))
    flows = tmp_path / "flows.parquet"
    pq.write_table(pa.table({"src": ["10.0.0.1"], "bytes": [7]}), flows)
    one = DuckEngine(spec)
    try:
        one.register("inventory", pa.table({"address": ["10.0.0.1"]}))
        one.register_parquet("flows", str(flows))
        assert one.query("SELECT count(*) AS n FROM flows JOIN inventory ON address = src").column("n")[0].as_py() == 1
        two = DuckEngine(spec)  # open at the same time: a connection of its own
        try:
            assert two.spill_dir == one.spill_dir  # the same database
            for name in ("inventory", "flows"):
                with pytest.raises(AnalyzeError, match=name):
                    two.query(f"SELECT * FROM {name}")
        finally:
            two.close()
    finally:
        one.close()
    three = DuckEngine(spec)  # after both closed
    try:
        for name in ("inventory", "flows"):
            with pytest.raises(AnalyzeError, match=name):
                three.query(f"SELECT * FROM {name}")
        assert three.query("SELECT current_setting('enable_progress_bar') AS p").column("p")[0].as_py() is False
    finally:
        three.close()
        close_databases()


def test_an_invalidated_database_is_replaced(tmp_path: Path) -> None:
    """After DuckDB invalidates a database (a fatal or internal error), the next session gets a new one."""
    spec = EngineSpec(memory_limit=256 * 1024**2, spill_dir=str(tmp_path))
    first = DuckEngine(spec)
    old = first.spill_dir
    _invalidate(first._db)
    assert not old.exists()
    again = DuckEngine(spec)
    try:
        assert again.spill_dir != old
        assert again.query("SELECT 1 AS one").column("one")[0].as_py() == 1
    finally:
        again.close()
        close_databases()
    assert not any(tmp_path.iterdir())


def test_default_limit_is_half_of_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MEMORY_ENV, raising=False)
    half = memory_limit(None)
    monkeypatch.setenv(MEMORY_ENV, "25%")
    assert abs(memory_limit(None) - half / 2) < 1024**2
    monkeypatch.setenv(MEMORY_ENV, "1GiB")
    assert memory_limit(None) == 1024**3
    assert memory_limit(123 * 1000**2) == 123 * 1000**2  # an explicit limit wins over the variable


@pytest.mark.parametrize(
    ("text", "size"),
    [("64MB", 64 * 1000**2), ("512MiB", 512 * 1024**2), ("1.5GB", 1_500_000_000), (" 2 gib ", 2 * 1024**3)],
)
def test_sizes(text: str, size: int) -> None:
    assert parse_size(text, "--memory-limit") == size


@pytest.mark.parametrize("text", ["", "64", "lots", "64XB", "0%", "150%", "1KB", "-5MB"])
def test_bad_sizes_are_named(text: str) -> None:
    with pytest.raises(InputError, match="--memory-limit"):
        parse_size(text, "--memory-limit")


def test_bad_env_limit_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MEMORY_ENV, "plenty")
    with pytest.raises(InputError, match=MEMORY_ENV):
        DuckEngine()


def test_spill_dir_that_is_a_file(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(InputError, match="--spill-dir"):
        DuckEngine(EngineSpec(spill_dir=str(blocker)))


def test_threads_follow_the_limit() -> None:
    assert threads_for(64 * 1000**2, 8) == 1
    assert threads_for(1000**3, 8) == 8
    assert threads_for(1000**3, 2) == 2
