"""Hostile edits of the store (issue 11 causes 16–18): repair never hides them, verify stays bounded."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ringfence.cli import main
from ringfence.evidence import EvidenceStore, StoreDamaged, TamperReason, canonical_json
from ringfence.evidence.checkpoint import CHECKPOINT, load_signer
from ringfence.evidence.interface import ChainHead, record_hash
from rss_kit import PEAK_KB

N = 30



@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("hostile") / "ev"
    store = EvidenceStore.open(path)
    for i in range(1, N + 1):
        store.append("finding", "controls.zones", f"flow {i}", {"verdict": "pass", "i": i, "pad": "x" * 40})
    assert store.verify().ok
    return path


@pytest.fixture
def store(pristine: Path, tmp_path: Path) -> EvidenceStore:
    copy = tmp_path / "ev"
    shutil.copytree(pristine, copy)
    return EvidenceStore.open(copy, create=False)


def _lines(store: EvidenceStore) -> list[bytes]:
    return store.log_path.read_bytes().splitlines(keepends=True)


def _forge(prev: str, seq: int, text: str) -> tuple[bytes, str]:
    body = {
        "seq": seq,
        "time": "2026-12-01T00:00:00.000000Z",
        "kind": "finding",
        "source": "controls.zones",
        "subject": text,
        "data": {"verdict": "pass"},
        "inputs": {},
        "prev": prev,
    }
    digest = record_hash(body)
    return canonical_json({**body, "hash": digest}) + b"\n", digest


def test_cut_inside_the_file_is_truncated_and_repair_refuses(store: EvidenceStore) -> None:
    lines = _lines(store)
    cut = sum(len(x) for x in lines[:20]) + 30  # 30 bytes into record 21 of 30; the head says 30
    with store.log_path.open("r+b") as fh:
        fh.truncate(cut)
    report = store.verify()
    assert (report.ok, report.reason, report.bad_seq) == (False, TamperReason.TRUNCATED, 21)
    with pytest.raises(StoreDamaged, match="says seq 30 was committed"):
        store.repair()
    assert store.log_path.stat().st_size == cut  # nothing removed
    assert store.verify().reason is TamperReason.TRUNCATED


def test_cut_and_head_rewritten_is_still_caught_by_the_signed_checkpoint(store: EvidenceStore) -> None:
    lines = _lines(store)
    with store.log_path.open("r+b") as fh:
        fh.truncate(sum(len(x) for x in lines[:20]) + 30)
    store.head_path.write_text(f"20:{json.loads(lines[19])['hash']}\n")
    with pytest.raises(StoreDamaged, match="signed checkpoint says seq 30"):
        store.repair()
    assert store.verify().reason is TamperReason.TRUNCATED


def test_removing_only_the_final_newline_keeps_the_complete_record(store: EvidenceStore) -> None:
    data = store.log_path.read_bytes()
    store.log_path.write_bytes(data[:-1])
    assert not store.verify().ok
    with pytest.raises(StoreDamaged, match="complete record seq 30 without its newline|says seq 30"):
        store.repair()
    assert store.log_path.read_bytes() == data[:-1]


def test_crash_fragment_is_still_repairable(store: EvidenceStore) -> None:
    with store.log_path.open("ab") as fh:
        fh.write(b'{"data":{"verdict":"pa')  # what a kill mid-append leaves: head and checkpoint say 30
    assert store.verify().reason is TamperReason.PARTIAL
    note = store.repair()
    assert note is not None and store.verify().ok and store.verify().records == N + 1


def test_appended_forgery_is_detected_without_an_anchor(store: EvidenceStore) -> None:
    last = json.loads(_lines(store)[-1])
    line, digest = _forge(last["hash"], N + 1, "forged")
    with store.log_path.open("ab") as fh:
        fh.write(line)
    report = store.verify()
    assert (report.ok, report.reason, report.bad_seq) == (False, TamperReason.UNSIGNED, N + 1)
    store.head_path.write_text(f"{N + 1}:{digest}\n")  # with the head updated too
    assert store.verify().reason is TamperReason.UNSIGNED


def test_deleted_last_record_with_head_rewritten_is_detected(store: EvidenceStore) -> None:
    lines = _lines(store)
    store.log_path.write_bytes(b"".join(lines[:-1]))
    store.head_path.write_text(f"{N - 1}:{json.loads(lines[-2])['hash']}\n")
    report = store.verify()
    assert (report.ok, report.reason) == (False, TamperReason.TRUNCATED)


def test_checkpoint_forged_with_another_key_or_removed_fails(store: EvidenceStore, tmp_path: Path) -> None:
    other = load_signer(tmp_path / "attacker.key")
    (store.path / CHECKPOINT).write_bytes(other.sign(store.head()))
    assert store.verify().reason is TamperReason.UNSIGNED
    (store.path / CHECKPOINT).unlink()
    report = store.verify()
    assert (report.ok, report.reason) == (False, TamperReason.UNSIGNED) and "missing" in report.detail


def test_verify_without_any_key_is_not_a_pass(store: EvidenceStore, tmp_path: Path) -> None:
    keyless = EvidenceStore.open(store.path, create=False, key=tmp_path / "absent.key")
    report = keyless.verify()
    assert not report.ok and "no verification key" in report.detail
    pub = tmp_path / "pub.hex"
    pub.write_text(store.signer().public_key.public_bytes_raw().hex())
    assert keyless.verify(public_key=pub).ok


def test_verify_of_a_huge_append_is_bounded(store: EvidenceStore, tmp_path: Path) -> None:
    with store.log_path.open("r+b") as fh:
        fh.truncate(store.log_path.stat().st_size + (1500 << 20))  # `truncate -s +1500M`: sparse zeros
    code = (
        "import resource, sys\n"
        "from ringfence.evidence import EvidenceStore\n"
        f"r = EvidenceStore.open({str(store.path)!r}, create=False).verify()\n"
        f"print(r.ok, r.reason, {PEAK_KB})\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=600, env=dict(os.environ)
    )
    ok, reason, rss_kb = out.stdout.split()
    assert ok == "False" and reason == "malformed"
    assert int(rss_kb) < 400_000  # the line is read at most 64 MiB at a time
    with pytest.raises(StoreDamaged, match="no newline"):
        store.repair()
    assert not any(p.stat().st_size > 1 << 20 for p in store.blob_dir.iterdir())  # no 1.5 GB blob


def test_cli_repair_refusal_is_exit_2(store: EvidenceStore, capsys: pytest.CaptureFixture[str]) -> None:
    with store.log_path.open("r+b") as fh:
        fh.truncate(store.log_path.stat().st_size - 10)
    assert main(["evidence", "repair", "--store", str(store.path)]) == 2
    assert "committed" in capsys.readouterr().err


def test_anchor_still_works_with_a_checkpoint(store: EvidenceStore) -> None:
    head = store.head()
    assert store.verify(anchor=ChainHead(head.seq, head.hash)).ok
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss > 0


def test_cli_pubkey_then_verify_with_it(
    store: EvidenceStore, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["evidence", "pubkey", "--store", str(store.path)]) == 0
    pub = tmp_path / "pub"
    pub.write_text(capsys.readouterr().out)
    assert main(["evidence", "verify", "--store", str(store.path), "--pubkey", str(pub)]) == 0
    other = tmp_path / "other.key"
    load_signer(other)
    assert main(["evidence", "verify", "--store", str(store.path), "--pubkey", str(other)]) == 1


def test_honest_append_refuses_to_sign_over_a_forged_one(store: EvidenceStore) -> None:
    last = json.loads(_lines(store)[-1])
    line, digest = _forge(last["hash"], N + 1, "forged")
    with store.log_path.open("ab") as fh:
        fh.write(line)
    store.head_path.write_text(f"{N + 1}:{digest}\n")
    with pytest.raises(StoreDamaged, match="refusing to sign on top of it"):
        store.append("note", "test", "honest", {})
    assert store.verify().reason is TamperReason.UNSIGNED  # still reported, not laundered


def test_repair_adopts_records_a_crash_left_unsigned_and_says_so(store: EvidenceStore) -> None:
    before = (store.path / CHECKPOINT).read_bytes()
    store.append("note", "test", "signed late", {})
    (store.path / CHECKPOINT).write_bytes(before)  # as if the process died before signing the append
    assert store.verify().reason is TamperReason.UNSIGNED
    note_id = store.repair()
    assert note_id is not None and store.verify().ok
    note = store.get(note_id)
    assert note.data["adopted_unsigned"]["from_seq"] == N + 1 and note.data["adopted_unsigned"]["to_seq"] == N + 1


def test_repair_refuses_to_adopt_a_rewritten_tail(store: EvidenceStore) -> None:
    lines = _lines(store)
    prev = json.loads(lines[-2])["hash"]
    forged, digest = _forge(prev, N, "rewritten")
    store.log_path.write_bytes(b"".join(lines[:-1]) + forged)
    store.head_path.write_text(f"{N}:{digest}\n")
    with pytest.raises(StoreDamaged, match="not on the chain"):
        store.repair()
    assert store.verify().reason is TamperReason.UNSIGNED


def test_store_from_before_checkpoints_is_adopted_on_the_record(store: EvidenceStore) -> None:
    (store.path / CHECKPOINT).unlink()  # as a store written before signed checkpoints existed
    assert store.verify().reason is TamperReason.UNSIGNED
    new_id = store.append("note", "test", "after the upgrade", {})
    records = list(store.records())
    note = records[-2]
    assert note.data["adopted_unsigned"] == {"from_seq": 1, "to_seq": N, "checkpoint": "none"}
    assert records[-1].id == new_id and store.verify().ok
