"""Observed vs. approved matrix, protection breakdown and flow grouping — from tables and Parquet."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from flow_kit import AUX, EXT, JUMP, MGMT, STORAGE, W0, W1, flows, lab_policy
from ringfence.analyze import (
    BREAKDOWN_SCHEMA,
    MATRIX_SCHEMA,
    classify,
    communication_matrix,
    group_flows,
    protection_breakdown,
)
from ringfence.errors import InputError

POLICY = lab_policy()


@pytest.fixture(scope="module")
def observed() -> pa.Table:
    return flows(
        [
            {"src": W0, "dst": W1, "dport": 29500, "bytes": 5000, "protection": "encrypted"},
            {"src": W1, "dst": W0, "dport": 29501, "bytes": 4000, "protection": "plaintext"},
            {"src": W0, "dst": STORAGE, "dport": 8080, "bytes": 3000, "protection": "encrypted"},
            {"src": AUX, "dst": STORAGE, "dport": 8080, "bytes": 700, "protection": "plaintext"},
            {"src": JUMP, "dst": MGMT, "dport": 22, "bytes": 200, "protection": "encrypted"},
            {"src": STORAGE, "dst": EXT, "dport": 9000, "bytes": 100, "protection": "unknown"},
            {"src": AUX, "dst": W0, "dport": 29500, "bytes": 50, "protection": "handshake-only"},
        ]
    )


def test_matrix_rows(observed: pa.Table) -> None:
    m = communication_matrix(observed, POLICY)
    assert m.schema == MATRIX_SCHEMA
    rows = {(r["src_zone"], r["dst_zone"], r["class"], r["rule"], r["status"]): r for r in m.to_pylist()}
    coll = rows[("workload", "workload", "collective", "train-a-collective", "approved")]
    assert (coll["flows"], coll["bytes"], coll["src_endpoint"]) == (2, 9000, "job:train-a")
    assert rows[("workload", "storage", "storage", None, "unapproved")]["bytes"] == 700
    assert rows[("workload", "workload", "unclassified", None, "unapproved")]["flows"] == 1
    unused = {r["rule"] for r in m.to_pylist() if r["status"] == "unused"}
    assert unused == {"train-a-report", "aux-telemetry", "user-submit"}
    assert rows[("user", "management", "management", "user-submit", "unused")]["flows"] == 0
    assert m.column("bytes").to_pylist()[:2] == [9000, 3000]  # largest first


def test_matrix_same_from_classified_table_and_parquet(observed: pa.Table, tmp_path: Path) -> None:
    direct = communication_matrix(observed, POLICY)
    assert communication_matrix(classify(observed, POLICY), POLICY).equals(direct)
    path = tmp_path / "flows.parquet"
    pq.write_table(observed, path)
    assert communication_matrix(path, POLICY).equals(direct)
    assert communication_matrix(tmp_path, POLICY).equals(direct)  # a directory of Parquet files


def test_breakdown(observed: pa.Table) -> None:
    b = protection_breakdown(observed, POLICY)
    assert b.schema == BREAKDOWN_SCHEMA
    rows = {r["class"]: r for r in b.to_pylist()}
    assert rows["collective"]["encrypted_bytes"] == 5000 and rows["collective"]["plaintext_bytes"] == 4000
    assert rows["replication"]["unknown_bytes"] == 100
    assert rows["unclassified"]["handshake_only_bytes"] == 50
    for r in b.to_pylist():
        assert r["bytes"] == sum(v for k, v in r.items() if k.endswith("_bytes"))
    assert protection_breakdown(classify(observed, POLICY), POLICY).equals(b)


def test_group_flows_merges_identical_five_tuples() -> None:
    t = flows(
        [
            {"src": AUX, "dst": MGMT, "dport": 22, "sport": 41000, "bytes": 10, "source": "pcap:a"},
            {"src": AUX, "dst": MGMT, "dport": 22, "sport": 41000, "bytes": 30, "source": "zeek:b"},
            {"src": W0, "dst": W1, "dport": 29500, "bytes": 5},
        ]
    )
    g = group_flows(classify(t, POLICY), POLICY).to_pylist()
    assert len(g) == 2
    ssh = g[0]
    assert (ssh["records"], ssh["bytes"], ssh["sources"]) == (2, 40, "pcap:a, zeek:b")
    assert (ssh["service"], ssh["admin"], ssh["outside"], ssh["job_port"]) == ("mgmt-ssh", True, False, False)
    assert (g[1]["service"], g[1]["admin"], g[1]["job_port"]) == (None, False, True)


def test_missing_parquet_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such flow file"):
        communication_matrix(tmp_path / "nope.parquet", POLICY)
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"x": [1]}), bad)
    with pytest.raises(InputError, match="not a ringfence flow file"):
        communication_matrix(bad, POLICY)
