"""``assess`` end to end: captures → flows → classes → ten controls → evidence → reports.

The shipped capture (examples/lab-as-found.pcap) was taken from the lab "as found" by ``make demo``;
the privileged test repeats the acceptance on a capture of a lab running right now.
"""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from ringfence import demo
from ringfence.assess import assess
from ringfence.cli import main
from ringfence.evidence import EvidenceStore

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "examples" / "lab-policy.yaml"
SHIPPED = ROOT / "examples" / "lab-as-found.pcap"
TEN = {"zones", "workload_identity", "admin_paths", "storage_flows", "training_traffic", "egress",
       "encryption_keys", "telemetry", "change_control", "containment"}


def _report(out: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((out / "report.json").read_text())
    return data


def _findings(report: dict[str, Any], control: str, verdict: str) -> list[dict[str, Any]]:
    ctl = next(c for c in report["controls"] if c["id"] == control)
    return [f for f in ctl["findings"] if f["verdict"] == verdict]


def _check_as_found(report: dict[str, Any]) -> None:
    assert {c["id"] for c in report["controls"]} == TEN
    assert report["summary"]["fail"] >= 3
    enc = _findings(report, "encryption_keys", "fail")
    # Plaintext storage, collective and replication, each named by its flow.
    for cls, port in (("storage", ":8080"), ("replication", ":9000")):
        hits = [f for f in enc if f"({cls})" in f["subject"] and port in f["subject"]]
        assert hits, f"no plaintext {cls} finding"
        assert hits[0]["subject"].startswith("flow 10.77.") and "→" in hits[0]["subject"]
        assert hits[0]["evidence"], "a finding must cite its evidence"
    coll = [f for f in enc if "(collective)" in f["subject"]]
    assert coll and all("10.77.1.1" in f["subject"] for f in coll)
    repl = [f for f in enc if "(replication)" in f["subject"]]
    assert any("10.77.9.10" in f["subject"] for f in repl), "replication to external in plaintext"
    # aux (10.77.1.50) reaches storage and mgmt's sshd: lateral movement, each named.
    aux_storage = _findings(report, "storage_flows", "fail")
    assert any(f["subject"].startswith("flow 10.77.1.50:") and "10.77.2.10:8080" in f["subject"] for f in aux_storage)
    aux_ssh = _findings(report, "admin_paths", "fail")
    assert any(f["subject"].startswith("flow 10.77.1.50:") and "10.77.3.10:22" in f["subject"] for f in aux_ssh)
    # The jump host's ssh is the approved admin path: it must not be a failure.
    assert not any(f["subject"].startswith("flow 10.77.5.10:") for f in aux_ssh)
    # Facts this run did not gather are unknown, never pass.
    for ctl in ("containment", "change_control"):
        assert next(c for c in report["controls"] if c["id"] == ctl)["verdict"] in ("unknown", "fail")
    cb = report["class_bytes"]
    assert cb["collective"]["plaintext"] > 0 and cb["storage"]["plaintext"] > 0


def test_shipped_capture_as_found(tmp_path: Path) -> None:
    code = main(["assess", str(POLICY), "--captures", str(SHIPPED), "-o", str(tmp_path), "-q"])
    assert code == 1
    report = _report(tmp_path)
    _check_as_found(report)
    assert (tmp_path / "report.html").stat().st_size > 1000
    assert (tmp_path / "junit.xml").exists()
    verified = EvidenceStore.open(tmp_path / "evidence", create=False).verify()
    assert verified.ok and verified.records > 10


def _approve_everything_and_exempt(text: str) -> str:
    """The lab policy, plus approvals for what aux really does and exceptions for every class."""
    extra = """
  - {id: aux-lateral-read, from: {node: aux}, to: {service: storage-http}, class: storage}
  - {id: aux-admin, from: {node: aux}, to: {service: mgmt-ssh}, class: management}
"""
    text = text.replace("\nclasses:", extra + "\nclasses:", 1)
    expires = (date.today() + timedelta(days=30)).isoformat()
    exc = "exceptions:\n" + "".join(
        f"  - {{id: exempt-{c}, control: encryption_keys, subject: 'class:{c}', owner: 'risk@lab', "
        f"reason: 'lab exercise', expires: {expires}, review_trigger: 'any encryption rollout', "
        f"trusted_boundary: 'lab fabric', compensating: [segmentation]}}\n"
        for c in ("storage", "collective", "management", "replication")
    )
    return text.replace("exceptions: []\n", exc)


def test_policy_approving_what_runs_gives_no_fail(tmp_path: Path) -> None:
    policy = tmp_path / "exempt.yaml"
    policy.write_text(_approve_everything_and_exempt(POLICY.read_text()))
    # Judged as of the day after the capture was taken, so its flows are fresh whenever this runs.
    result = assess(policy, [SHIPPED], store_dir=tmp_path / "ev", output=tmp_path, formats=("json",),
                    now=datetime(2026, 12, 1, 12, 0, tzinfo=UTC))
    report = _report(tmp_path)
    fails = [(c["id"], f["subject"]) for c in report["controls"] for f in c["findings"] if f["verdict"] == "fail"]
    assert fails == []
    exempt = _findings(report, "encryption_keys", "exempt")
    assert exempt and all("risk@lab" in f["message"] for f in exempt)
    assert result.assessment.summary.findings.failed == 0


def test_expired_exception_fails(tmp_path: Path) -> None:
    text = _approve_everything_and_exempt(POLICY.read_text())
    past = (date.today() - timedelta(days=1)).isoformat()
    text = text.replace("id: exempt-storage, control: encryption_keys, subject: 'class:storage', owner: 'risk@lab', "
                        "reason: 'lab exercise', expires: " + (date.today() + timedelta(days=30)).isoformat(),
                        "id: exempt-storage, control: encryption_keys, subject: 'class:storage', owner: 'risk@lab', "
                        "reason: 'lab exercise', expires: " + past)
    policy = tmp_path / "expired.yaml"
    policy.write_text(text)
    assess(policy, [SHIPPED], store_dir=tmp_path / "ev", output=tmp_path, formats=("json",))
    enc = _findings(_report(tmp_path), "encryption_keys", "fail")
    assert enc and all("(storage)" in f["subject"] or "exempt-storage" in f["message"] for f in enc)


def test_bad_capture_is_an_input_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(b"\xd4\xc3\xb2\xa1" + b"\x00" * 10)
    code = main(["assess", str(POLICY), "--captures", str(bad), "-o", str(tmp_path / "out"), "-q"])
    err = capsys.readouterr().err
    assert code == 2 and "bad.pcap" in err and "Traceback" not in err
    assert not (tmp_path / "out" / "report.json").exists()


def test_demo_without_a_lab_assesses_the_shipped_capture(tmp_path: Path) -> None:
    console = Console(file=open(tmp_path / "stderr.txt", "w"))  # noqa: SIM115 - closed below
    try:
        code = demo.run(tmp_path / "out", 1.0, 2, console, why_not="pretend: not running as root")
    finally:
        console.file.close()
    assert code == 1
    assert "pretend: not running as root" in (tmp_path / "stderr.txt").read_text()
    _check_as_found(_report(tmp_path / "out"))


@pytest.mark.privileged
def test_live_lab_capture_as_found(lab_capture: Path, tmp_path: Path) -> None:
    code = main(["assess", str(POLICY), "--captures", str(lab_capture), "-o", str(tmp_path), "-q"])
    assert code == 1
    _check_as_found(_report(tmp_path))
