"""The canary rollout state machine: five steps, in order, each done only with its evidence.

1. TLS on storage, management and replication — an injected :class:`StepAction`, applied then verified.
2. Key management and rotation verified — likewise.
3. Collective-path encryption on the canary pair — refused unless the budget was recorded before
   (lower ``seq``). The baseline benchmark is taken here, *before* the layer is enabled, unless one
   was recorded earlier; then the layer is enabled and verified.
4. The same benchmark with the layer on; the gate compares it with the baseline under the recorded
   budget. Measured here, baseline and candidate repeats are *interleaved* on the canary pair (the
   layer switched off and on between them, :mod:`ringfence.rollout.interleave`) with the host load
   read beside each repeat, and the paired gate (:mod:`ringfence.bench.paired`) judges the paired
   differences, so a load that moves during the run can make the answer ``inconclusive`` but never a
   false ``fail``. A candidate measured elsewhere is judged against step 3's baseline as before.
   pass → done; fail → failed (abort is the way out); inconclusive → the rollout stops there, says
   why and what to rerun: step 4 again (fresh pairs when measured here — the old ones carry the load
   move; a supplied candidate's new repeats are added to the earlier ones).
5. Fleet-wide — refused unless step 4 passed, and never for a layer that encrypts nothing.

``abort`` turns the layer off wherever it was enabled and records why. Every action, verification,
measurement, verdict and refusal goes to the evidence sink; the state file links the ids.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ringfence.bench.compare import Comparison, GateBudget, GateVerdict, compare_runs
from ringfence.bench.load import LoadProbe
from ringfence.bench.paired import compare_paired
from ringfence.bench.run import BenchRun, load_run, run_to_dict, save_run
from ringfence.controls.interface import Verdict
from ringfence.errors import RingfenceError
from ringfence.rollout.interface import (
    ArmSettings,
    Benchmarker,
    CollectiveLayer,
    EvidenceSink,
    Outcome,
    RolloutError,
    RolloutRefused,
    StepAction,
)
from ringfence.rollout.interleave import Probing, ToggleFailed, run_interleaved
from ringfence.rollout.state import (
    BudgetRecord,
    Event,
    RolloutState,
    RunRecord,
    StepRecord,
    StepStatus,
    load_state,
    new_state,
    save_state,
)

__all__ = ["SOURCE", "Rollout", "StepTools"]

SOURCE = "ringfence.rollout"


@dataclass(frozen=True)
class StepTools:
    """What the steps call. Missing tools make the step that needs them refuse, saying which."""

    tls: StepAction | None = None
    keys: StepAction | None = None
    layer: CollectiveLayer | None = None
    benchmark: Benchmarker | None = None
    candidate_run: BenchRun | None = None  # step 4 measured elsewhere (e.g. imported nccl-tests output)
    load: LoadProbe | None = None  # host load beside each interleaved repeat (else the benchmarker's own probe)
    pairs: int | None = None  # interleaved pairs in step 4 (default: the budget's min_repeats)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _outcome_data(o: Outcome) -> dict[str, Any]:
    return {"verdict": o.verdict.value, "detail": o.detail, **dict(o.data)}


class Rollout:
    """One rollout, bound to its state file and an evidence sink."""

    def __init__(self, path: Path, state: RolloutState, evidence: EvidenceSink,
                 clock: Callable[[], str] = _now) -> None:
        """Use :meth:`plan` or :meth:`open`."""
        self.path = Path(path)
        self.state = state
        self.evidence = evidence
        self._clock = clock

    # -- creating and opening --------------------------------------------------------------------

    @classmethod
    def plan(cls, path: Path, *, pair: Sequence[str], layer: str, evidence: EvidenceSink,
             fleet: Sequence[str] = (), budget: GateBudget | None = None, budget_source: str = "",
             bench: dict[str, Any] | None = None, clock: Callable[[], str] = _now,
             origin: Mapping[str, Any] | None = None) -> Rollout:
        """Create a rollout plan (refusing to overwrite one); optionally record the budget now.

        ``origin``: where the layer and nodes came from (a recommendation), kept in the plan's record.
        """
        path = Path(path)
        if path.exists():
            raise RolloutRefused(f"{path} already holds a rollout", hint="use status/advance, or another --state")
        if len(pair) != 2 or pair[0] == pair[1]:
            raise RolloutRefused("the canary is a pair of two distinct nodes")
        fleet_t = tuple(dict.fromkeys([*pair, *fleet]))
        state = replace(new_state(f"rollout-{secrets.token_hex(4)}", clock(), (pair[0], pair[1]), fleet_t, layer),
                        bench=dict(bench or {}))
        ro = cls(path, state, evidence, clock)
        # the target (lab, ssh, local) and its inventory say where the steps act: who ran what, on the record
        where = {k: v for k, v in (bench or {}).items() if k in ("target", "hosts", "policy")}
        ev = ro._record("note", f"rollout {state.id}", {"event": "plan", "pair": list(pair), "fleet": list(fleet_t),
                                                          "layer": layer, **where,
                                                          **({"recommendation": dict(origin)} if origin else {})})
        ro._log("plan", None, "planned", f"canary {pair[0]}+{pair[1]}, layer {layer}, fleet of {len(fleet_t)}", (ev,))
        if budget is not None:
            ro.record_budget(budget, budget_source or "plan")
        else:
            ro._save()
        return ro

    @classmethod
    def open(cls, path: Path, evidence: EvidenceSink, clock: Callable[[], str] = _now) -> Rollout:
        """Load an existing rollout."""
        return cls(Path(path), load_state(Path(path)), evidence, clock)

    # -- bookkeeping -------------------------------------------------------------------------------

    def _save(self) -> None:
        save_state(self.state, self.path)

    def _tick(self) -> int:
        self.state = replace(self.state, seq=self.state.seq + 1)
        return self.state.seq

    def _record(self, kind: str, subject: str, data: dict[str, Any]) -> str:
        return str(self.evidence.append(kind, SOURCE, subject, {"rollout": self.state.id, **data}))

    def _log(self, action: str, step: int | None, outcome: str, detail: str, evidence: tuple[str, ...] = ()) -> None:
        seq = self._tick()
        self.state = replace(self.state, history=(*self.state.history,
                                                  Event(seq, self._clock(), action, step, outcome, detail, evidence)))

    def _refuse(self, step: int | None, why: str, hint: str | None = None) -> RolloutRefused:
        ev = self._record("note", f"rollout {self.state.id} step {step}", {"event": "refused", "step": step,
                                                                           "reason": why})
        self._log("refused", step, "refused", why, (ev,))
        self._save()
        return RolloutRefused(why, hint=hint)

    def _set_step(self, n: int, status: StepStatus, detail: str, evidence: Sequence[str]) -> StepRecord:
        old = self.state.step(n)
        rec = replace(old, status=status, seq=self._tick(), evidence=old.evidence + tuple(evidence), detail=detail)
        self.state = self.state.with_step(rec)
        self._log("advance", n, status.value, detail, tuple(evidence))
        self._save()
        return rec

    def _run_path(self, name: str) -> Path:
        return self.path.with_name(f"{self.path.stem}.{name}.json")

    # -- budget and baseline -----------------------------------------------------------------------

    def record_budget(self, budget: GateBudget, source: str) -> str:
        """Fix the performance budget. Refused once step 3 has been attempted: it must come first."""
        if self.state.aborted is not None:
            raise self._refuse(None, "the rollout was aborted")
        if self._step3_attempted():
            raise self._refuse(3, "the budget cannot be changed once step 3 has started: it must be fixed before "
                                  "collective-path encryption is enabled")
        ev = self._record("note", f"rollout {self.state.id} budget", {"event": "budget", "budget": budget.to_dict(),
                                                                       "source": source})
        seq = self._tick()
        self.state = replace(self.state, budget=BudgetRecord(budget.to_dict(), seq, ev, source))
        self._log("budget", None, "recorded", f"busbw loss ≤ {budget.busbw_loss_pct:g} %, p99 growth ≤ "
                                              f"{budget.p99_growth_pct:g} % (from {source})", (ev,))
        self._save()
        return ev

    def record_baseline(self, run: BenchRun, source: str) -> str:
        """Keep a baseline measured elsewhere (before step 3 only: a baseline is plaintext by definition)."""
        if self._step3_attempted():
            raise self._refuse(3, "a baseline can only be recorded before step 3 enables the layer")
        return self._keep_run("baseline", run, source)

    def _step3_attempted(self) -> bool:
        return any(e.step == 3 and e.action == "advance" for e in self.state.history) or \
            self.state.step(3).status is not StepStatus.PENDING

    def _keep_run(self, role: str, run: BenchRun, source: str) -> str:
        path = self._run_path(role)
        save_run(run, path)
        ev = self._record("observation", f"all-reduce {role} on {'+'.join(self.state.pair)}",
                          {"event": role, "source": source, "config_hash": run.config_hash, "run": run_to_dict(run)})
        rec = RunRecord(path.name, run.config_hash, self._tick(), ev)
        self.state = replace(self.state, baseline=rec) if role == "baseline" else replace(self.state, candidate=rec)
        self._log(role, None, "recorded", f"{role} run {run.config_hash[:19]}… ({len(run.repeats)} repeats) from "
                                          f"{source}", (ev,))
        self._save()
        return ev

    def _load_kept(self, rec: RunRecord) -> BenchRun:
        return load_run(self.path.with_name(rec.path))

    # -- advancing ---------------------------------------------------------------------------------

    def advance(self, tools: StepTools, step: int | None = None) -> StepRecord:
        """Carry out the next step (``step`` must be it, if given) and return its record."""
        st = self.state
        if st.aborted is not None:
            raise self._refuse(step, f"the rollout was aborted: {st.aborted}", hint="plan a new rollout")
        nxt = st.next_step()
        if nxt is None:
            raise self._refuse(step, "all five steps are done")
        failed = st.step(nxt)
        if failed.status in (StepStatus.FAILED, StepStatus.ROLLED_BACK):
            raise self._refuse(step or nxt, f"step {nxt} {failed.status.value}: {failed.detail}",
                               hint="abort the rollout (rolls the canary back) and plan again")
        if step is not None and step != nxt:
            raise self._refuse(step, f"steps run in order: step {nxt} ({st.step(nxt).title}) is next, not step {step}")
        handlers = {1: self._step_action, 2: self._step_action, 3: self._step3, 4: self._step4, 5: self._step5}
        return handlers[nxt](nxt, tools)

    def _step_action(self, n: int, tools: StepTools) -> StepRecord:
        action = tools.tls if n == 1 else tools.keys
        if action is None:
            what = "the TLS action (storage, management, replication)" if n == 1 else "the key-management action"
            raise self._refuse(n, f"step {n} needs {what}, which is not available here",
                               hint="it comes from ringfence.secure; pass it to the rollout")
        applied = action.apply()
        ev_a = self._record("action", f"step {n}: {action.name}", _outcome_data(applied))
        if applied.verdict is not Verdict.PASS:
            return self._set_step(n, StepStatus.FAILED, f"{action.name}: {applied.detail}", [ev_a])
        verified = action.verify()
        ev_v = self._record("observation", f"step {n}: verify {action.name}", _outcome_data(verified))
        if verified.verdict is Verdict.PASS:
            return self._set_step(n, StepStatus.DONE, verified.detail, [ev_a, ev_v])
        if verified.verdict is Verdict.FAIL:
            return self._set_step(n, StepStatus.FAILED, f"verification failed: {verified.detail}", [ev_a, ev_v])
        return self._set_step(n, StepStatus.PENDING, f"verification could not tell: {verified.detail}; run again",
                              [ev_a, ev_v])

    def _layer(self, n: int, tools: StepTools) -> CollectiveLayer:
        if tools.layer is None:
            raise self._refuse(n, f"step {n} needs the collective layer {self.state.layer!r}")
        if tools.layer.name != self.state.layer:
            raise self._refuse(n, f"the plan is for layer {self.state.layer!r}, not {tools.layer.name!r}")
        return tools.layer

    def _step3(self, n: int, tools: StepTools) -> StepRecord:
        budget = self.state.budget
        if budget is None:
            raise self._refuse(3, "no performance budget was recorded: it must be fixed before collective-path "
                                  "encryption is enabled", hint="ringfence rollout budget --state … --policy …")
        layer = self._layer(3, tools)
        pair = list(self.state.pair)
        self._log("advance", 3, "started", f"budget recorded at seq {budget.seq}, before step 3")
        if self.state.baseline is None:
            if tools.benchmark is None:
                raise self._refuse(3, "no baseline run and no benchmark to measure one before enabling the layer")
            self._keep_run("baseline", tools.benchmark.measure(pair, "none", ArmSettings()), "measured before step 3")
        assert self.state.baseline is not None
        enabled = layer.enable(pair)
        ev_e = self._record("action", f"step 3: enable {layer.name} on {'+'.join(pair)}", _outcome_data(enabled))
        evidence = [self.state.baseline.evidence, ev_e]
        if enabled.verdict is not Verdict.PASS:
            back = layer.disable(pair)
            evidence.append(self._record("action", f"step 3: roll back {layer.name}", _outcome_data(back)))
            return self._set_step(3, StepStatus.FAILED, f"enabling {layer.name} failed: {enabled.detail}", evidence)
        verified = layer.verify(pair)
        evidence.append(self._record("observation", f"step 3: verify {layer.name} on {'+'.join(pair)}",
                                     _outcome_data(verified)))
        if verified.verdict is not Verdict.PASS:
            back = layer.disable(pair)
            evidence.append(self._record("action", f"step 3: roll back {layer.name}", _outcome_data(back)))
            return self._set_step(3, StepStatus.FAILED, f"{layer.name} not verified: {verified.detail}", evidence)
        return self._set_step(3, StepStatus.DONE, verified.detail, evidence)

    def _step4(self, n: int, tools: StepTools) -> StepRecord:
        st = self.state
        assert st.budget is not None and st.baseline is not None  # step 3 is done
        layer = self._layer(4, tools)
        budget = GateBudget(**st.budget.budget)
        baseline = self._load_kept(st.baseline)
        extra: list[str] = []
        if tools.candidate_run is None and tools.benchmark is not None:
            result, extra = self._step4_interleaved(tools, layer, budget, baseline.config_hash)
        else:
            if tools.candidate_run is None:
                raise self._refuse(4, "step 4 needs the benchmark (or a candidate run measured elsewhere)")
            run, source = tools.candidate_run, "supplied"
            if run.config_hash != baseline.config_hash:
                raise self._refuse(4, f"the candidate is not the same test as the baseline ({run.config_hash[:19]}… "
                                      f"vs {baseline.config_hash[:19]}…)",
                                   hint="same sizes, dtype, nodes and iterations")
            if st.candidate is not None and st.step(4).status is StepStatus.INCONCLUSIVE:
                run = self._load_kept(st.candidate).merged(run)  # an inconclusive answer asks for more repeats
                source += " and added to the earlier candidate repeats"
            self._keep_run("candidate", run, f"{source} with {layer.name} on")
            result = compare_runs(baseline, run, budget)
        ev = self._record("finding", f"canary {'+'.join(st.pair)} with {layer.name}: gate {result.verdict.value}",
                          result.to_dict())
        self.state = replace(self.state, verdict=result.verdict.value)
        assert self.state.candidate is not None and self.state.baseline is not None
        evidence = [self.state.baseline.evidence, *extra, self.state.candidate.evidence, ev]
        status = {GateVerdict.PASS: StepStatus.DONE, GateVerdict.FAIL: StepStatus.FAILED,
                  GateVerdict.INCONCLUSIVE: StepStatus.INCONCLUSIVE}[result.verdict]
        detail = f"gate {result.verdict.value}: {result.reasons[0]}"
        if result.verdict is GateVerdict.INCONCLUSIVE:
            detail += (f" — the rollout stops here; rerun step 4 (ringfence rollout advance --state {self.path} "
                       "--step 4, more --repeats if the noise is wide) when the machine's load is steady")
        return self._set_step(4, status, detail, evidence)

    def _step4_interleaved(self, tools: StepTools, layer: CollectiveLayer, budget: GateBudget,
                           config_hash: str) -> tuple[Comparison, list[str]]:
        """Measure interleaved pairs on the canary and judge them paired; returns the gate and evidence ids."""
        assert tools.benchmark is not None
        pair = list(self.state.pair)
        probe = tools.load
        if probe is None and isinstance(tools.benchmark, Probing):
            probe = tools.benchmark.load_probe(pair)
        switched: list[str] = []

        def record(what: str, out: Outcome) -> None:
            switched.append(self._record("action", f"step 4: {what} on {'+'.join(pair)}", _outcome_data(out)))

        try:
            got = run_interleaved(tools.benchmark, layer, pair, tools.pairs or budget.min_repeats, probe, record)
        except ToggleFailed as exc:
            # the layer's state between the arms is not what the step needs: only abort (rollback) goes on
            ev = self._record("note", f"step 4: interleaved benchmark on {'+'.join(pair)} stopped",
                              {"event": "step4-error", "error": exc.message})
            self._set_step(4, StepStatus.FAILED, f"the interleaved benchmark stopped: {exc.message}",
                           [*switched, ev])
            raise
        except RingfenceError as exc:  # a benchmark that did not complete: the step stays to be run again
            self._record("note", f"step 4: interleaved benchmark on {'+'.join(pair)} stopped",
                         {"event": "step4-error", "error": exc.message})
            self._save()
            raise
        if got.candidate.config_hash != config_hash:
            raise self._refuse(4, "the interleaved runs are not the same test as step 3's baseline")
        path = self._run_path("paired-baseline")
        save_run(got.baseline, path)
        ev_b = self._record("observation", f"all-reduce paired baseline on {'+'.join(pair)}",
                            {"event": "paired-baseline", "source": "interleaved in step 4", "file": path.name,
                             "config_hash": got.baseline.config_hash, "run": run_to_dict(got.baseline)})
        self._keep_run("candidate", got.candidate, f"interleaved with the baseline, {layer.name} on")
        return compare_paired(got.baseline, got.candidate, got.loads, budget), [*switched, ev_b]

    def _gate_on_record(self) -> None:
        """Step 4's pass as the evidence chain records it, not as the (editable) state file says.

        The gate's finding is the last evidence of step 4; the chain must hold it, for this rollout, with
        verdict ``pass``. A sink that can only append (the tests' fakes) cannot be read back: then the
        state file is all there is, as before.
        """
        read = getattr(self.evidence, "get", None)
        if not callable(read):
            return
        gate = self.state.step(4).evidence[-1:]
        try:
            record = read(gate[0]) if gate else None
        except RingfenceError as exc:
            raise self._refuse(5, f"step 4's gate record {gate[0]} is not in the evidence chain ({exc}): the state "
                                  "file does not match the record") from exc
        data = getattr(record, "data", None)
        if not isinstance(data, dict) or data.get("rollout") != self.state.id or data.get("verdict") != "pass":
            found = data.get("verdict") if isinstance(data, dict) else None
            where = gate[0] if gate else "no gate record"
            raise self._refuse(5, f"the evidence chain records step 4's gate as {found!r} ({where}), not the pass "
                                  "the state file claims: the state file was edited")

    def _step5(self, n: int, tools: StepTools) -> StepRecord:
        st = self.state
        if st.step(4).status is not StepStatus.DONE or st.verdict != GateVerdict.PASS.value:
            raise self._refuse(5, f"step 4 did not pass (gate: {st.verdict}): fleet-wide is refused")
        self._gate_on_record()
        layer = self._layer(5, tools)
        if not layer.encrypts:
            raise self._refuse(5, f"layer {layer.name!r} encrypts nothing: it calibrates the gate and never goes "
                                  "fleet-wide")
        rest = [x for x in st.fleet if x not in st.pair]
        evidence: list[str] = []
        if rest:
            enabled = layer.enable(rest)
            evidence.append(self._record("action", f"step 5: enable {layer.name} on {len(rest)} nodes",
                                         _outcome_data(enabled)))
            if enabled.verdict is not Verdict.PASS:
                return self._set_step(5, StepStatus.FAILED, f"enabling fleet-wide failed: {enabled.detail}", evidence)
        verified = layer.verify(list(st.fleet))
        evidence.append(self._record("observation", f"step 5: verify {layer.name} fleet-wide", _outcome_data(verified)))
        status = StepStatus.DONE if verified.verdict is Verdict.PASS else StepStatus.FAILED
        return self._set_step(5, status, verified.detail, evidence)

    # -- aborting ----------------------------------------------------------------------------------

    def abort(self, reason: str, layer: CollectiveLayer | None) -> str:
        """Roll the layer back wherever it was enabled and record why; returns the evidence id."""
        st = self.state
        if st.aborted is not None:
            raise self._refuse(None, f"already aborted: {st.aborted}")
        if not reason.strip():
            raise RolloutRefused("an abort needs a reason")
        s3, s5 = st.step(3).status, st.step(5).status
        nodes: list[str] = []
        if s5 in (StepStatus.DONE, StepStatus.FAILED):
            nodes = list(st.fleet)
        elif s3 is StepStatus.DONE:
            nodes = list(st.pair)
        evidence: list[str] = []
        rollback = "nothing was enabled"
        ok = True
        if nodes:
            if layer is None:
                raise self._refuse(None, f"the layer {st.layer!r} is needed to roll back {', '.join(nodes)}")
            back = layer.disable(nodes)
            ok = back.verdict is Verdict.PASS
            rollback = back.detail
            evidence.append(self._record("action", f"abort: disable {layer.name} on {', '.join(nodes)}",
                                         _outcome_data(back)))
        ev = self._record("note", f"rollout {st.id} aborted", {"event": "abort", "reason": reason,
                                                                "rolled_back": nodes, "rollback_ok": ok})
        evidence.append(ev)
        for rec in self.state.steps:
            if rec.number >= 3 and rec.status is StepStatus.DONE and nodes:
                self.state = self.state.with_step(replace(rec, status=StepStatus.ROLLED_BACK, seq=self._tick(),
                                                          detail=f"rolled back: {rollback}"))
        self.state = replace(self.state, aborted=reason)
        self._log("abort", None, "rolled back" if ok else "rollback failed", f"{reason} — {rollback}", tuple(evidence))
        self._save()
        if not ok:
            raise RolloutError(f"the rollback failed: {rollback}", hint="the layer may still be on; check the nodes")
        return ev
