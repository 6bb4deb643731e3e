"""The evidence store: appends, ids, artifacts, durability after a crash, concurrent appenders."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from ringfence.evidence import (
    GENESIS,
    ChainHead,
    EvidenceError,
    EvidenceStore,
    NewRecord,
    RecordKind,
    StoreDamaged,
    TamperReason,
    UnknownEvidence,
    sha256_bytes,
)

_SRC = str(Path(__file__).resolve().parents[2] / "src")


def _fixed_clock() -> datetime:
    return datetime(2025, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def test_append_returns_stable_ids_and_records_round_trip(tmp_path: Path) -> None:
    store = EvidenceStore.open(tmp_path / "ev", clock=_fixed_clock)
    digest = sha256_bytes(b"capture")
    first = store.append("observation", "observe.pcap", "capture lab.pcap", {"flows": 3}, {"lab.pcap": digest})
    second = store.append(RecordKind.FINDING, "controls.egress", "node aux", {"verdict": "fail", "x": [1.5, None]})
    assert first.startswith("ev-000001-") and second.startswith("ev-000002-")
    records = list(store.records())
    assert [r.id for r in records] == [first, second]
    assert records[0].prev == GENESIS and records[1].prev == records[0].hash
    assert records[0].inputs == {"lab.pcap": digest}
    assert records[0].time == "2025-01-02T03:04:05.678901Z"
    got = store.get(second)
    assert got.kind is RecordKind.FINDING and got.data == {"verdict": "fail", "x": [1.5, None]}
    assert store.head() == ChainHead(2, records[1].hash)
    assert (tmp_path / "ev" / "head").read_text() == f"2:{records[1].hash}\n"
    report = store.verify()
    assert report.ok and report.records == 2 and report.head == store.head()


def test_same_appends_give_identical_bytes(tmp_path: Path) -> None:
    for name in ("a", "b"):
        store = EvidenceStore.open(tmp_path / name, clock=_fixed_clock)
        store.append("note", "test", "s", {"b": 1, "a": "é<>"})
    assert (tmp_path / "a" / "evidence.jsonl").read_bytes() == (tmp_path / "b" / "evidence.jsonl").read_bytes()


def test_bad_arguments_are_refused_before_writing(tmp_path: Path) -> None:
    store = EvidenceStore.open(tmp_path / "ev")
    with pytest.raises(ValueError):
        store.append("rumour", "test", "s")
    with pytest.raises(ValueError, match="finite"):
        store.append("note", "test", "s", {"x": float("nan")})
    with pytest.raises(ValueError, match="not a string"):
        store.append("note", "test", "s", {1: "int key"})
    with pytest.raises(ValueError, match="sha256"):
        store.append("note", "test", "s", None, {"input": "not-a-digest"})
    with pytest.raises(ValueError, match="source"):
        store.append("note", "", "s")
    assert store.head() == ChainHead(0, GENESIS)
    assert store.verify().ok


def test_get_unknown_and_malformed_ids(tmp_path: Path) -> None:
    store = EvidenceStore.open(tmp_path / "ev")
    ev = store.append("note", "test", "s")
    with pytest.raises(UnknownEvidence):
        store.get("ev-000002-00000000")
    with pytest.raises(UnknownEvidence):
        store.get(ev[:-1] + ("0" if ev[-1] != "0" else "1"))
    with pytest.raises(UnknownEvidence, match="not an evidence id"):
        store.get("42")


def test_open_without_create_refuses_missing_or_foreign_directory(tmp_path: Path) -> None:
    with pytest.raises(EvidenceError, match="no such evidence store"):
        EvidenceStore.open(tmp_path / "missing", create=False)
    (tmp_path / "other").mkdir()
    with pytest.raises(EvidenceError, match="not an evidence store"):
        EvidenceStore.open(tmp_path / "other", create=False)
    assert not (tmp_path / "missing").exists()


def test_artifacts_are_content_addressed_and_recorded(tmp_path: Path) -> None:
    store = EvidenceStore.open(tmp_path / "ev")
    src = tmp_path / "ruleset.nft"
    src.write_bytes(b"table inet ringfence {}\n")
    digest = sha256_bytes(src.read_bytes())
    ev_file = store.add_artifact(src, "ruleset.nft", source="enforce.nftables")
    ev_bytes = store.add_artifact(b"table inet ringfence {}\n", "again")
    blob = store.blob_path(digest)
    assert blob.read_bytes() == src.read_bytes()
    assert not os.access(blob, os.W_OK) or os.geteuid() == 0  # read-only (root may write anyway)
    assert blob.stat().st_mode & 0o222 == 0
    rec = store.get(ev_file)
    assert rec.kind is RecordKind.ARTIFACT and rec.source == "enforce.nftables"
    assert rec.data == {"name": "ruleset.nft", "blob": digest, "size": 24, "origin": str(src)}
    assert rec.inputs == {"ruleset.nft": digest}
    assert store.get(ev_bytes).data["blob"] == digest
    assert sorted(p.name for p in store.blob_dir.iterdir()) == [digest]  # no temp files left behind
    with pytest.raises(EvidenceError, match="cannot read artifact"):
        store.add_artifact(tmp_path / "absent", "absent")
    assert store.verify().ok


def test_partial_last_line_blocks_appends_until_repaired(tmp_path: Path) -> None:
    store = EvidenceStore.open(tmp_path / "ev")
    store.append("note", "test", "one")
    good_head = store.head()
    fragment = b'{"data":{"half":'
    with store.log_path.open("ab") as fh:  # what a crash in the middle of an append leaves
        fh.write(fragment)
    report = store.verify()
    assert not report.ok and report.reason is TamperReason.PARTIAL and report.bad_seq == 2
    assert store.head() == good_head  # the head ignores the uncommitted line
    assert [r.subject for r in store.records()] == ["one"]
    with pytest.raises(StoreDamaged, match="incomplete"):
        store.append("note", "test", "two")
    note_id = store.repair()
    assert note_id is not None and note_id.startswith("ev-000002-")
    note = store.get(note_id)
    assert note.kind is RecordKind.NOTE and note.data["removed_bytes"] == len(fragment)
    assert store.blob_path(note.data["blob"]).read_bytes() == fragment  # nothing is lost
    assert store.repair() is None
    store.append("note", "test", "three")
    assert store.verify().ok


def test_head_file_one_behind_is_accepted(tmp_path: Path) -> None:
    # A crash after the record's fsync but before the head update leaves the head one behind.
    store = EvidenceStore.open(tmp_path / "ev")
    store.append("note", "test", "one")
    behind = store.head_path.read_bytes()
    store.append("note", "test", "two")
    store.head_path.write_bytes(behind)
    assert store.verify().ok


_APPENDER = """
import sys
sys.path.insert(0, sys.argv[1])
from ringfence.evidence import EvidenceStore
store = EvidenceStore.open(sys.argv[2])
tag, n = sys.argv[3], int(sys.argv[4])
print("ready", flush=True)
i = 0
while n < 0 or i < n:
    store.append("observation", "test." + tag, f"{tag} {i}", {"i": i, "pad": "x" * 2000})
    i += 1
"""


def _spawn(store: Path, tag: str, n: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", _APPENDER, _SRC, str(store), tag, str(n)], stdout=subprocess.PIPE)


def test_concurrent_appends_from_two_processes(tmp_path: Path) -> None:
    store_dir = tmp_path / "ev"
    EvidenceStore.open(store_dir)
    with _spawn(store_dir, "a", 100) as a, _spawn(store_dir, "b", 100) as b:
        assert a.wait(timeout=60) == 0 and b.wait(timeout=60) == 0
    store = EvidenceStore.open(store_dir, create=False)
    report = store.verify()
    assert report.ok and report.records == 200
    for tag in ("a", "b"):
        mine = [r.data["i"] for r in store.records() if r.source == f"test.{tag}"]
        assert mine == list(range(100))  # each writer's records in its own order, none lost


def test_killed_appender_leaves_a_verifiable_or_repairable_store(tmp_path: Path) -> None:
    store_dir = tmp_path / "ev"
    with _spawn(store_dir, "k", -1) as proc:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        time.sleep(0.3)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    store = EvidenceStore.open(store_dir, create=False)
    report = store.verify()
    # Killed mid-append (partial), or between the append and its signature (unsigned): both repairable.
    assert report.ok or report.reason in (TamperReason.PARTIAL, TamperReason.TRUNCATED, TamperReason.UNSIGNED)
    if report.reason in (TamperReason.PARTIAL, TamperReason.UNSIGNED):
        store.repair()
    records = report.records
    assert records > 0
    store.append("note", "test", "after the crash")
    final = store.verify()
    assert final.ok and final.records >= records + 1


def test_records_refuse_a_malformed_complete_line(tmp_path: Path) -> None:
    store = EvidenceStore.open(tmp_path / "ev")
    store.append("note", "test", "one")
    with store.log_path.open("ab") as fh:
        fh.write(json.dumps({"not": "a record"}).encode() + b"\n")
    with pytest.raises(StoreDamaged, match=r"evidence\.jsonl:2"):
        list(store.records())


def test_record_time_is_utc_and_clock_must_be_aware(tmp_path: Path) -> None:
    store = EvidenceStore.open(tmp_path / "ev", clock=lambda: datetime(2025, 1, 1))
    with pytest.raises(ValueError, match="timezone"):
        store.append("note", "test", "s")
    plus_two = timezone(timedelta(hours=2))
    store2 = EvidenceStore.open(tmp_path / "ev2", clock=lambda: datetime(2025, 1, 1, 2, tzinfo=plus_two))
    assert store2.get(store2.append("note", "test", "s")).time == "2025-01-01T00:00:00.000000Z"


def test_append_many_is_all_or_nothing_and_chains(tmp_path: Path) -> None:
    store = EvidenceStore.open(tmp_path / "ev")
    store.append("note", "test", "first")
    good = [NewRecord(RecordKind.FINDING, "controls.zones", f"flow {i}", {"i": i}) for i in range(3)]
    with pytest.raises(ValueError):
        store.append_many([*good, NewRecord(RecordKind.FINDING, "controls.zones", "bad", {"x": float("inf")})])
    assert store.head().seq == 1
    ids = store.append_many(good)
    assert [i.split("-")[1] for i in ids] == ["000002", "000003", "000004"]
    assert [store.get(i).data for i in ids] == [{"i": 0}, {"i": 1}, {"i": 2}]
    assert store.append_many([]) == []
    assert store.verify().ok and store.head().seq == 4


def test_removed_log_is_reported_not_recreated(tmp_path: Path) -> None:
    store = EvidenceStore.open(tmp_path / "ev")
    store.append("note", "test", "one")
    store.log_path.unlink()
    reopened = EvidenceStore.open(tmp_path / "ev")  # create=True must not paper over the removal
    assert not reopened.log_path.exists()
    report = reopened.verify()
    assert (report.ok, report.bad_seq, report.reason) == (False, 1, TamperReason.TRUNCATED)
    with pytest.raises(EvidenceError, match="cannot open"):
        reopened.append("note", "test", "two")


def test_unwritable_store_is_a_clear_error(tmp_path: Path) -> None:
    store = EvidenceStore.open(tmp_path / "ev")
    store.append("note", "test", "one")
    (tmp_path / "ev" / ".lock").unlink()
    (tmp_path / "ev" / ".lock").mkdir()  # cannot be opened as a file, even by root
    with pytest.raises(EvidenceError, match="cannot lock"):
        store.append("note", "test", "two")
    with pytest.raises(EvidenceError, match="cannot"):
        store.verify()
