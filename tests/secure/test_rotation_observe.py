"""What a rotation lays on itself: request failures from before it began (a job still settling after a
layer was enabled) are not its failures; those after it are, and the ranks' latest errors say what they were."""

from __future__ import annotations

import time
from typing import Any

from ringfence.secure.rotation import _observe


class _Job:
    """Two ranks stepping and reading a shard every 0.1 s; ``fails`` (seconds from start → counter) are
    request failures, each seen from that moment on."""

    def __init__(self, fails: dict[float, str]) -> None:
        self.t0 = time.time()
        self.fails = fails

    def agent_status(self) -> dict[str, dict[str, Any]]:
        age = time.time() - self.t0
        out: dict[str, dict[str, Any]] = {}
        for w in ("worker-0", "worker-1"):
            counters = {"steps": int(age * 10), "shards_read": int(age * 10), "checkpoints_written": int(age * 10)}
            last = None
            for at, what in sorted(self.fails.items()):
                if w == "worker-0" and age >= at:
                    counters[what] = counters.get(what, 0) + 1
                    last = f"{what.removesuffix('_failed')}: TimeoutError: timed out"
            out[f"{w}-worker"] = {"counters": counters, "last_error": last}
        return out

    def workers_alive(self) -> bool:
        return True


def test_failures_while_the_job_settles_are_not_the_rotations() -> None:
    obs = _observe(_Job({0.5: "shard_failed", 1.5: "report_failed"}), ("worker-0", "worker-1"), 0.5,
                   lambda: None)
    assert obs.failures == 0 and obs.survived, obs.job
    assert "2 failed before the rotation" in obs.job, obs.job


def test_failures_after_the_rotation_began_are_counted_and_named() -> None:
    job = _Job({})
    obs = _observe(job, ("worker-0", "worker-1"), 1.0,
                   lambda: job.fails.update({time.time() - job.t0 + 0.2: "shard_failed"}))
    assert obs.failures == 1, obs.job
    assert "worker-0: shard: TimeoutError" in obs.job and "before the rotation" not in obs.job, obs.job
