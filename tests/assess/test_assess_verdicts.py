"""``ringfence assess`` as a CI gate: exit 0 only when everything is proven, 3 when something is not,
bad facts files are a clear error (exit 2), and every facts file is on the record with its sha256."""

from __future__ import annotations

import json
import struct
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ringfence.cli import main
from ringfence.evidence import EvidenceStore, sha256_file
from ringfence.facts.probes import probes_document

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "examples" / "lab-policy.yaml"


def _empty_pcap(path: Path) -> Path:
    path.write_bytes(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
    return path


def _assess(tmp_path: Path, *extra: str) -> int:
    capture = _empty_pcap(tmp_path / "empty.pcap")
    return main(["assess", str(POLICY), "--captures", str(capture), "-o", str(tmp_path / "out"), "-q", *extra])


def test_nothing_proven_exits_3_and_junit_says_not_proven(tmp_path: Path) -> None:
    assert _assess(tmp_path) == 3
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["summary"]["fail"] == 0 and report["summary"]["pass"] == 0
    suite = ET.parse(tmp_path / "out" / "junit.xml").getroot()
    types = {f.get("type") for f in suite.iter("failure")}
    assert types == {"not-proven"} and not list(suite.iter("skipped"))
    assert suite.get("failures") == "10"


def test_allow_unknown_exits_0_and_says_so_loudly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _assess(tmp_path, "--allow-unknown") == 0
    err = capsys.readouterr().err
    assert "--allow-unknown" in err and "NOT PROVEN" in err


def _keys_file(path: Path, **change: object) -> Path:
    doc = {"source": "ringfence verify", "generated": "2026-11-30T10:00:00+00:00", "verdict": "pass",
           "classes": {}, "coverage": {}, "scope": [],
           "rotations": [{"layer": "wireguard", "at": "2026-11-30T10:00:00+00:00", "ok": True, "dropped_job": False}],
           "mismatch": [], **change}
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"generated": "2026-11-30T10:00:00"}, "generated"),
        ({"rotations": [{"layer": "wg", "at": "2026-11-30T10:00:00", "ok": True, "dropped_job": False}]},
         "rotations[0].at"),
        ({"rotations": [{"layer": "wg", "at": "2026-11-30T10:00:00+00:00", "ok": "yes", "dropped_job": False}]},
         "rotations[0].ok"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_malformed_key_facts_are_an_input_error_naming_file_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict[str, object], field: str
) -> None:
    keys = _keys_file(tmp_path / "keys.json", **change)
    assert _assess(tmp_path, "--keys", str(keys)) == 2
    err = capsys.readouterr().err
    assert f"{keys}: {field}:" in err and "Traceback" not in err
    assert not (tmp_path / "out" / "report.json").exists()


@pytest.mark.parametrize("option", ["--keys", "--probes", "--ruleset", "--changes", "--containment"])
def test_deeply_nested_facts_are_refused_without_recursion(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str
) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text('{"format": "x", "a": ' + "[" * 100_000 + "]" * 100_000 + "}")
    assert _assess(tmp_path, option, str(deep)) == 2
    err = capsys.readouterr().err
    assert "nested deeper than" in err and str(deep) in err and "Traceback" not in err


def test_facts_files_are_recorded_with_their_sha256(tmp_path: Path) -> None:
    probes = tmp_path / "probes.json"
    probes.write_text(json.dumps(probes_document((), target="lab:x", taken=datetime.now(UTC))))
    _assess(tmp_path, "--probes", str(probes))
    store = EvidenceStore.open(tmp_path / "out" / "evidence", create=False)
    recorded = [r for r in store.records() if r.source == "facts:probes" and r.kind.value == "observation"]
    assert len(recorded) == 1 and recorded[0].inputs == {"probes.json": sha256_file(probes)}
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert {"name": str(probes), "kind": "probes", "sha256": sha256_file(probes)}.items() <= next(
        i for i in report["inputs"] if i["kind"] == "probes").items()


def test_assess_shows_progress_on_ingest(tmp_path: Path) -> None:
    from ringfence.assess import assess

    lines: list[str] = []
    shipped = ROOT / "examples" / "lab-as-found.pcap"
    assess(POLICY, [shipped], store_dir=tmp_path / "ev", progress=lines.append)
    ingest = [line for line in lines if line.startswith(f"reading {shipped}: ")]
    assert ingest and ingest[-1].startswith(f"reading {shipped}: 100 %")
