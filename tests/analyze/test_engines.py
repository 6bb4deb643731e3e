"""One analysis, two engines: DuckDB and Spark give the same findings on the same flows.

The Spark tests start one local[2] session for the module (a JVM: many seconds) and are marked
``slow``; the rest (engine names, SQL translation, hive-partitioned datasets) run without a JVM.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from flow_kit import AUX, EXT, JUMP, MGMT, STORAGE, USER, W0, W1, flows, policy_variant
from ringfence.analyze import (
    AnalyzeError,
    EngineKind,
    EngineSpec,
    classify,
    communication_matrix,
    group_flows,
    protection_breakdown,
)
from ringfence.analyze.discover import discover, render_yaml
from ringfence.errors import InputError


def _cidr_rules(doc: dict[str, Any]) -> None:
    doc["approved"] += [
        {"id": "offsite-v4", "from": {"node": "storage"}, "to": {"cidr": "198.51.100.0/24"}, "ports": 443,
         "class": "replication"},
        {"id": "vpn-in", "from": {"cidr": "192.0.2.0/25"}, "to": {"node": "mgmt"}, "ports": 22,
         "class": "management"},
    ]  # fmt: skip


POLICY = policy_variant(_cidr_rules)
ROWS = [
    {"src": W0, "dst": W1, "dport": 29500, "bytes": 5000, "protection": "encrypted"},
    {"src": W1, "dst": W0, "dport": 41000, "bytes": 4000, "protection": "plaintext"},
    {"src": W0, "dst": STORAGE, "dport": 8080, "bytes": 3000, "protection": "encrypted"},
    {"src": AUX, "dst": STORAGE, "dport": 8080, "bytes": 700, "protection": "plaintext"},
    {"src": JUMP, "dst": MGMT, "dport": 22, "bytes": 200, "protection": "encrypted"},
    {"src": USER, "dst": MGMT, "dport": 8000, "bytes": 90, "protection": "handshake-only"},
    {"src": STORAGE, "dst": EXT, "dport": 9000, "bytes": 100, "protection": "unknown"},
    {"src": STORAGE, "dst": "198.51.100.7", "dport": 443, "bytes": 60, "protection": "encrypted"},
    {"src": "192.0.2.9", "dst": MGMT, "dport": 22, "bytes": 30, "protection": "encrypted"},
    {"src": "192.0.2.200", "dst": MGMT, "dport": 22, "bytes": 20, "protection": "plaintext"},
    {"src": W0, "dst": "2001:db8::5", "dport": 443, "bytes": 10, "protection": "plaintext"},
    {"src": AUX, "dst": W0, "dport": 29500, "bytes": 50, "protection": "handshake-only", "proto": 17},
    {"src": "10.200.0.1", "dst": "10.200.0.2", "dport": 29500, "bytes": 5,
     "src_identity": "spiffe://lab/job/train-a", "dst_identity": "spiffe://lab/job/train-a"},
]  # fmt: skip
OBSERVED = flows(ROWS)


def test_engine_names() -> None:
    assert EngineSpec.parse("duckdb") == EngineSpec(EngineKind.DUCKDB)
    assert EngineSpec.parse("spark") == EngineSpec(EngineKind.SPARK, None)
    assert EngineSpec.parse("spark=spark://head:7077").master == "spark://head:7077"
    assert EngineSpec.parse("spark").describe() == "spark=local[2]"
    for bad in ("postgres", "duckdb=x", "spark="):
        with pytest.raises(AnalyzeError):
            EngineSpec.parse(bad)


def test_analysis_sql_translates_to_spark() -> None:
    pytest.importorskip("sqlglot")
    from ringfence.analyze.engine.spark import to_spark_sql

    text = to_spark_sql("SELECT a // 36 AS q, regexp_matches(s, '^a\\.b\\z') AS m, x::BIGINT AS b FROM t GROUP BY ALL")
    assert "DIV" in text and "RLIKE" in text and "CAST(x AS BIGINT)" in text
    with pytest.raises(AnalyzeError):
        to_spark_sql("SELECT 1; SELECT 2")


def _hive(root: Path, table: pa.Table) -> Path:
    # Two days × two hours, as a collector would write them: day=…/hour=…/part.parquet
    for i, (day, hour) in enumerate([("2026-11-30", "23"), ("2026-12-01", "00"), ("2026-12-01", "01")]):
        part = root / f"day={day}" / f"hour={hour}"
        part.mkdir(parents=True)
        pq.write_table(table.slice(i * 5, 5), part / "part-0.parquet")
    return root


def test_hive_partitioned_dataset_reads_like_the_table(tmp_path: Path) -> None:
    root = _hive(tmp_path / "flows", OBSERVED)
    assert communication_matrix(root, POLICY).equals(communication_matrix(OBSERVED, POLICY))
    assert protection_breakdown(str(root), POLICY).equals(protection_breakdown(OBSERVED, POLICY))


def test_empty_directory_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=str(tmp_path)):
        communication_matrix(tmp_path, POLICY)


def _rows(t: pa.Table) -> list[dict[str, Any]]:
    return t.to_pylist()


SPARK_HEAP = 800 * 2**20


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineSpec]:
    pytest.importorskip("pyspark")
    pytest.importorskip("sqlglot")
    if shutil.which("java") is None:
        pytest.skip("no Java: run `make sysdeps`")
    spill = tmp_path_factory.mktemp("spark-spill")
    yield EngineSpec(EngineKind.SPARK, "local[2]", memory_limit=SPARK_HEAP, spill_dir=str(spill))
    from ringfence.analyze.engine.spark import stop_sessions

    stop_sessions()  # the JVM must not stay up (a gigabyte and a core) for the rest of the suite
    assert list(spill.iterdir()) == []  # Spark's local directory went with its session


@pytest.mark.slow
def test_spark_gives_the_same_findings_as_duckdb(spark: EngineSpec, tmp_path: Path) -> None:
    duck_classified = classify(OBSERVED, POLICY)
    spark_classified = classify(OBSERVED, POLICY, engine=spark)
    assert spark_classified.equals(duck_classified)
    assert _rows(communication_matrix(OBSERVED, POLICY, engine=spark)) == _rows(communication_matrix(OBSERVED, POLICY))
    assert _rows(protection_breakdown(OBSERVED, POLICY, engine=spark)) == _rows(protection_breakdown(OBSERVED, POLICY))
    # from classified flows, and from a hive-partitioned Parquet dataset
    assert _rows(communication_matrix(duck_classified, POLICY, engine=spark)) == _rows(
        communication_matrix(duck_classified, POLICY)
    )
    root = _hive(tmp_path / "flows", OBSERVED)
    assert _rows(communication_matrix(root, POLICY, engine=spark)) == _rows(communication_matrix(root, POLICY))


@pytest.mark.slow
def test_spark_discovers_the_same_policy(spark: EngineSpec) -> None:
    inventory = policy_variant(lambda doc: doc.update(approved=[]))
    duck = discover(OBSERVED, inventory)
    on_spark = discover(OBSERVED, inventory, engine=spark)
    assert render_yaml(on_spark, []) == render_yaml(duck, [])
    assert on_spark.flagged == duck.flagged
    assert _rows(group_flows(duck_classified := classify(OBSERVED, POLICY), POLICY, engine=spark)) == _rows(
        group_flows(duck_classified, POLICY)
    )



@pytest.mark.slow
def test_spark_runs_under_the_memory_limit_and_spill_dir(spark: EngineSpec) -> None:
    """``--memory-limit`` and ``--spill-dir`` bound a local Spark as they bound DuckDB: the JVM's heap is at most
    the limit and its local directory a fresh one under the spill directory (gone after the session: the
    fixture's teardown); another heap in the same process is refused (a JVM's heap is fixed when it starts)."""
    from ringfence.analyze.engine.interface import AnalyzeError
    from ringfence.analyze.engine.spark import SparkEngine

    eng = SparkEngine(spark)
    try:
        sc = eng._spark.sparkContext
        heap = int(sc._jvm.java.lang.Runtime.getRuntime().maxMemory())
        assert 400 * 2**20 < heap <= SPARK_HEAP, heap
        assert str(sc.getConf().get("spark.local.dir")).startswith(str(spark.spill_dir) + "/ringfence-spark-")
        assert eng.query("SELECT 1 AS one").num_rows == 1
    finally:
        eng.close()
    with pytest.raises(AnalyzeError, match="runs with a 800m driver heap; 900m was asked for"):
        SparkEngine(dataclasses.replace(spark, memory_limit=900 * 2**20))


def test_the_driver_heap_follows_the_limit_locally_and_only_when_given_on_a_cluster() -> None:
    from ringfence.analyze.engine.spark import driver_heap

    assert driver_heap(EngineSpec(EngineKind.SPARK, "local[2]", memory_limit=2**30)) == "1024m"
    assert driver_heap(EngineSpec(EngineKind.SPARK, None, memory_limit=64 * 2**20)) == "64m"
    assert driver_heap(EngineSpec(EngineKind.SPARK, "spark://head:7077")) is None
    assert driver_heap(EngineSpec(EngineKind.SPARK, "yarn", memory_limit=2**31)) == "2048m"
