"""``ringfence discover`` in-process: outputs, sidecar, --diff, flagged flows on stderr, bad input → exit 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from flow_kit import LAB_POLICY
from ringfence.cli import main
from ringfence.policy import load_policy


def _conn(uid: str, src: str, sport: int, dst: str, dport: int, service: str) -> str:
    return json.dumps({
        "ts": 1_780_000_000.5, "uid": uid, "id.orig_h": src, "id.orig_p": sport, "id.resp_h": dst,
        "id.resp_p": dport, "proto": "tcp", "service": service, "duration": 1.0, "orig_bytes": 100,
        "resp_bytes": 1000, "conn_state": "SF", "orig_pkts": 3, "orig_ip_bytes": 256, "resp_pkts": 3,
        "resp_ip_bytes": 1156,
    })


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("discover-cli")
    conn = d / "conn.json"
    conn.write_text("\n".join([
        _conn("C1", "10.77.1.10", 40000, "10.77.2.10", 8080, "http"),
        _conn("C2", "10.77.1.11", 40001, "10.77.1.10", 29500, ""),
        _conn("C3", "10.77.1.10", 40002, "10.77.1.11", 45000, ""),
        _conn("C4", "10.77.1.50", 40003, "10.77.3.10", 22, "ssh"),
    ]) + "\n")
    doc: dict[str, Any] = yaml.safe_load(LAB_POLICY.read_text())
    doc["approved"] = []
    inventory = d / "inventory.yaml"
    inventory.write_text(yaml.safe_dump(doc, sort_keys=False))
    return {"conn": conn, "inventory": inventory, "dir": d}


def test_writes_proposal_and_sidecar_and_reports_flags(inputs: dict[str, Path], capsys: pytest.CaptureFixture[str],
                                                        tmp_path: Path) -> None:
    out = tmp_path / "proposed.yaml"
    code = main(["discover", str(inputs["conn"]), "--inventory", str(inputs["inventory"]), "-o", str(out)])
    captured = capsys.readouterr()
    assert code == 0 and captured.out == ""
    proposal = load_policy(out)
    assert [r.id for r in proposal.approved] == ["train-a-collective", "train-a-collective-29500",
                                                 "train-a-to-storage-http"]
    assert "flagged: aux (workload) → mgmt (management):22/tcp [mgmt-ssh, management]" in captured.err
    sidecar = json.loads((tmp_path / "proposed.evidence.json").read_text())
    assert sidecar["format"] == "ringfence-discover/1" and sidecar["flows"] == 4
    assert [f["suggested"]["id"] for f in sidecar["flagged"]] == ["aux-to-mgmt-ssh"]
    assert sidecar["approved"][0]["evidence"]["first_seen"] == "2026-05-28T20:26:40.500Z"


def test_stdout_without_output_and_diff_instead_of_yaml(inputs: dict[str, Path],
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["discover", str(inputs["conn"]), "--inventory", str(inputs["inventory"]), "-q"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("# Proposed by `ringfence discover` from 4 flows") and "approved:\n" in text
    code = main(["discover", str(inputs["conn"]), "--inventory", str(inputs["inventory"]), "-q",
                 "--diff", str(LAB_POLICY), "--ephemeral-range", "40000-50000", "--rendezvous", "train-a=29500"])
    diff = capsys.readouterr().out
    assert code == 0
    assert "~ train-a-collective: ports tcp/1024-65535 → tcp/40000-50000" in diff
    assert diff.endswith("1 added, 5 removed, 1 changed, 1 unchanged\n")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--inventory", "/nonexistent/inv.yaml"], "cannot read the policy"),
        (["--ephemeral-range", "9-1"], None),
        (["--admin-zone", "nope"], "admin zone(s) nope not in the inventory"),
    ],
)
def test_bad_input_exits_2_without_traceback(inputs: dict[str, Path], capsys: pytest.CaptureFixture[str],
                                              extra: list[str], message: str | None) -> None:
    argv = ["discover", str(inputs["conn"]), "--inventory", str(inputs["inventory"]), *extra]
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse rejects a malformed option value itself
        code = int(exc.code or 0)
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    if message:
        assert message in err


def test_unreadable_capture_is_named(inputs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    junk = inputs["dir"] / "junk.bin"
    junk.write_bytes(b"\x00\x01not a capture\n" * 10)
    assert main(["discover", str(junk), "--inventory", str(inputs["inventory"])]) == 2
    assert str(junk) in capsys.readouterr().err


def test_engine_flag(inputs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    base = ["discover", str(inputs["conn"]), "--inventory", str(inputs["inventory"]), "-q"]
    assert main([*base, "--engine", "duckdb"]) == 0
    assert "train-a-collective" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        main([*base, "--engine", "postgres"])
    assert exc.value.code == 2
    assert "unknown engine 'postgres'" in capsys.readouterr().err


def test_memory_flags(inputs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    base = ["discover", str(inputs["conn"]), "--inventory", str(inputs["inventory"]), "-q"]
    spill = inputs["dir"] / "spill"
    assert main([*base, "--memory-limit", "256MB", "--spill-dir", str(spill)]) == 0
    assert "train-a-collective" in capsys.readouterr().out
    assert spill.is_dir() and not any(spill.iterdir())  # each connection's spill directory was removed
    with pytest.raises(SystemExit) as exc:
        main([*base, "--memory-limit", "lots"])
    assert exc.value.code == 2
    assert "--memory-limit" in (err := capsys.readouterr().err) and "not a memory size" in err
    blocker = inputs["dir"] / "a-file"
    blocker.write_text("x")
    assert main([*base, "--spill-dir", str(blocker)]) == 2
    err = capsys.readouterr().err
    assert "--spill-dir" in err and str(blocker) in err and "Traceback" not in err
