"""Step 5 reads step 4's gate from the hash-chained record, not from the editable state file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rollout_fakes import FakeAction, FakeBenchmarker, FakeLayer

from ringfence.bench.compare import GateBudget
from ringfence.evidence import EvidenceStore
from ringfence.rollout import Rollout, RolloutRefused, StepStatus, StepTools


def _run_to_step4(tmp_path: Path, slowdown: float) -> tuple[Rollout, EvidenceStore, StepTools]:
    store = EvidenceStore.open(tmp_path / "evidence")
    ro = Rollout.plan(tmp_path / "ro.json", pair=["w0", "w1"], layer="wireguard", evidence=store, fleet=["w2", "w3"],
                      budget=GateBudget(), budget_source="test")
    tools = StepTools(tls=FakeAction("tls"), keys=FakeAction("keys"), layer=FakeLayer(),
                      benchmark=FakeBenchmarker(slowdown))
    for n in range(1, 5):
        ro.advance(tools, n)
    return ro, store, tools


def test_a_recorded_pass_opens_step_5(tmp_path: Path) -> None:
    ro, store, tools = _run_to_step4(tmp_path, 1.0)
    assert ro.advance(tools, 5).status is StepStatus.DONE


def test_editing_the_state_file_to_pass_is_detected(tmp_path: Path) -> None:
    ro, store, tools = _run_to_step4(tmp_path, 1.5)  # the gate fails: 33 % busbw loss
    assert ro.state.verdict == "fail"
    path = tmp_path / "ro.json"
    doc = json.loads(path.read_text())
    text = json.dumps(doc).replace('"verdict": "fail"', '"verdict": "pass"').replace('"status": "failed"',
                                                                                       '"status": "done"')
    path.write_text(text)
    edited = Rollout.open(path, store)
    assert edited.state.verdict == "pass" and edited.state.step(4).status is StepStatus.DONE
    with pytest.raises(RolloutRefused, match="the state file was edited"):
        edited.advance(tools, 5)
