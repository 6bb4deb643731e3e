"""Slurm job records: squeue --json (21.08 and 22.05 real output, the 23.02+ shape), sacct --json (real 24.05,
the 22.05 dbv0.0.38 shape), jobcomp/filetxt (a real 22.05 line); hostile input gives JobsError, never a traceback."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringfence.jobs import JobFormat, JobsError, load_jobs
from ringfence.jobs.registry import detect
from ringfence.jobs.slurm import parse_jobcomp, parse_sacct_json, parse_squeue_json


def test_squeue_21_08_sample_keeps_the_running_job_open_and_skips_the_pending_one(samples: Path) -> None:
    spans = parse_squeue_json((samples / "slurm" / "rivos_squeue_out.json").read_bytes(), "squeue.json")
    assert [(s.job, s.user, s.nodes, s.name) for s in spans] == [("26515966", "bkd", ("cs75",), "job_name")]
    # end_time of a RUNNING job is its time limit, not an end
    assert spans[0].start == datetime.fromtimestamp(1684114921, UTC) and spans[0].end is None


def test_squeue_22_05_from_the_lab_expands_the_host_list(assets: Path) -> None:
    (span,) = parse_squeue_json((assets / "lab_squeue_22.05.8.json").read_bytes(), "lab.json")
    assert span.nodes == ("worker-0", "worker-1") and span.user == "root" and span.name == "train-a"
    assert span.end is None


def _v39(state: list[str], start: int, end: int, nodes: str = "gpu[01-02]") -> str:
    number = {"set": True, "infinite": False}
    return json.dumps({"meta": {"plugin": {"data_parser": "v0.0.39"}, "Slurm": {"version": {"major": 23}}},
                       "errors": [], "jobs": [{"job_id": 7, "user_name": "alice", "name": "llm", "nodes": nodes,
                                               "job_state": state, "start_time": {**number, "number": start},
                                               "end_time": {**number, "number": end}}]})


def test_squeue_23_02_layout_lists_and_set_numbers() -> None:
    (done,) = parse_squeue_json(_v39(["COMPLETED"], 1_800_000_000, 1_800_000_600), "s.json")
    assert done.nodes == ("gpu01", "gpu02") and done.end == datetime.fromtimestamp(1_800_000_600, UTC)
    (running,) = parse_squeue_json(_v39(["RUNNING", "COMPLETING"], 1_800_000_000, 1_800_086_400), "s.json")
    assert running.end is None


def test_sacct_24_05_sample(samples: Path) -> None:
    data = (samples / "slurm" / "slurmise_della_sacct_json_24.05.3.json").read_bytes()
    assert detect(data, "sacct.json") is JobFormat.SACCT
    (span,) = parse_sacct_json(data, "sacct.json")
    assert (span.job, span.user, span.nodes, span.end) == ("58976578", "juhyunp", ("della-k15g1",), None)
    assert span.start == datetime.fromtimestamp(1726484897, UTC)


def test_sacct_22_05_dbv0_0_38_shape_with_string_state() -> None:
    doc = {"meta": {"plugin": {"type": "openapi/dbv0.0.38"}}, "errors": [], "jobs": [
        {"job_id": 3, "user": "bob", "name": "ft", "nodes": "n[1-3]", "state": {"current": "COMPLETED"},
         "time": {"start": 1_800_000_000, "end": 1_800_003_600}},
        {"job_id": 4, "user": "bob", "nodes": "None assigned", "state": {"current": "PENDING"},
         "time": {"start": 0, "end": 0}}]}
    (span,) = parse_sacct_json(json.dumps(doc), "sacct.json")
    assert span.nodes == ("n1", "n2", "n3") and span.end - span.start == timedelta(hours=1)  # type: ignore[operator]


def test_jobcomp_line_recorded_on_the_lab(assets: Path) -> None:
    data = (assets / "lab_jobcomp_22.05.8.txt").read_bytes()
    assert detect(data, "jobcomp.txt") is JobFormat.JOBCOMP
    (span,) = parse_jobcomp(data, "jobcomp.txt")
    assert (span.job, span.user, span.nodes, span.name) == ("1", "root", ("worker-0", "worker-1"), "job-0")
    assert span.start == datetime(2026, 12, 1, 11, 56, 17, tzinfo=UTC)
    assert span.end == datetime(2026, 12, 1, 11, 56, 39, tzinfo=UTC)
    # times are the controller's local time: another zone shifts them
    (east,) = parse_jobcomp(data, "jobcomp.txt", tz=timezone(timedelta(hours=2)))
    assert east.start == datetime(2026, 12, 1, 9, 56, 17, tzinfo=UTC)


def test_jobcomp_name_with_spaces_and_a_cancelled_pending_job() -> None:
    text = ("JobId=9 UserId=eve(1001) Name=my big job JobState=COMPLETED StartTime=2026-12-01T10:00:00 "
            "EndTime=2026-12-01T11:00:00 NodeList=a,b NodeCnt=2\n\n"
            "JobId=10 UserId=eve(1001) Name=x JobState=CANCELLED StartTime=Unknown EndTime=2026-12-01T11:00:00 "
            "NodeList=(null) NodeCnt=0\n")
    (span,) = parse_jobcomp(text, "j.txt")
    assert span.name == "my big job" and span.nodes == ("a", "b") and span.user == "eve"


@pytest.mark.parametrize(
    ("text", "where", "says"),
    [
        ('{"jobs": [', "s.json:1@10", "not JSON"),
        ('{"meta": {}, "jobs": [{"job_id": 1}]}', "s.json: jobs[0]", "squeue layout"),
        ('{"jobs": [{"job_id": 1, "user_name": "a", "nodes": "n[1-", "job_state": "RUNNING", "start_time": 5}]}',
         "s.json: jobs[0].nodes", "unbalanced"),
        ('{"jobs": [{"job_id": true, "user_name": "a", "nodes": "n1", "job_state": "RUNNING", "start_time": 5}]}',
         "s.json: jobs[0].job_id", "expected int"),
        ('{"jobs": [{"job_id": 1, "user_name": "a", "nodes": "n1", "job_state": "RUNNING", "start_time": -5}]}',
         "s.json: jobs[0].start_time", "epoch"),
        ('{"errors": [{"error": "bad"}], "jobs": []}', "s.json: errors", "reported errors"),
        ('{"nodes": []}', "s.json", "no 'jobs' list"),
    ],
)
def test_squeue_hostile_input_names_the_place(text: str, where: str, says: str) -> None:
    with pytest.raises(JobsError) as err:
        parse_squeue_json(text, "s.json")
    assert err.value.where == where and says in err.value.message


def test_sacct_of_an_unknown_layout_says_which_release() -> None:
    doc = {"meta": {"Slurm": {"version": {"major": 30, "minor": 1, "micro": 0}}}, "jobs": [{"job_id": 1}]}
    with pytest.raises(JobsError, match=r"30\.1\.0"):
        parse_sacct_json(json.dumps(doc), "sacct.json")


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("JobId=1 UserId=a StartTime=2026-12-01T10:00:00 EndTime=2026-12-01T09:00:00 NodeList=n1", "j.txt:1"),
        ("\nJobId=1 UserId=a StartTime=yesterday EndTime=2026-12-01T09:00:00 NodeList=n1", "j.txt:2: StartTime"),
        ("JobId=1 UserId=a NodeList=n1", "j.txt:1"),
        ("garbage here", "j.txt:1"),
    ],
)
def test_jobcomp_hostile_lines_name_the_line(text: str, where: str) -> None:
    with pytest.raises(JobsError) as err:
        parse_jobcomp(text, "j.txt")
    assert err.value.where == where


def test_jobcomp_refuses_non_utf8_naming_the_line() -> None:
    with pytest.raises(JobsError) as err:
        parse_jobcomp(b"JobId=1 UserId=a\nJobId=\xff\n", "j.txt")
    assert err.value.where == "j.txt:2"


def test_load_jobs_reads_a_missing_file_as_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(JobsError, match="cannot read"):
        load_jobs([tmp_path / "nope.json"])


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=400))
def test_any_bytes_give_spans_or_a_jobs_error(data: bytes) -> None:
    for reader in (parse_squeue_json, parse_sacct_json, parse_jobcomp):
        try:
            reader(data, "fuzz")
        except JobsError:
            pass


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=0, max_value=4000))
def test_truncated_lab_squeue_gives_a_jobs_error(cut: int) -> None:
    data = (Path(__file__).resolve().parents[1] / "assets" / "jobs" / "lab_squeue_22.05.8.json").read_bytes()
    if cut >= len(data) - 2:
        return
    with pytest.raises(JobsError):
        parse_squeue_json(data[:cut], "cut.json")
