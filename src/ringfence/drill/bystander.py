"""The bystander job: a job the drill does not touch, whose training is measured throughout the drill.

Its ranks' ``steps`` counters are sampled every 0.1 s from the cluster (the lab's agents, or the
progress files of SSH hosts — never the suspect's traffic). A baseline window before the attack shows
it was training at all; during the drill, the longest stretch in which some rank made no step is its
stall, judged against the budget. A rank that cannot be read leaves the measurement unknown.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from ringfence.drill.interface import Bystander, DrillError
from ringfence.policy import Policy, parse_duration
from ringfence.secure.rotation import JobWatch, Sampler, max_gap

#: the longest stall of the bystander's ranks that a drill tolerates, when the policy sets none
#: (the policy's default ``incident_drills.bystander_stall`` is the same)
DEFAULT_BUDGET_S = 10.0
#: how long the baseline is sampled before the drill acts (a measurement period, not a wait for an event)
BASELINE_S = 2.0
#: the longest wait for the first sample before the baseline starts (an SSH site's first read sets up sessions)
FIRST_SAMPLE_S = 30.0


def bystander_job(policy: Policy, suspects: Sequence[str]) -> tuple[str, tuple[str, ...]]:
    """The first job none of whose members is a suspect node: (name, ranks). :class:`DrillError` if none."""
    for job in policy.jobs:
        if not set(job.members) & set(suspects):
            return job.name, tuple(job.members)
    raise DrillError(
        f"no job runs apart from {', '.join(suspects) or 'the drilled nodes'}: there is no bystander to measure",
        hint="run the drill on a cluster with two jobs (ringfence lab up --workers 4 --jobs 2)",
    )


class BusbwSampler(Sampler):
    """The rotation's sampler, also keeping each rank's last reported bus bandwidth (``last_busbw_Bps``)."""

    def __init__(self, watch: JobWatch, workers: tuple[str, ...]) -> None:
        super().__init__(watch, workers)
        self.busbw: list[tuple[float, dict[str, float]]] = []

    def _run(self) -> None:
        while not self._stop.is_set():
            st = self.watch.agent_status()
            t = time.time()
            self.samples.append((t, {w: dict(st.get(f"{w}-worker", {}).get("counters", {})) for w in self.workers}))
            bw = {w: float(v) for w in self.workers
                  if isinstance(v := st.get(f"{w}-worker", {}).get("last_busbw_Bps"), int | float)
                  and not isinstance(v, bool) and v > 0}
            self.busbw.append((t, bw))
            self._stop.wait(0.1)


def _median_busbw(samples: Sequence[tuple[float, dict[str, float]]], ranks: Sequence[str], start: float,
                  end: float) -> float | None:
    # the slowest rank's figure in each sample (a collective runs at its slowest member's pace)
    values = [min(bw[r] for r in ranks) for t, bw in samples if start <= t <= end and all(r in bw for r in ranks)]
    return statistics.median(values) if values else None


@dataclass
class Watch:
    """The running measurement; :meth:`result` once the ``with`` block ends."""

    job: str
    ranks: tuple[str, ...]
    sampler: Sampler
    budget: float
    t_start: float = 0.0
    t_end: float = 0.0
    busbw_budget_pct: float | None = field(default=None)  # the policy's busbw_loss_pct, for the report

    def _busbw(self) -> tuple[float | None, float | None]:
        samples = getattr(self.sampler, "busbw", None)
        if not samples:
            return None, None
        t0 = self.sampler.samples[0][0] if self.sampler.samples else self.t_start
        return (_median_busbw(samples, self.ranks, t0, self.t_start),
                _median_busbw(samples, self.ranks, self.t_start, self.t_end))

    def _steps(self, index: int) -> int:
        return min(self.sampler.value(r, "steps", index) for r in self.ranks)

    def result(self) -> Bystander:
        """The bystander's measurement over the drill."""
        s = self.sampler.samples
        if not s:
            return Bystander(self.job, self.ranks, 0, 0, None, self.budget, "no sample of its ranks was read")
        unread = [r for r in self.ranks if not any(r in c and c[r] for _, c in s)]
        if unread:
            return Bystander(self.job, self.ranks, 0, 0, None, self.budget,
                             f"no progress could be read from {', '.join(unread)}")
        first = next((i for i, (t, _) in enumerate(s) if t >= self.t_start), len(s) - 1)
        before = self._steps(first) - self._steps(0)
        during = self._steps(len(s) - 1) - self._steps(first)
        if before <= 0:
            return Bystander(self.job, self.ranks, before, during, None, self.budget,
                             f"not training before the drill (no step in the {BASELINE_S:g}s baseline)")
        stalls = {r: max_gap(self.sampler.progress_times(r, "steps"), self.t_start, self.t_end) for r in self.ranks}
        worst = max(stalls, key=lambda r: stalls[r])
        bw_before, bw_during = self._busbw()
        busbw = ""
        if bw_before and bw_during:
            loss = 100.0 * (1.0 - bw_during / bw_before)
            # reported beside the judged stall, not judged: a short drill gives a few dozen per-step figures
            # of a small all-reduce, whose spread on a shared host exceeds a few-percent budget
            cap = "" if self.busbw_budget_pct is None else f", budget {self.busbw_budget_pct:g} %"
            busbw = (f"; busbw (median of its slowest rank) {bw_before / 1e6:.2f} → {bw_during / 1e6:.2f} MB/s "
                     f"({loss:+.1f} % loss{cap}; reported, not judged: per-step figures of a short drill)")
        return Bystander(
            self.job, self.ranks, before, during, round(stalls[worst], 2), self.budget,
            f"{during} steps during the drill ({self.t_end - self.t_start:.1f}s); longest stall "
            f"{stalls[worst]:.1f}s at {worst} (budget {self.budget:g}s){busbw}",
            None if bw_before is None else round(bw_before, 1), None if bw_during is None else round(bw_during, 1),
        )


@contextmanager
def watch_bystander(cluster: JobWatch, policy: Policy, suspects: Sequence[str], *,
                    budget: float | None = None) -> Iterator[Watch]:
    """Measure the bystander job while the ``with`` block plays the drill (a baseline is taken first);
    ``budget``: the tolerated stall in seconds (default: the policy's ``incident_drills.bystander_stall``)."""
    if budget is None:
        budget = parse_duration(policy.incident_drills.bystander_stall).total_seconds()
    job, ranks = bystander_job(policy, suspects)
    with BusbwSampler(cluster, ranks) as sampler:
        w = Watch(job, ranks, sampler, budget, busbw_budget_pct=float(policy.budget.busbw_loss_pct))
        # the baseline runs from the first sample read: over SSH that read can take longer than the baseline
        # itself, and a baseline with no sample in it shows a training job as not training (unmeasured)
        deadline = time.monotonic() + FIRST_SAMPLE_S
        while not sampler.samples and time.monotonic() < deadline:
            time.sleep(0.05)  # a poll for the sampler's first read, bounded by FIRST_SAMPLE_S
        time.sleep(BASELINE_S)
        w.t_start = time.time()
        try:
            yield w
        finally:
            w.t_end = time.time()


__all__ = ["BASELINE_S", "DEFAULT_BUDGET_S", "Watch", "bystander_job", "watch_bystander"]
