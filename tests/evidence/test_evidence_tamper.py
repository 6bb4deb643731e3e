"""Tampering after the fact is detected, at the right record, with the right reason."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ringfence.evidence import (
    ChainHead,
    EvidenceStore,
    StoreDamaged,
    TamperReason,
    canonical_json,
)
from ringfence.evidence.interface import record_hash

# Records 1-3 notes, 4 an artifact, 5-6 findings.
_ARTIFACT_SEQ = 4


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("pristine") / "ev"
    store = EvidenceStore.open(path)
    for i in range(1, 4):
        store.append("note", "test", f"note {i}", {"i": i, "text": f"record number {i}"})
    store.add_artifact(b"capture bytes\n", "lab.pcap")
    for i in range(5, 7):
        store.append("finding", "controls.zones", f"flow {i}", {"verdict": "pass", "i": i})
    assert store.verify().ok
    return path


@pytest.fixture
def store(pristine: Path, tmp_path: Path) -> EvidenceStore:
    copy = tmp_path / "ev"
    shutil.copytree(pristine, copy)
    return EvidenceStore.open(copy, create=False)


def _lines(store: EvidenceStore) -> list[bytes]:
    return store.log_path.read_bytes().splitlines(keepends=True)


def _write(store: EvidenceStore, lines: list[bytes]) -> None:
    store.log_path.write_bytes(b"".join(lines))


def _rehash(obj: dict[str, object]) -> bytes:
    body = {k: v for k, v in obj.items() if k != "hash"}
    obj["hash"] = record_hash(body)
    return canonical_json(obj) + b"\n"


def _expect(store: EvidenceStore, seq: int, reason: TamperReason, anchor: ChainHead | None = None) -> None:
    report = store.verify(anchor=anchor)
    assert not report.ok
    assert (report.bad_seq, report.reason) == (seq, reason), report.summary()
    assert report.records == seq - 1 or reason in (
        TamperReason.HEAD_MISMATCH,
        TamperReason.ANCHOR_MISMATCH,
        TamperReason.UNSIGNED,
    )


def test_edited_byte_in_data(store: EvidenceStore) -> None:
    lines = _lines(store)
    lines[2] = lines[2].replace(b"record number 3", b"record number 8")
    _write(store, lines)
    _expect(store, 3, TamperReason.EDITED)


def test_deleted_middle_record(store: EvidenceStore) -> None:
    lines = _lines(store)
    del lines[2]
    _write(store, lines)
    _expect(store, 3, TamperReason.DELETED)


def test_swapped_records(store: EvidenceStore) -> None:
    lines = _lines(store)
    lines[2], lines[3] = lines[3], lines[2]
    _write(store, lines)
    _expect(store, 3, TamperReason.REORDERED)


def test_truncated_mid_line(store: EvidenceStore) -> None:
    # The head says seq 6 was committed: a cut inside it is truncation, not an interrupted append.
    data = store.log_path.read_bytes()
    store.log_path.write_bytes(data[: len(data) - 40])
    _expect(store, 6, TamperReason.TRUNCATED)


def test_truncated_at_a_line_boundary_is_caught_by_the_head(store: EvidenceStore) -> None:
    _write(store, _lines(store)[:4])
    _expect(store, 5, TamperReason.TRUNCATED)


def test_altered_blob(store: EvidenceStore) -> None:
    blob = next(store.blob_dir.iterdir())
    blob.chmod(0o644)
    blob.write_bytes(b"capture bytes, doctored\n")
    _expect(store, _ARTIFACT_SEQ, TamperReason.BLOB_ALTERED)
    assert store.verify(check_blobs=False).ok


def test_missing_blob(store: EvidenceStore) -> None:
    next(store.blob_dir.iterdir()).unlink()
    _expect(store, _ARTIFACT_SEQ, TamperReason.BLOB_MISSING)


def test_record_replaced_with_a_recomputed_hash_breaks_the_chain(store: EvidenceStore) -> None:
    lines = _lines(store)
    obj = json.loads(lines[2])
    obj["data"]["text"] = "a convenient rewrite"
    lines[2] = _rehash(obj)
    _write(store, lines)
    _expect(store, 4, TamperReason.BROKEN_CHAIN)


def test_whole_tail_rewritten_is_caught_by_head_then_by_the_signature_and_the_anchor(store: EvidenceStore) -> None:
    anchor = store.head()
    lines = _lines(store)
    prev = json.loads(lines[1])["hash"]
    for i in range(2, len(lines)):  # an attacker with write access rewrites records 3… consistently
        obj = json.loads(lines[i])
        obj["prev"] = prev
        if obj["seq"] == 3:
            obj["data"]["text"] = "rewritten history"
        lines[i] = _rehash(obj)
        prev = obj["hash"]
    _write(store, lines)
    _expect(store, 6, TamperReason.HEAD_MISMATCH)
    store.head_path.write_text(f"6:{prev}\n")  # ... and the head file too: the signed checkpoint still tells
    _expect(store, 6, TamperReason.UNSIGNED)
    _expect(store, 6, TamperReason.ANCHOR_MISMATCH, anchor=anchor)  # the exported head tells too


def test_anchor_beyond_the_chain_is_truncation(store: EvidenceStore) -> None:
    _expect(store, 7, TamperReason.TRUNCATED, anchor=ChainHead(9, "0" * 64))
    assert store.verify(anchor=ChainHead(2, json.loads(_lines(store)[1])["hash"])).ok


def test_garbage_line(store: EvidenceStore) -> None:
    lines = _lines(store)
    lines.insert(3, b"\x00\xffnot json at all\n")
    _write(store, lines)
    _expect(store, 4, TamperReason.MALFORMED)


def test_non_canonical_whitespace_is_an_edit(store: EvidenceStore) -> None:
    lines = _lines(store)
    lines[1] = lines[1].replace(b'"kind":', b'"kind": ', 1)
    _write(store, lines)
    _expect(store, 2, TamperReason.EDITED)


def test_missing_head_file(store: EvidenceStore) -> None:
    store.head_path.unlink()
    _expect(store, 7, TamperReason.HEAD_MISMATCH)


def test_append_refuses_an_edited_last_record(store: EvidenceStore) -> None:
    lines = _lines(store)
    lines[-1] = lines[-1].replace(b'"pass"', b'"fail"')
    _write(store, lines)
    with pytest.raises(StoreDamaged, match="edited"):
        store.append("note", "test", "on top of a lie")
    before = store.log_path.read_bytes()
    with pytest.raises(StoreDamaged, match="edited"):
        store.repair()  # repair never touches complete records, and never signs over an edited one
    assert store.log_path.read_bytes() == before
