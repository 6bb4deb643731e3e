"""One record: an assessment's store holds its flows, its facts files (bytes and sha256) and its clock, so
``assess POLICY --evidence STORE`` reproduces report.json; every evidence id a report cites resolves there."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from ringfence.cli import main
from ringfence.controls.interface import ProbeResult
from ringfence.evidence import EvidenceStore, sha256_file
from ringfence.facts.changes import changes_document
from ringfence.facts.probes import probes_document

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "examples" / "lab-policy.yaml"
SHIPPED = ROOT / "examples" / "lab-as-found.pcap"
FOREIGN = "ev-000007-0badc0de"  # an id of the probe run's own store, not the assessment's


def _facts(tmp_path: Path) -> list[str]:
    now = datetime.now(UTC)
    probes = tmp_path / "probes.json"
    probes.write_text(json.dumps(probes_document(
        (ProbeResult("aux", "mgmt:22", "tcp", 22, "deny", "timeout", True, "counter", (FOREIGN,), "drop"),),
        target="lab:x", evidence=FOREIGN, taken=now)))
    change = {"id": "ev-000003-abcdef01", "evidence": "ev-000003-abcdef01", "time": now.isoformat(),
              "applied_at": now.isoformat(), "source": "enforce.apply", "action": "apply", "target": "lab:x",
              "approved_by": "cab@lab", "verified": True, "verified_by": FOREIGN}
    changes = tmp_path / "changes.json"
    changes.write_text(json.dumps(changes_document([change], target="lab:x", taken=now)))
    return ["--probes", str(probes), "--changes", str(changes)]


def _ids(report: dict[str, Any]) -> set[str]:
    return {ev for c in report["controls"] for f in c["findings"] for ev in f["evidence"]}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("record")
    store = tmp / "evidence"
    code = main(["assess", str(POLICY), "--captures", str(SHIPPED), "-o", str(tmp / "out"), "--store", str(store),
                 "-q", *_facts(tmp)])
    assert code == 1
    return tmp, store, json.loads((tmp / "out" / "report.json").read_text())


def test_every_cited_evidence_id_resolves_in_the_named_store(
    recorded: tuple[Path, Path, dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    _, store, report = recorded
    assert report["evidence"]["store"] == str(store)
    ids = _ids(report)
    assert ids and FOREIGN not in ids
    for ev in sorted(ids):
        assert main(["evidence", "show", ev, "--store", str(store)]) == 0, ev
    capsys.readouterr()


def test_facts_files_are_kept_with_their_sha256(recorded: tuple[Path, Path, dict[str, Any]]) -> None:
    tmp, store, _ = recorded
    records = list(EvidenceStore.open(store, create=False).records())
    artifacts = {r.subject: r.inputs for r in records if r.source.startswith("facts:") and r.kind.value == "artifact"}
    assert artifacts == {"probes.json": {"probes.json": sha256_file(tmp / "probes.json")},
                         "changes.json": {"changes.json": sha256_file(tmp / "changes.json")}}


def test_the_store_alone_reproduces_the_report(recorded: tuple[Path, Path, dict[str, Any]]) -> None:
    tmp, store, report = recorded
    head_before = EvidenceStore.open(store, create=False).head()
    code = main(["assess", str(POLICY), "--evidence", str(store), "-o", str(tmp / "again"), "-q"])
    assert code == 1
    again = json.loads((tmp / "again" / "report.json").read_text())
    assert again.pop("generated") and report.get("generated")
    assert again == {k: v for k, v in report.items() if k != "generated"}
    text = (tmp / "again" / "report.json").read_bytes()
    original = (tmp / "out" / "report.json").read_bytes()
    strip = [line for line in original.splitlines() if b'"generated"' not in line]
    assert [line for line in text.splitlines() if b'"generated"' not in line] == strip
    assert EvidenceStore.open(store, create=False).head() == head_before  # judging again appends nothing


def test_evidence_mode_refuses_inputs_and_an_empty_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    EvidenceStore.open(tmp_path / "empty")
    assert main(["assess", str(POLICY), "--evidence", str(tmp_path / "empty"), "-o", str(tmp_path / "o"), "-q"]) == 2
    assert "holds no assessment" in capsys.readouterr().err
    assert main(["assess", str(POLICY), "--evidence", str(tmp_path / "empty"), "--captures", str(SHIPPED),
                 "-o", str(tmp_path / "o"), "-q"]) == 2
    assert main(["assess", str(POLICY), "-o", str(tmp_path / "o"), "-q"]) == 2
    assert "Traceback" not in capsys.readouterr().err
