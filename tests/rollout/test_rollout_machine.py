"""The rollout state machine with fakes: order, budget-before-canary, gate-before-fleet, abort."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from rollout_fakes import CFG, FakeAction, FakeBenchmarker, FakeEvidence, FakeLayer, HogBenchmarker, HogHost, synth

from ringfence.bench.compare import GateBudget
from ringfence.bench.run import load_run
from ringfence.controls.interface import Verdict
from ringfence.rollout import NoopLayer, Rollout, RolloutRefused, StepStatus, StepTools, load_state


def _tools(slowdown: float = 1.0, layer: FakeLayer | NoopLayer | None = None) -> StepTools:
    return StepTools(tls=FakeAction("tls"), keys=FakeAction("keys"), layer=layer or FakeLayer(),
                     benchmark=FakeBenchmarker(slowdown))


def _plan(tmp_path: Path, ev: FakeEvidence, *, budget: bool = True, layer: str = "wireguard") -> Rollout:
    return Rollout.plan(tmp_path / "ro.json", pair=["w0", "w1"], layer=layer, evidence=ev, fleet=["w2", "w3"],
                        budget=GateBudget() if budget else None, budget_source="test")


def test_happy_path_all_five_steps(tmp_path: Path) -> None:
    ev = FakeEvidence()
    ro = _plan(tmp_path, ev)
    tools = _tools(slowdown=1.0)
    for n in range(1, 6):
        rec = ro.advance(tools, n)
        assert rec.status is StepStatus.DONE, rec.detail
        assert rec.evidence, f"step {n} has no evidence"
    assert ro.state.verdict == "pass"
    layer = tools.layer
    assert isinstance(layer, FakeLayer)
    assert ("enable", ("w2", "w3")) in layer.calls and ("verify", ("w0", "w1", "w2", "w3")) in layer.calls
    bench = tools.benchmark
    assert isinstance(bench, FakeBenchmarker)
    # baseline before the layer (step 3), then interleaved pairs B A | A B | B A with the layer switched between
    assert [c[0] for c in bench.calls] == ["none", "wireguard", "none", "none", "wireguard", "wireguard", "none"]
    assert bench.calls[1][1].interfaces == {"w0": "wg0", "w1": "wg0"} and bench.calls[2][1].interfaces == {}
    switches = [c[0] for c in layer.calls if c[1] == ("w0", "w1")]
    assert switches == ["enable", "verify", "disable", "enable", "disable", "enable"]  # on again after step 4
    # persisted: a fresh load sees the same thing, and every evidence id came from the sink
    again = load_state(tmp_path / "ro.json")
    assert again == ro.state
    ids = {f"ev-{i + 1}" for i in range(len(ev.records))}
    assert all(e in ids for s in again.steps for e in s.evidence)
    assert "finding" in ev.kinds() and (tmp_path / "ro.baseline.json").exists()


def test_steps_are_refused_out_of_order(tmp_path: Path) -> None:
    ev = FakeEvidence()
    ro = _plan(tmp_path, ev)
    with pytest.raises(RolloutRefused, match="step 1 .* is next, not step 3"):
        ro.advance(_tools(), 3)
    with pytest.raises(RolloutRefused, match="needs the TLS action"):
        ro.advance(StepTools(), 1)
    assert ro.state.history[-1].action == "refused" and ev.records[-1][3]["event"] == "refused"


def test_step3_refused_without_a_budget_recorded_before(tmp_path: Path) -> None:
    ro = _plan(tmp_path, FakeEvidence(), budget=False)
    tools = _tools()
    ro.advance(tools, 1)
    ro.advance(tools, 2)
    with pytest.raises(RolloutRefused, match="no performance budget"):
        ro.advance(tools, 3)
    assert isinstance(tools.layer, FakeLayer) and tools.layer.calls == []  # nothing was enabled
    ro.record_budget(GateBudget(busbw_loss_pct=5), "test")
    assert ro.advance(tools, 3).status is StepStatus.DONE
    assert ro.state.budget is not None and ro.state.budget.seq < ro.state.step(3).seq
    with pytest.raises(RolloutRefused, match="cannot be changed once step 3"):
        ro.record_budget(GateBudget(busbw_loss_pct=50), "moving the goalposts")


def test_slow_canary_fails_and_step5_is_refused_with_numbers(tmp_path: Path) -> None:
    ev = FakeEvidence()
    ro = _plan(tmp_path, ev)
    tools = _tools(slowdown=37.0)
    for n in (1, 2, 3):
        ro.advance(tools, n)
    rec = ro.advance(tools, 4)
    assert rec.status is StepStatus.FAILED and ro.state.verdict == "fail"
    assert "busbw loss 97" in rec.detail and "exceeds the 5 % budget" in rec.detail
    finding = next(r for r in ev.records if r[0] == "finding")
    assert finding[3]["verdict"] == "fail"
    with pytest.raises(RolloutRefused, match="step 4 failed"):
        ro.advance(tools, 5)
    with pytest.raises(RolloutRefused, match="step 4 failed"):
        ro.advance(tools)


def test_step5_is_refused_unless_step4_passed(tmp_path: Path) -> None:
    ro = _plan(tmp_path, FakeEvidence())
    tools = _tools()
    for n in (1, 2, 3):
        ro.advance(tools, n)
    with pytest.raises(RolloutRefused, match="step 4 .* is next, not step 5"):
        ro.advance(tools, 5)


def test_inconclusive_step4_stops_says_what_to_rerun_and_can_be_rerun(tmp_path: Path) -> None:
    ro = _plan(tmp_path, FakeEvidence())
    ro.record_budget(GateBudget(min_repeats=5), "test")
    tools = replace(_tools(slowdown=1.0), pairs=2)
    for n in (1, 2, 3):
        ro.advance(tools, n)
    rec = ro.advance(tools, 4)  # 2 pairs < 5: a would-be pass is inconclusive
    assert rec.status is StepStatus.INCONCLUSIVE and "only 2 pair(s)" in rec.detail
    assert "the rollout stops here; rerun step 4" in rec.detail and str(ro.path) in rec.detail
    with pytest.raises(RolloutRefused, match="step 4 .* is next, not step 5"):
        ro.advance(tools, 5)
    rec = ro.advance(replace(tools, pairs=5), 4)  # fresh pairs: the old ones may carry what made it unsure
    assert rec.status is StepStatus.DONE, rec.detail
    assert ro.state.candidate is not None
    assert len(load_run(tmp_path / ro.state.candidate.path).repeats) == 5
    assert len(load_run(tmp_path / "ro.paired-baseline.json").repeats) == 5


def test_a_supplied_inconclusive_candidate_gets_its_new_repeats_added(tmp_path: Path) -> None:
    ro = _plan(tmp_path, FakeEvidence())
    ro.record_budget(GateBudget(min_repeats=5), "test")
    tools = _tools(slowdown=1.0)
    for n in (1, 2, 3):
        ro.advance(tools, n)
    supplied = replace(tools, candidate_run=synth(1.0, seed=9, layer="wireguard"))
    assert ro.advance(supplied, 4).status is StepStatus.INCONCLUSIVE  # 3 repeats < 5
    assert ro.advance(supplied, 4).status is StepStatus.INCONCLUSIVE  # baseline side still 3
    assert ro.state.candidate is not None
    assert len(load_run(tmp_path / ro.state.candidate.path).repeats) == 6


def test_a_supplied_candidate_of_another_test_is_refused(tmp_path: Path) -> None:
    ro = _plan(tmp_path, FakeEvidence())
    tools = _tools()
    for n in (1, 2, 3):
        ro.advance(tools, n)
    other = synth(1.0, cfg=replace(CFG, iterations=3))
    with pytest.raises(RolloutRefused, match="not the same test"):
        ro.advance(replace(tools, candidate_run=other), 4)


def test_failed_verification_fails_the_step_and_rolls_back(tmp_path: Path) -> None:
    ro = _plan(tmp_path, FakeEvidence())
    layer = FakeLayer(verify_verdict=Verdict.FAIL)
    tools = _tools(layer=layer)
    ro.advance(tools, 1)
    ro.advance(tools, 2)
    rec = ro.advance(tools, 3)
    assert rec.status is StepStatus.FAILED and "plaintext seen" in rec.detail
    assert layer.calls[-1] == ("disable", ("w0", "w1"))


def test_unknown_verification_leaves_the_step_pending(tmp_path: Path) -> None:
    ro = _plan(tmp_path, FakeEvidence())
    tools = StepTools(tls=FakeAction("tls", verify_verdict=Verdict.UNKNOWN))
    rec = ro.advance(tools, 1)
    assert rec.status is StepStatus.PENDING and ro.state.next_step() == 1


def test_abort_rolls_the_canary_back_and_records_why(tmp_path: Path) -> None:
    ev = FakeEvidence()
    ro = _plan(tmp_path, ev)
    tools = _tools(slowdown=37.0)
    for n in (1, 2, 3, 4):
        ro.advance(tools, n)
    layer = tools.layer
    assert isinstance(layer, FakeLayer)
    ro.abort("gate failed: 97 % busbw loss", layer)
    assert layer.calls[-1] == ("disable", ("w0", "w1"))
    assert ro.state.aborted == "gate failed: 97 % busbw loss"
    assert ro.state.step(3).status is StepStatus.ROLLED_BACK
    assert ev.records[-1][3]["event"] == "abort" and ev.records[-1][3]["rolled_back"] == ["w0", "w1"]
    with pytest.raises(RolloutRefused, match="aborted"):
        ro.advance(tools)
    with pytest.raises(RolloutRefused, match="already aborted"):
        ro.abort("again", layer)


def test_a_noop_canary_passes_the_gate_but_never_goes_fleet_wide(tmp_path: Path) -> None:
    ro = _plan(tmp_path, FakeEvidence(), layer="noop")
    tools = _tools(slowdown=1.0, layer=NoopLayer())
    for n in (1, 2, 3, 4):
        assert ro.advance(tools, n).status is StepStatus.DONE
    with pytest.raises(RolloutRefused, match="encrypts nothing"):
        ro.advance(tools, 5)


def test_plan_refuses_overwrite_and_bad_pairs(tmp_path: Path) -> None:
    _plan(tmp_path, FakeEvidence())
    with pytest.raises(RolloutRefused, match="already holds"):
        _plan(tmp_path, FakeEvidence())
    with pytest.raises(RolloutRefused, match="two distinct"):
        Rollout.plan(tmp_path / "x.json", pair=["a", "a"], layer="noop", evidence=FakeEvidence())


def _hog_run(tmp_path: Path, slowdown: float, hog_after: int) -> tuple[Rollout, FakeEvidence]:
    ev = FakeEvidence()
    ro = _plan(tmp_path, ev)
    host = HogHost()
    bench = HogBenchmarker(slowdown, host, hog_after=hog_after)
    tools = StepTools(tls=FakeAction("tls"), keys=FakeAction("keys"), layer=FakeLayer(), benchmark=bench,
                      load=host, pairs=6)
    for n in (1, 2, 3):
        ro.advance(tools, n)
    ro.advance(tools, 4)
    return ro, ev


@pytest.mark.parametrize("hog_after", [2, 5, 6, 8])
def test_a_noop_canary_with_a_hog_switched_on_halfway_is_never_failed(tmp_path: Path, hog_after: int) -> None:
    """The hog halves the speed from the ``hog_after``-th measurement on (step 3's baseline is the first)."""
    ro, ev = _hog_run(tmp_path, 1.0, hog_after)
    assert ro.state.verdict != "fail" and ro.state.step(4).status is not StepStatus.FAILED, ro.state.step(4).detail
    finding = next(r[3] for r in ev.records if r[0] == "finding")
    assert len(finding["load"]) == 6 and {p["order"] for p in finding["load"]} == {"AB", "BA"}
    assert any(x["ambient"] >= 0.45 for p in finding["load"] for x in p["candidate"] + p["baseline"])


def test_a_slow_canary_with_a_hog_switched_on_halfway_still_fails(tmp_path: Path) -> None:
    ro, _ = _hog_run(tmp_path, 37.0, 6)
    assert ro.state.verdict == "fail", ro.state.step(4).detail
    assert ro.state.step(4).status is StepStatus.FAILED
