"""The drill report's verdict is derived from its facts, never set; the bystander is measured, not assumed."""

from __future__ import annotations

import dataclasses

import pytest

from ringfence.cli.drill_cmd import SCENARIOS as CLI_SCENARIOS
from ringfence.controls.interface import Verdict
from ringfence.drill.bystander import Watch, bystander_job
from ringfence.drill.interface import Attempt, Bystander, DrillError, DrillReport
from ringfence.drill.registry import NAMES
from ringfence.policy.model import DRILL_SCENARIOS
from ringfence.secure.rotation import Sampler

STOPPED = Attempt("scan", "worker-2", "worker-0 (10.77.1.10:29500)", "connect to a rank", False,
                  "default drop@fabric/inet", True, "NFLOG deny, job train-b", 0.3)
OK_BY = Bystander("train-a", ("worker-0", "worker-1"), 20, 50, 1.2, 10.0)


def report(*attempts: Attempt, bystander: Bystander | None = OK_BY, contained: bool | None = True,
           requires: bool = True) -> DrillReport:
    return DrillReport("malicious-job", "lab:rft", "2026-12-01T10:00:00+00:00", "2026-12-01T10:01:00+00:00",
                       attempts, bystander, contained, requires_containment=requires)


def test_every_attempt_stopped_and_detected_contained_bystander_in_budget_passes() -> None:
    r = report(STOPPED, dataclasses.replace(STOPPED, step="ssh", detected=None))
    assert r.verdict is Verdict.PASS
    assert r.to_json()["verdict"] == "pass" and r.to_json()["format"] == "ringfence-drill/1"


@pytest.mark.parametrize(("change", "verdict", "why"), [
    ({"got_through": True}, Verdict.FAIL, "got through: scan"),
    ({"got_through": None}, Verdict.UNKNOWN, "not told: scan"),
    ({"detected": False}, Verdict.UNKNOWN, "not detected: scan"),
    ({"detected": None}, Verdict.UNKNOWN, "no attempt was detected"),
])
def test_each_attempt_fact_taken_away_never_passes(change: dict[str, object], verdict: Verdict, why: str) -> None:
    r = report(dataclasses.replace(STOPPED, **change))  # type: ignore[arg-type]
    assert r.verdict is verdict and why in r.why()


def test_no_attempt_no_containment_or_no_bystander_proves_nothing() -> None:
    assert report().verdict is Verdict.UNKNOWN and "no attempt was made" in report().why()
    assert report(STOPPED, contained=None).verdict is Verdict.UNKNOWN
    assert report(STOPPED, contained=None, requires=False).verdict is Verdict.PASS
    assert report(STOPPED, contained=False).verdict is Verdict.FAIL
    assert report(STOPPED, bystander=None).verdict is Verdict.UNKNOWN
    unmeasured = dataclasses.replace(OK_BY, longest_stall_s=None)
    assert report(STOPPED, bystander=unmeasured).verdict is Verdict.UNKNOWN


def test_a_bystander_that_stalled_or_stopped_fails_the_drill() -> None:
    assert report(STOPPED, bystander=dataclasses.replace(OK_BY, longest_stall_s=12.0)).verdict is Verdict.FAIL
    assert report(STOPPED, bystander=dataclasses.replace(OK_BY, steps_during=0)).verdict is Verdict.FAIL


class _Fake:
    def __init__(self) -> None:
        self.samples: list[tuple[float, dict[str, dict[str, int]]]] = []

    def agent_status(self) -> dict[str, dict[str, object]]:
        return {}

    def workers_alive(self) -> bool:
        return True


def _watch(samples: list[tuple[float, dict[str, dict[str, int]]]], start: float, end: float) -> Watch:
    s = Sampler(_Fake(), ("worker-0", "worker-1"))
    s.samples = samples
    return Watch("train-a", ("worker-0", "worker-1"), s, 5.0, start, end)


def test_the_bystander_stall_is_the_longest_gap_of_its_slowest_rank() -> None:
    # both ranks step every second; worker-1 makes no step from t=8 to t=15 in the middle of the drill
    samples = []
    for t in range(20):
        w1 = t if t < 8 else 8 if t < 14 else t - 6
        samples.append((float(t), {"worker-0": {"steps": t}, "worker-1": {"steps": w1}}))
    b = _watch(samples, 3.0, 19.0).result()
    assert b.longest_stall_s == pytest.approx(7.0) and "worker-1" in b.detail
    assert b.within_budget is False  # over the 5 s budget
    steady = [(float(t), {"worker-0": {"steps": t}, "worker-1": {"steps": t}}) for t in range(20)]
    assert _watch(steady, 3.0, 19.0).result().within_budget is True


def test_a_bystander_not_training_or_unread_is_unknown() -> None:
    idle = [(float(t), {"worker-0": {"steps": 5}, "worker-1": {"steps": 5}}) for t in range(10)]
    assert _watch(idle, 3.0, 9.0).result().within_budget is None
    unread = [(float(t), {"worker-0": {"steps": t}, "worker-1": {}}) for t in range(10)]
    b = _watch(unread, 3.0, 9.0).result()
    assert b.within_budget is None and "worker-1" in b.detail
    assert _watch([], 0.0, 1.0).result().within_budget is None


def test_the_bystander_is_a_job_apart_from_the_suspects() -> None:
    from flow_kit import policy_variant

    two = policy_variant(lambda d: d["jobs"].append(
        {"name": "train-b", "identity": "spiffe://lab/job/train-b", "members": ["aux"]}))
    assert bystander_job(two, ["aux"])[0] == "train-a"
    with pytest.raises(DrillError, match="no job runs apart"):
        bystander_job(two, ["aux", "worker-0"])


def test_the_scenario_names_agree_everywhere() -> None:
    assert NAMES == DRILL_SCENARIOS == CLI_SCENARIOS


def test_the_bystander_busbw_is_reported_beside_the_judged_stall() -> None:
    from ringfence.drill.bystander import BusbwSampler

    s = BusbwSampler(_Fake(), ("worker-0", "worker-1"))
    s.samples = [(float(t), {"worker-0": {"steps": t}, "worker-1": {"steps": t}}) for t in range(10)]
    s.busbw = [(float(t), {"worker-0": 100e6, "worker-1": 80e6 if t < 3 else 40e6}) for t in range(10)]
    w = Watch("train-a", ("worker-0", "worker-1"), s, 5.0, 3.0, 9.0, busbw_budget_pct=5.0)
    b = w.result()
    assert b.busbw_before_Bps == 80e6 and b.busbw_during_Bps == 40e6  # the slowest rank's median
    assert "+50.0 % loss, budget 5 %" in b.detail and b.within_budget is True  # reported, not judged
