"""``ringfence assess --jobs``: flows attributed to the scheduler's job and user at the time, named in findings;
a bad jobs file is a clear error (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ringfence.cli import main

POLICY = Path(__file__).resolve().parents[2] / "examples" / "lab-policy.yaml"
TS = 1_780_000_000  # 2026-05-28T20:26:40Z


def _conn(src: str, dst: str, dport: int, ts: float) -> str:
    return json.dumps({
        "ts": ts, "uid": f"C{dport}{int(ts)}", "id.orig_h": src, "id.orig_p": 40000, "id.resp_h": dst,
        "id.resp_p": dport, "proto": "tcp", "duration": 1.0, "orig_bytes": 100, "resp_bytes": 1000,
        "conn_state": "SF", "orig_pkts": 3, "orig_ip_bytes": 256, "resp_pkts": 3, "resp_ip_bytes": 1156,
    })


def _squeue(path: Path, start: int) -> Path:
    path.write_text(json.dumps({"meta": {"plugin": {"type": "openapi/v0.0.38"}}, "errors": [], "jobs": [
        {"job_id": 42, "user_name": "alice", "name": "train-a", "nodes": "worker-[0-1]", "job_state": "RUNNING",
         "start_time": start, "end_time": start + 86_400}]}))
    return path


def _run(tmp_path: Path, *jobs: str) -> tuple[int, dict[str, object]]:
    log = tmp_path / "conn.log"
    # worker-0 → aux on a collective port: a job member talking to a non-member
    log.write_text(_conn("10.77.1.10", "10.77.1.50", 29500, TS + 10) + "\n")
    out = tmp_path / "out"
    code = main(["assess", str(POLICY), "--captures", str(log), "-o", str(out), "-q", "--format", "json", *jobs])
    return code, json.loads((out / "report.json").read_text()) if (out / "report.json").exists() else {}


def _messages(report: dict[str, object]) -> list[str]:
    return [f["message"] for c in report["controls"] for f in c["findings"]  # type: ignore[attr-defined]
            if f["verdict"] == "fail"]


def test_findings_name_the_slurm_job_and_user_holding_the_node_then(tmp_path: Path) -> None:
    code, report = _run(tmp_path, "--jobs", str(_squeue(tmp_path / "squeue.json", TS)))
    assert code == 1
    named = [m for m in _messages(report) if "user alice" in m]
    assert named and all("node worker-0 (zone workload, train-a, user alice)" in m for m in named)


def test_a_job_that_started_after_the_flow_is_not_credited_with_it(tmp_path: Path) -> None:
    code, report = _run(tmp_path, "--jobs", str(_squeue(tmp_path / "squeue.json", TS + 60)))
    assert code == 1
    assert not [m for m in _messages(report) if "alice" in m]


def test_a_broken_jobs_file_is_exit_2_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "squeue.json"
    bad.write_text('{"jobs": [{"job_id": 1}]}')
    code, _ = _run(tmp_path, "--jobs", str(bad))
    assert code == 2
    assert f"{bad}: jobs[0]" in capsys.readouterr().err
