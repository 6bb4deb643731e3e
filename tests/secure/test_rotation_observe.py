"""What a rotation lays on itself: request failures from before it began (a job still settling after a
layer was enabled) are not its failures; those after it are, and the ranks' latest errors say what they were.
And the IPsec rotation's judgement, with each fact it reads taken away in turn."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from ringfence.controls.interface import Verdict
from ringfence.secure import rotation
from ringfence.secure.layers import ipsec_run
from ringfence.secure.layers.ipsec_certs import Listing, LoadedCert, LoadedCrl
from ringfence.secure.layers.ipsec_sas import ChildSa, IkeSa
from ringfence.secure.rotation import _observe
from ringfence.secure.verify_types import RotationResult


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


class _SlowCheckpoints(_Job):
    """Steps every 0.1 s (until ``stop_at``, if given); checkpoints only up to 0.5 s and again from ``again``."""

    def __init__(self, again: float, stop_at: float | None = None) -> None:
        super().__init__({})
        self.again, self.stop_at = again, stop_at

    def agent_status(self) -> dict[str, dict[str, Any]]:
        age = time.time() - self.t0
        stepped = min(age, self.stop_at) if self.stop_at is not None else age
        ckpt = 1 + (int((age - self.again) * 10) if age >= self.again else 0)
        return {f"{w}-worker": {"counters": {"steps": int(stepped * 10), "shards_read": int(stepped * 10),
                                             "checkpoints_written": ckpt}} for w in ("worker-0", "worker-1")}


def test_a_job_still_stepping_is_waited_for_until_it_checkpoints() -> None:
    """The next checkpoint comes 11 s after the rotation (a slow host's few steps), past the 10 s a stalled job
    is given: the ranks are stepping, so it is awaited — a fixed 10 s wait judged this job FAILED."""
    job = _SlowCheckpoints(again=0.0)
    obs = _observe(job, ("worker-0", "worker-1"), 0.3, lambda: setattr(job, "again", time.time() - job.t0 + 11.0))
    assert obs.survived, obs.job


class _Paused(_Job):
    """Steps and checkpoints every 0.1 s, except for ``pause`` s from ``paused_at`` on (a collective in TCP backoff)."""

    def __init__(self, pause: float) -> None:
        super().__init__({})
        self.pause, self.paused_at = pause, float("inf")

    def agent_status(self) -> dict[str, dict[str, Any]]:
        age = time.time() - self.t0
        lost = min(max(0.0, age - self.paused_at), self.pause)
        n = int((age - lost) * 10)
        return {f"{w}-worker": {"counters": {"steps": n, "shards_read": n, "checkpoints_written": n // 5}}
                for w in ("worker-0", "worker-1")}  # fmt: skip


def test_a_job_silent_for_fourteen_seconds_then_stepping_again_survived() -> None:
    """CI: after a WireGuard rotation the ranks were silent 14 s (TCP's doubling retransmission timeout) and then
    stepped; the 10 s stall limit had ended the wait first and judged the job dropped."""
    job = _Paused(pause=14.0)

    def rotate() -> None:  # the ranks fall silent as the rotation starts; it ends after the sampler saw that
        job.paused_at = time.time() - job.t0
        time.sleep(1.0)

    obs = _observe(job, ("worker-0", "worker-1"), 0.3, rotate)
    assert obs.survived, obs.job
    assert obs.stall >= 13.0


def test_a_job_that_stops_stepping_is_not_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rotation, "_QUIET_MIN", 1.0)
    job = _SlowCheckpoints(again=1e9)
    t0 = time.monotonic()
    obs = _observe(job, ("worker-0", "worker-1"), 0.3, lambda: setattr(job, "stop_at", time.time() - job.t0))
    assert not obs.survived and "checkpoints after False" in obs.job, obs.job
    assert time.monotonic() - t0 < 2.0 + 0.3 + 1.0 + 5.0  # baseline, settle, the quiet limit, slack


# --- the IPsec rotation's judgement, each of its facts taken away in turn ---------------------------------


class _State:
    def __init__(self) -> None:
        self.nodes = {"ipsec": ["worker-0", "worker-1"]}


class _Store:
    def __init__(self, name: str) -> None:
        self.name = name

    def read(self) -> _State:
        return _State()


class _Charon:
    def __init__(self, listing: Listing, sas: tuple[IkeSa, ...]) -> None:
        self.listing, self.found = listing, sas

    def certs(self) -> Listing:
        return self.listing

    def sas(self) -> tuple[IkeSa, ...]:
        return self.found


class _Site:
    name = "rfunit"


OLD = {"worker-0": 11, "worker-1": 21}
NEW = {"worker-0": 12, "worker-1": 22}


def _judge(monkeypatch: pytest.MonkeyPatch, *, crl: frozenset[int] = frozenset(OLD.values()),
           own: dict[str, int] | None = None, carried: int = 4096) -> RotationResult:
    own = own or NEW
    child = ChildSa("rf-worker-0-worker-1", 7, 1, "INSTALLED", "TUNNEL-in-UDP", "ESP:AES_GCM_16-256",
                    bytes_in=carried, bytes_out=carried)
    sas = (IkeSa("rf-worker-0-worker-1", 5, "ESTABLISHED", children=(child,)),)
    charons = {n: _Charon(Listing((LoadedCert(f"CN=spiffe://lab/node/{n}", own[n], own=True),),
                                  (LoadedCrl("CN=ringfence CA lab", crl),)), sas) for n in OLD}
    monkeypatch.setattr(rotation, "StateStore", _Store)
    monkeypatch.setattr(ipsec_run, "node_handle", lambda site, n: charons[n])
    monkeypatch.setattr(ipsec_run, "forget_retired", lambda site: None)
    rot = tuple(ipsec_run.IpsecRotated(n, f"sha256:{OLD[n]}", f"sha256:{NEW[n]}", Path("/nonexistent"), OLD[n],
                                       NEW[n]) for n in OLD)
    obs = rotation.Observed(0.0, 1.0, True, True, 0.5, 0.4, 0.5, 0, 0, "job survived")
    return rotation.ROTATORS["ipsec"].judge(_Site(), rot, obs)  # type: ignore[arg-type]


def test_ipsec_rotation_passes_on_every_fact(monkeypatch: pytest.MonkeyPatch) -> None:
    r = _judge(monkeypatch)
    assert r.verdict is Verdict.PASS and r.old_refused and r.new_in_use, r.detail


@pytest.mark.parametrize(("taken", "kwargs"), [
    ("an old serial missing from the CRL", {"crl": frozenset({11})}),
    ("no CRL revoking anything", {"crl": frozenset()}),
    ("a node still on its old certificate", {"own": {"worker-0": 11, "worker-1": 22}}),
    ("the new SA carried nothing", {"carried": 0}),
])
def test_ipsec_rotation_never_passes_with_a_fact_taken_away(monkeypatch: pytest.MonkeyPatch, taken: str,
                                                            kwargs: dict[str, Any]) -> None:
    r = _judge(monkeypatch, **kwargs)
    assert r.verdict is Verdict.FAIL, (taken, r.detail)
