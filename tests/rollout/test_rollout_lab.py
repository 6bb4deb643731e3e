"""Issue 6 acceptance in the lab: the canary rollout drives the real encryption layers.

Steps 1–2 are real (TLS on storage/management/replication, proven by a capture; certificates rotated
under load, the old refused). A canary with the ``wireguard`` layer (userspace wireguard-go) is
judged ``fail`` by the gate with the numbers in the reason, step 5 is refused (also through the
CLI), and ``abort`` takes the tunnel down again. A canary whose "encryption" is a no-op is not
failed — pass, or inconclusive on a noisy machine — proving the gate reacts to measurements, not to
layer names. One private lab for the module (the shared ``lab`` fixture stays untouched).
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ringfence.bench.compare import GateBudget, compare_runs, human_size
from ringfence.bench.driver import BenchSpec
from ringfence.bench.run import BenchRun, load_run
from ringfence.cli import main
from ringfence.controls.interface import Verdict
from ringfence.errors import EnvironmentProblem
from ringfence.evidence import EvidenceStore
from ringfence.lab import Lab
from ringfence.lab.netns import require_privileges
from ringfence.lab.rollout import LabBenchmarker, WireguardLabLayer, lab_actions
from ringfence.rollout import NoopLayer, Rollout, RolloutRefused, StepStatus, StepTools, load_layer
from ringfence.rollout.site_actions import StepActions
from ringfence.secure.layers import tls_run, wireguard, wireguard_run
from ringfence.secure.layers.runtime import StateStore

MiB = 1 << 20
PAIR = ("worker-0", "worker-1")
# Tiny on purpose: wireguard-go moves ~0.03 GB/s of gloo here, and the machine has 2 shared cores.
SPEC = BenchSpec(sizes=(MiB, 4 * MiB), warmup=1, iterations=8, repeats=3, timeout_s=240.0)


@dataclass
class Bed:
    lab: Lab
    work: Path
    evidence_dir: Path
    evidence: EvidenceStore
    actions: StepActions
    bench: LabBenchmarker
    budget: GateBudget


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bed]:
    try:
        require_privileges()
    except EnvironmentProblem as exc:
        pytest.skip(f"the lab cannot run here: {exc.message}")
    work = tmp_path_factory.mktemp("rollout-lab")
    evidence_dir = work / "evidence"
    store = EvidenceStore.open(evidence_dir)
    lab = Lab.up(workers=2, jobs=1)
    try:
        with lab:  # down() on leaving, after the layers' own clean-up below
            try:
                budget = GateBudget.from_policy(lab.policy().budget)  # 5 % busbw, 25 % p99, 3 repeats
                yield Bed(lab, work, evidence_dir, store, lab_actions(lab, evidence=store),
                          LabBenchmarker(SPEC, lab), budget)
            finally:
                try:
                    wireguard_run.disable_wireguard(lab.site())
                finally:
                    tls_run.disable_tls(lab.site())
    finally:
        StateStore(lab.name).forget()


def _plan(bed: Bed, name: str, layer: str) -> Rollout:
    bench = {"target": "lab", "sizes": list(SPEC.sizes), "dtype": SPEC.dtype, "backend": SPEC.backend,
             "warmup": SPEC.warmup, "iterations": SPEC.iterations, "repeats": SPEC.repeats,
             "timeout_s": SPEC.timeout_s}
    return Rollout.plan(bed.work / name / "ro.json", pair=PAIR, layer=layer, evidence=bed.evidence,
                        budget=bed.budget, budget_source="lab policy budget:", bench=bench)


def _kept(ro: Rollout, role: str) -> BenchRun:
    rec = ro.state.baseline if role == "baseline" else ro.state.candidate
    assert rec is not None
    return load_run(ro.path.with_name(rec.path))


def _say(text: str) -> None:
    """Figures for the report: to the terminal even while a test captures output (``-s`` shows them)."""
    print(text, file=sys.__stderr__, flush=True)


def _figures(title: str, baseline: BenchRun, candidate: BenchRun, budget: GateBudget) -> None:
    cmp = compare_runs(baseline, candidate, budget)
    _say(f"\n{title}: gate {cmp.verdict.value}")
    for s in cmp.sizes:
        _say(f"  {human_size(s.size):>7}: busbw {s.busbw.baseline:.3f} → {s.busbw.candidate:.3f} GB/s, "
             f"p99 {s.p99.baseline:.0f} → {s.p99.candidate:.0f} µs")
    for r in cmp.reasons:
        _say(f"  - {r}")
    for n in candidate.notes:
        _say(f"  note: {n}")


def _steps_1_to_3(bed: Bed, ro: Rollout, tools: StepTools) -> None:
    for n in (1, 2, 3):
        t0 = time.monotonic()
        rec = ro.advance(tools, n)
        _say(f"\nstep {n} ({time.monotonic() - t0:.1f} s): {rec.status.value} — {rec.detail}")
        assert rec.status is StepStatus.DONE, rec.detail


def test_the_lab_parts_load_lazily_for_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The CLI's zero-argument factories look for a lab only when a step runs: a refused step touches none."""
    actions = lab_actions()
    assert actions.tls.name and actions.keys.name
    assert isinstance(load_layer("wireguard"), WireguardLabLayer)
    common = ["--state", str(tmp_path / "ro.json"), "--evidence", str(tmp_path / "evidence")]
    assert main(["rollout", "plan", *common, "--pair", ",".join(PAIR), "--layer", "wireguard", "--target", "lab",
                 "--sizes", "1M,4M", "--busbw-loss", "5"]) == 0
    capsys.readouterr()
    assert main(["rollout", "advance", *common, "--step", "3", "--actions",
                 "ringfence.lab.rollout:lab_actions"]) == 2
    assert "steps run in order: step 1" in capsys.readouterr().err


@pytest.mark.privileged
@pytest.mark.slow
def test_wireguard_canary_fails_the_gate_and_is_rolled_back(bed: Bed, capsys: pytest.CaptureFixture[str]) -> None:
    layer = WireguardLabLayer(bed.lab, evidence=bed.evidence)
    ro = _plan(bed, "wireguard", "wireguard")
    tools = StepTools(tls=bed.actions.tls, keys=bed.actions.keys, layer=layer, benchmark=bed.bench)
    _steps_1_to_3(bed, ro, tools)
    st = ro.state
    assert StateStore(bed.lab.name).read().nodes["wireguard"] == list(PAIR)
    # the budget was fixed first, then the baseline measured, and only then the layer enabled
    enabled = next(e for e in st.history if e.step == 3 and e.outcome == "done")
    assert st.budget is not None and st.baseline is not None
    assert st.budget.seq < st.baseline.seq < enabled.seq
    baseline = _kept(ro, "baseline")
    assert baseline.config.layer == "none" and any("no WireGuard tunnel" in n for n in baseline.notes)

    t0 = time.monotonic()
    rec = ro.advance(tools, 4)
    candidate = _kept(ro, "candidate")
    _figures(f"wireguard canary (step 4, {time.monotonic() - t0:.1f} s)", baseline, candidate, bed.budget)
    assert rec.status is StepStatus.FAILED and ro.state.verdict == "fail", rec.detail
    assert re.search(r"gate fail: busbw loss \d+\.\d % \(95 % CI \d+\.\d – \d+\.\d %\) at \d MiB exceeds the 5 % "
                     r"budget", rec.detail), rec.detail
    # the candidate really ran through the tunnel: each side moved at least the all-reduced bytes
    moved = sum(SPEC.sizes) * (SPEC.warmup + SPEC.iterations) * SPEC.repeats
    assert bed.bench.last_tunnel_bytes is not None
    assert all(v >= moved for v in bed.bench.last_tunnel_bytes.values()), bed.bench.last_tunnel_bytes
    for size in SPEC.sizes:  # far beyond any noise: wireguard-go is CPU-bound at a small fraction of plaintext
        b = [r.busbw for r in baseline.per_repeat(size)]
        c = [r.busbw for r in candidate.per_repeat(size)]
        assert max(c) < 0.5 * min(b), (size, b, c)

    with pytest.raises(RolloutRefused, match=r"step 4 failed: gate fail: busbw loss"):
        ro.advance(tools, 5)
    common = ["--state", str(ro.path), "--evidence", str(bed.evidence_dir)]
    capsys.readouterr()
    assert main(["rollout", "advance", *common, "--step", "5"]) == 2  # refused before touching the lab
    assert "step 4 failed: gate fail: busbw loss" in capsys.readouterr().err
    assert main(["rollout", "status", *common]) == 0
    status = capsys.readouterr().out
    _say(f"\n`ringfence rollout status`:\n{status}")
    assert re.search(r"4\. failed +the same all-reduce benchmark .* — gate fail: busbw loss \d+\.\d %", status), status

    ro = Rollout.open(ro.path, bed.evidence)  # the CLI recorded its refusal in the file
    ro.abort(f"gate failed at step 4: {rec.detail}", layer)
    assert "wireguard" not in StateStore(bed.lab.name).read().nodes
    assert not [p for p in StateStore(bed.lab.name).read().processes if p.layer == "wireguard"]
    assert ro.state.step(3).status is StepStatus.ROLLED_BACK and ro.state.aborted
    abort = ro.state.history[-1]
    assert abort.action == "abort" and abort.outcome == "rolled back" and "busbw loss" in abort.detail
    steps = int(bed.lab.agent_status()["worker-0-worker"]["counters"].get("steps", 0))
    deadline = time.monotonic() + 30
    while int(bed.lab.agent_status()["worker-0-worker"]["counters"].get("steps", 0)) <= steps + 2:
        assert time.monotonic() < deadline, "the job did not resume on the plain path after the rollback"
        time.sleep(0.3)
    assert bed.evidence.verify().ok


@pytest.mark.privileged
@pytest.mark.slow
def test_noop_canary_is_not_failed(bed: Bed) -> None:
    ro = _plan(bed, "noop", "noop")
    layer = NoopLayer()
    tools = StepTools(tls=bed.actions.tls, keys=bed.actions.keys, layer=layer, benchmark=bed.bench)
    _steps_1_to_3(bed, ro, tools)
    rec = ro.advance(tools, 4)
    _figures("noop canary (step 4)", _kept(ro, "baseline"), _kept(ro, "candidate"), bed.budget)
    assert rec.status in (StepStatus.DONE, StepStatus.INCONCLUSIVE), rec.detail
    assert ro.state.verdict in ("pass", "inconclusive") and "gate fail" not in rec.detail
    with pytest.raises(RolloutRefused):  # noop never goes fleet-wide (and an inconclusive step 4 never does)
        ro.advance(tools, 5)
    ro.abort("calibration done", layer)
    assert bed.evidence.verify().ok


@pytest.mark.privileged
@pytest.mark.slow
def test_wireguard_verify_fails_when_traffic_bypasses_the_tunnel(bed: Bed) -> None:
    """The layer's own proof is not a label either: with the tunnel bypassed, step 3's verification fails."""
    layer = WireguardLabLayer(bed.lab)
    assert layer.enable(PAIR).verdict is Verdict.PASS
    try:
        for node in PAIR:  # what a half-applied or reverted configuration leaves: no policy rule, no strict mode
            ns = bed.lab.topology.namespace(node)
            subprocess.run(["ip", "-n", ns, "rule", "del", "not", "fwmark", hex(wireguard.FWMARK), "table",
                            str(wireguard.TABLE)], check=True)
            subprocess.run(["ip", "netns", "exec", ns, "nft", "delete", "table", "inet", "rf_wg"], check=True)
        out = layer.verify(PAIR)
        _say(f"\nbypassed tunnel: {out.verdict.value} — {out.detail}")
        assert out.verdict is Verdict.FAIL, out.detail
        assert int(out.data["marker_seen"]) > 0 and int(out.data["plaintext_payload_bytes"]) > 0, out.data
    finally:
        off = layer.disable(PAIR)
    assert off.verdict is Verdict.PASS, off.detail
