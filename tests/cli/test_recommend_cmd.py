"""``ringfence recommend`` through the CLI: JSON and table output, facts recognised by format, bad input exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from flow_kit import LAB_POLICY
from ringfence.cli import main

NIC = {"format": "ringfence.nic/1", "taken": "2026-12-01T10:00:00+00:00",
       "nodes": [{"node": n, "interface": "eth0", "ethtool_k": "macsec-hw-offload: on\n"}
                 for n in ("worker-0", "worker-1")]}


def test_json_names_layer_cost_source_and_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    facts = tmp_path / "nic.json"
    facts.write_text(json.dumps(NIC))
    assert main(["recommend", str(LAB_POLICY), "--facts", str(facts), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    col = next(r for r in out["recommendations"] if r["class"] == "collective")
    assert col["recommended"] == "macsec" and col["cost"]["source"] == "prior" and col["within_budget"] is True
    assert col["plan"][0].startswith("ringfence rollout plan")


def test_table_for_a_dedicated_fabric(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = yaml.safe_load(LAB_POLICY.read_text())
    doc["fabric"] = {"links": "dedicated", "owner": "netops@lab"}
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump(doc))
    assert main(["recommend", str(policy)]) == 0
    text = capsys.readouterr().out
    assert "dedicated-fabric" in text and "0 % busbw (prior)" in text
    assert "plan: record a time-limited exception" in text


def test_unrecognised_or_malformed_facts_exit_2_naming_the_file(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    other = tmp_path / "other.json"
    other.write_text('{"format": "something/9"}')
    assert main(["recommend", str(LAB_POLICY), "--facts", str(other)]) == 2
    assert "other.json" in capsys.readouterr().err
    bad = tmp_path / "nic.json"
    bad.write_text(json.dumps({**NIC, "nodes": [{"node": "w", "surprise": 1}]}))
    assert main(["recommend", str(LAB_POLICY), "--facts", str(bad)]) == 2
    assert "nic.json" in capsys.readouterr().err
