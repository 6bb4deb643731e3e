"""``ringfence evidence …`` in-process: exit codes 0 ok / 1 tampered / 2 unreadable, and the outputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ringfence.cli import main
from ringfence.evidence import EvidenceStore


@pytest.fixture
def store(tmp_path: Path) -> EvidenceStore:
    s = EvidenceStore.open(tmp_path / "ev")
    s.append("observation", "observe.pcap", "capture lab.pcap", {"flows": 2})
    s.add_artifact(b"blob", "lab.pcap")
    return s


def test_verify_ok_and_json(store: EvidenceStore, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["evidence", "verify", "--store", str(store.path)]) == 0
    assert capsys.readouterr().out.startswith(f"ok: 2 records, chain head {store.head()}")
    assert main(["evidence", "verify", "--store", str(store.path), "--json", "--anchor", str(store.head())]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc == {"ok": True, "records": 2, "head": str(store.head()), "bad_seq": None, "reason": None, "detail": ""}


def test_verify_tampered_exits_1(store: EvidenceStore, capsys: pytest.CaptureFixture[str]) -> None:
    data = store.log_path.read_bytes().replace(b'"flows":2', b'"flows":3')
    store.log_path.write_bytes(data)
    assert main(["evidence", "verify", "--store", str(store.path)]) == 1
    assert "TAMPERED at seq 1: edited" in capsys.readouterr().out


def test_verify_unreadable_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["evidence", "verify", "--store", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert "no such evidence store" in err and "Traceback" not in err
    assert not (tmp_path / "nowhere").exists()


def test_verify_bad_anchor_exits_2(store: EvidenceStore, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["evidence", "verify", "--store", str(store.path), "--anchor", "nope"]) == 2
    assert "--anchor" in capsys.readouterr().err


def test_default_store_from_environment(
    store: EvidenceStore, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RINGFENCE_EVIDENCE", str(store.path))
    assert main(["evidence", "head"]) == 0
    assert capsys.readouterr().out.strip() == str(store.head())


def test_show_lists_and_shows_one(store: EvidenceStore, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["evidence", "show", "--store", str(store.path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    ids = [r.id for r in store.records()]
    assert [line.split()[0] for line in lines] == ids
    assert main(["evidence", "show", "--store", str(store.path), ids[0]]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["id"] == ids[0] and shown["data"] == {"flows": 2}
    assert main(["evidence", "show", "--store", str(store.path), "ev-000009-deadbeef"]) == 2


def test_export_is_byte_for_byte(store: EvidenceStore, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "export.jsonl"
    assert main(["evidence", "export", "--store", str(store.path), "-o", str(out)]) == 0
    assert out.read_bytes() == store.log_path.read_bytes()
    assert f"exported 2 records; chain head {store.head()}" in capsys.readouterr().err
    assert main(["evidence", "export", "--store", str(store.path)]) == 0
    assert capsys.readouterr().out.encode() == store.log_path.read_bytes()


def test_repair(store: EvidenceStore, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["evidence", "repair", "--store", str(store.path)]) == 0
    assert "nothing to repair" in capsys.readouterr().out
    with store.log_path.open("ab") as fh:
        fh.write(b'{"half')
    assert main(["evidence", "verify", "--store", str(store.path)]) == 1
    assert main(["evidence", "repair", "--store", str(store.path)]) == 0
    assert "recorded ev-000003-" in capsys.readouterr().out
    assert main(["evidence", "verify", "--store", str(store.path)]) == 0
