"""Key rotation on the live path, per layer, from one explicit registry (:data:`ROTATORS`).

A rotation is an operation users schedule (``ringfence encrypt rotate``) and one step of
``verify keys`` (:func:`ringfence.secure.drills.rotate_under_load`). Both come here: the layer's
:class:`Rotator` replaces its credentials through the site's executors, while a :class:`JobWatch`
(the lab; any cluster whose job reports progress) samples the job's counters, so the result says
what the job went through — the longest gap between all-reduce steps, failed storage/management
requests and failed steps — and a probe with the *old* credential proves it is refused.

Without a watch (an SSH site whose job reports nothing to us) the rotation is still made and the
old credential still probed, but the job side is unobserved: the result's verdict is ``unknown``,
never ``pass``.

A new layer adds itself with one entry in :data:`ROTATORS` (``rotate`` and ``judge``).
"""

from __future__ import annotations

import shutil
import statistics
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from ringfence.controls.interface import Verdict
from ringfence.policy import Policy
from ringfence.secure.layers import ipsec_run, tls_run, wireguard_run
from ringfence.secure.layers.interface import LayerError
from ringfence.secure.layers.runtime import StateStore
from ringfence.secure.verify_types import RotationResult
from ringfence.targets.interface import Site

__all__ = ["ROTATORS", "JobWatch", "Observed", "Rotator", "Sampler", "max_gap", "rotate_live", "rotator"]


class JobWatch(Protocol):
    """What the rotation watches: the job's progress counters and whether its ranks live."""

    def agent_status(self) -> dict[str, dict[str, Any]]:
        """``<node>-<agent>`` → ``{"counters": {...}, ...}``."""
        ...

    def workers_alive(self) -> bool:
        """Whether every training rank still runs."""
        ...


_WORKER_FAILS = ("shard_failed", "checkpoint_failed", "report_failed", "shard_rejected", "checkpoint_rejected",
                 "report_rejected")


@dataclass(frozen=True)
class Observed:
    """What the job went through around one rotation (``watched`` False: nothing of it was seen)."""

    t_rot: float
    t_done: float
    watched: bool
    survived: bool
    stall: float
    baseline: float
    storage_stall: float
    failures: int
    failed_steps: int
    job: str


@dataclass(frozen=True)
class Rotator:
    """One layer's rotation: ``rotate(site, policy, nodes, evidence)`` replaces the credentials and returns
    what it replaced; ``judge(site, rotated, observed)`` probes the old credential and gives the result."""

    layer: str
    rotate: Callable[[Site, Policy, Sequence[str] | None, Any], tuple[Any, ...]]
    judge: Callable[[Site, tuple[Any, ...], Observed], RotationResult]


class Sampler:
    """Samples the workers' counters every 0.1 s in a thread: when did each rank last make progress?"""

    def __init__(self, watch: JobWatch, workers: tuple[str, ...]) -> None:
        self.watch, self.workers = watch, workers
        self.samples: list[tuple[float, dict[str, dict[str, int]]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            st = self.watch.agent_status()
            self.samples.append(
                (time.time(), {w: dict(st.get(f"{w}-worker", {}).get("counters", {})) for w in self.workers}))
            self._stop.wait(0.1)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def progress_times(self, worker: str, counter: str) -> list[float]:
        """Sample times at which ``counter`` of ``worker`` had grown since the previous sample."""
        out, last = [], None
        for t, c in self.samples:
            v = c.get(worker, {}).get(counter, 0)
            if last is not None and v > last:
                out.append(t)
            last = v
        return out

    def value(self, worker: str, counter: str, index: int) -> int:
        """``counter`` of ``worker`` in sample ``index``."""
        return int(self.samples[index][1].get(worker, {}).get(counter, 0))


#: How long a rotation waits for the job to be steady before it rotates anyway (and says so).
_STEADY_WAIT = 15.0


def _failures(sampler: Sampler, workers: tuple[str, ...], first: int, last: int) -> int:
    """Storage/management request failures of ``workers`` between samples ``first`` and ``last``."""
    return sum(sampler.value(w, c, last) - sampler.value(w, c, first) for w in workers for c in _WORKER_FAILS)


def _steady(sampler: Sampler, workers: tuple[str, ...]) -> bool:
    """Whether every worker has read a shard since its latest request failure (all samples so far)."""
    for w in workers:
        fails = [t for c in _WORKER_FAILS for t in sampler.progress_times(w, c)]
        reads = sampler.progress_times(w, "shards_read")
        if not reads or (fails and max(reads) <= max(fails)):
            return False
    return True


def max_gap(times: list[float], start: float, end: float) -> float:
    """The longest stretch of ``[start, end]`` with no progress time of ``times`` in it."""
    points = [start, *[t for t in times if start < t < end], end]
    return max(b - a for a, b in zip(points, points[1:], strict=False))


#: The longest a rotation waits, after its settle time, for every rank to checkpoint again.
_CHECKPOINT_CAP = 45.0
#: No rank stepping for this long (or ten of the job's usual step times, if longer) is a stalled job. Not
#: less: a collective's TCP connections retransmit with a doubling timeout, so a path that was dark for the
#: ~5 s of a tunnel's handshake retry can stay silent about twice that before the next retransmission gets
#: through (CI: a WireGuard rotation's job resumed only after 14 s, and a 10 s limit judged it dropped).
_QUIET_MIN = 30.0


def _await_checkpoints(sampler: Sampler, workers: tuple[str, ...], t_rot: float, t_done: float,
                       settle: float) -> None:
    """Wait ``settle`` s after the rotation, then until every rank has written a checkpoint since it ended.

    Bounded by what the job shows, not by a fixed time: while its ranks still step, a checkpoint is a few
    steps away (on a slow host that can be well over ten seconds), so the wait goes on; once no rank has
    stepped for ten of its usual step times (at least :data:`_QUIET_MIN`) the job has stalled and the wait ends — the
    missing checkpoint is then the finding. :data:`_CHECKPOINT_CAP` bounds it in any case.
    """
    steps = [sampler.progress_times(w, "steps") for w in workers]
    before = [b - a for times in steps for a, b in zip(times, times[1:], strict=False) if b < t_rot]
    quiet_limit = max(_QUIET_MIN, 10.0 * statistics.median(before)) if before else _QUIET_MIN
    cap = t_done + settle + _CHECKPOINT_CAP
    while True:
        now = time.time()
        if now >= t_done + settle:
            if all(any(t > t_done for t in sampler.progress_times(w, "checkpoints_written")) for w in workers):
                return
            stepped = max((t for w in workers for t in sampler.progress_times(w, "steps")), default=t_done)
            if now >= cap or now - max(stepped, t_done + settle) > quiet_limit:
                return
        time.sleep(0.2)


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat()


def _observe(watch: JobWatch, workers: tuple[str, ...], settle: float, act: Callable[[], None]) -> Observed:
    """Run ``act`` (the rotations) while sampling the job; wait until it stepped and checkpointed after."""
    with Sampler(watch, workers) as sampler:
        time.sleep(2.0)  # a baseline of steps before the rotation: a measurement period, not a wait for an event
        # A job still recovering from what came before (a layer just enabled: a request sent on the old path
        # fails only at its timeout) would lay its failures on the rotation: wait, bounded, until every rank
        # has read a shard since its last failure, and count only what fails after the rotation began.
        steady_by = time.time() + _STEADY_WAIT
        while not _steady(sampler, workers) and time.time() < steady_by:
            time.sleep(0.2)
        settling = _failures(sampler, workers, 0, -1)
        mark = len(sampler.samples) - 1
        t_rot = time.time()
        act()
        t_done = time.time()
        _await_checkpoints(sampler, workers, t_rot, t_done, settle)
        t_end = time.time()
    steps = {w: sampler.progress_times(w, "steps") for w in workers}
    before = [b - a for w in workers for a, b in zip(steps[w], steps[w][1:], strict=False) if b < t_rot]
    baseline = statistics.median(before) if before else 0.0
    stall = max(max_gap(steps[w], t_rot, t_end) for w in workers)
    storage_stall = max(max_gap(sampler.progress_times(w, "shards_read"), t_rot, t_end) for w in workers)
    failures = _failures(sampler, workers, mark, -1)
    failed_steps = sum(sampler.value(w, "allreduce_failed", -1) for w in workers)
    ckpt_after = all(any(t > t_done for t in sampler.progress_times(w, "checkpoints_written")) for w in workers)
    steps_after = all(any(t > t_done for t in steps[w]) for w in workers)
    survived = watch.workers_alive() and failed_steps == 0 and steps_after and ckpt_after
    job = (f"job {'survived' if survived else 'FAILED'}: steps after rotation {steps_after}, checkpoints after "
           f"{ckpt_after}, all-reduce failures {failed_steps}; longest step gap {stall:.2f}s (baseline "
           f"{baseline:.2f}s), {failures} storage/management request failures")
    if failures:
        errors = {w: watch.agent_status().get(f"{w}-worker", {}).get("last_error") for w in workers}
        job += " (latest: " + "; ".join(f"{w}: {e}" for w, e in errors.items() if e) + ")"
    if settling:
        job += f"; {settling} failed before the rotation, while the job settled (not counted)"
    return Observed(t_rot, t_done, True, survived, stall, baseline, storage_stall, failures, failed_steps, job)


def _result(layer: str, nodes: Sequence[str], obs: Observed, new_in_use: bool, refused: bool, detail: str,
            old: set[str], new: set[str], at: float) -> RotationResult:
    if not obs.watched:
        verdict = Verdict.FAIL if not (new_in_use and refused) else Verdict.UNKNOWN
    else:
        verdict = Verdict.PASS if obs.survived and new_in_use and refused else Verdict.FAIL
    return RotationResult(layer, tuple(nodes), obs.survived, round(obs.stall, 3), round(obs.baseline, 3),
                          round(obs.storage_stall, 3), obs.failures, new_in_use, refused, verdict, detail,
                          tuple(sorted(old)), tuple(sorted(new)), _iso(at), obs.failed_steps if obs.watched else None)


# --- TLS ------------------------------------------------------------------------------------------


def _rotate_tls(site: Site, policy: Policy, nodes: Sequence[str] | None, evidence: Any) -> tuple[Any, ...]:
    return tls_run.rotate_tls(site, policy, evidence=evidence, nodes=nodes)


def _judge_tls(site: Site, rot: tuple[Any, ...], obs: Observed) -> RotationResult:
    old = {r.old_fingerprint for r in rot}
    new = {r.new_fingerprint for r in rot}
    events = [e for e in tls_run.read_events(site, since=obs.t_done + 0.5) if e.get("result") == "allowed"]
    seen = {e.get("peer_fingerprint") for e in events} | {e.get("own_fingerprint") for e in events}
    # new in use: connections after the rotation carried a new certificate and none an old one. Unwatched,
    # there may be no traffic at all: then only the absence of old certificates is known.
    new_in_use = (bool(events) and (seen & new) != set() and not (seen & old)) or (not obs.watched
                                                                                    and not (seen & old))
    w0 = next((r for r in rot if r.node.startswith("worker")), rot[0])
    storage = site.address("storage") if "storage" in site.hosts else site.address(w0.node)
    old_probe = tls_run.probe_request(site, w0.node, w0.retired, f"https://{storage}:8080/healthz")
    refused = old_probe.get("outcome") in ("refused", "closed")
    detail = (f"{len(rot)} certificates re-issued and the old ones revoked; {obs.job}; {len(events)} connections "
              f"after rotation, new fingerprints in use: {new_in_use}; old certificate of {w0.identity}: "
              f"{old_probe.get('outcome')} ({old_probe.get('error', '')})")
    return _result("tls", [r.node for r in rot], obs, new_in_use, refused, detail, old, new, obs.t_done)


# --- WireGuard ------------------------------------------------------------------------------------


def _rotate_wg(site: Site, policy: Policy, nodes: Sequence[str] | None, evidence: Any) -> tuple[Any, ...]:
    return wireguard_run.rotate_wireguard(site, evidence=evidence, nodes=nodes)


def _judge_wg(site: Site, rot: tuple[Any, ...], obs: Observed) -> RotationResult:
    nodes = [r.node for r in rot]
    new = {r.new_public for r in rot}
    old = {r.old_public for r in rot}
    tunnelled = list(StateStore(site.name).read().info.get("wireguard", {}).get("public_keys", {}))
    fresh, stale = True, False
    for n in nodes:
        for p in wireguard_run.node_handle(site, n).peers():
            stale |= p.public_key in old
            # a handshake after the rotation proves the new keys carry traffic; unwatched, with no traffic of
            # the job to drive one, only the absence of old keys is known
            fresh &= p.latest_handshake >= int(obs.t_rot) or not obs.watched
    peer = next((n for n in tunnelled if n != rot[0].node), None)
    if peer is None:
        raise LayerError(f"no other tunnelled node to probe {rot[0].node}'s old key against")
    refused = not wireguard_run.probe_old_key(site, rot[0].node, rot[0].retired_key, peer, seconds=3.0)
    shutil.rmtree(rot[0].retired_key.parent.parent, ignore_errors=True)
    new_in_use = fresh and not stale
    detail = (f"{len(rot)} static keys replaced; {obs.job}; every peer handshook after the rotation: {fresh}, old "
              f"keys still configured: {stale}; a handshake with {rot[0].node}'s old key "
              f"{'was refused' if refused else 'SUCCEEDED'}")
    return _result("wireguard", nodes, obs, new_in_use, refused, detail, old, new, obs.t_rot)


# --- IPsec ----------------------------------------------------------------------------------------


def _rotate_ipsec(site: Site, policy: Policy, nodes: Sequence[str] | None, evidence: Any) -> tuple[Any, ...]:
    return ipsec_run.rotate_ipsec(site, evidence=evidence, nodes=nodes)


def _judge_ipsec(site: Site, rot: tuple[Any, ...], obs: Observed) -> RotationResult:
    """New certificates authenticate every tunnel of a rotated node; the old ones are revoked in every charon.

    "Refused" is read from what each node's charon holds: the CRL it loaded revokes every old serial, and no
    charon's own credential is an old certificate. That charon then refuses a revoked certificate is behaviour the
    fail-closed drill (``verify keys``) proves on the wire; this rotation, scheduled under load, does not stop
    the collective to show it again.
    """
    nodes = [r.node for r in rot]
    old_serials = {r.old_serial for r in rot}
    new_serials = {r.new_serial for r in rot}
    try:
        tunnelled = sorted(StateStore(site.name).read().nodes.get(ipsec_run.LAYER, []))
        listings = {n: ipsec_run.node_handle(site, n).certs() for n in tunnelled}
        # the tunnels with a rotated end, each read at its initiator (the lower-named end)
        ends = {ipsec_run.conn_name(a, b): a for a in tunnelled for b in tunnelled
                if a < b and (a in nodes or b in nodes)}
        sas = {t: ipsec_run.node_handle(site, a).sas() for t, a in ends.items()}
    finally:
        ipsec_run.forget_retired(site)
    holding_old = sorted(n for n, li in listings.items() if {c.serial for c in li.certs if c.own} & old_serials)
    not_revoking = sorted(n for n, li in listings.items() if not old_serials <= li.revoked())
    missing_new = sorted(n for n in nodes if not {c.serial for c in listings[n].certs if c.own} & new_serials)
    # each tunnel with a rotated end: an IKE SA up now whose CHILD SA carried the job's traffic (watched), on
    # certificates issued by this rotation (the old ones were cleared from every charon before it came up)
    carried = {t: any(s.name == t and s.state == "ESTABLISHED" and any(
        c.bytes_in + c.bytes_out > 0 or not obs.watched for c in s.installed()) for s in found)
        for t, found in sas.items()}
    refused = not holding_old and not not_revoking
    new_in_use = not missing_new and not holding_old and all(carried.values()) and bool(carried)
    idle = [t for t, ok in carried.items() if not ok]
    detail = "; ".join([
        f"{len(rot)} certificates re-issued and the old ones revoked", obs.job,
        f"tunnels reauthenticated and carrying traffic: {len(carried) - len(idle)} of {len(carried)}"
        + (f" (not: {', '.join(idle)})" if idle else ""),
        "old serials in every node's loaded CRL" if not not_revoking
        else f"old serials NOT in the loaded CRL of {', '.join(not_revoking)}",
        f"an old certificate still held by: {', '.join(holding_old) or 'none'}",
        *([f"no new certificate loaded on {', '.join(missing_new)}"] if missing_new else []),
    ])
    return _result("ipsec", nodes, obs, new_in_use, refused, detail, {r.old_fingerprint for r in rot},
                   {r.new_fingerprint for r in rot}, obs.t_done)


#: layer → its rotation. One explicit place; a layer that can rotate on the live path adds itself here.
ROTATORS: Mapping[str, Rotator] = {
    "tls": Rotator("tls", _rotate_tls, _judge_tls),
    "wireguard": Rotator("wireguard", _rotate_wg, _judge_wg),
    "ipsec": Rotator("ipsec", _rotate_ipsec, _judge_ipsec),
}


def rotator(layer: str) -> Rotator:
    """The rotation of ``layer``; a :class:`LayerError` naming the ones there are otherwise."""
    try:
        return ROTATORS[layer]
    except KeyError:
        raise LayerError(f"layer {layer!r} has no live rotation", hint=f"rotatable: {', '.join(ROTATORS)}") from None


def rotate_live(site: Site, policy: Policy, layers: Sequence[str], *, watch: JobWatch | None,
                nodes: Sequence[str] | None = None, settle: float = 4.0, evidence: Any = None,
                ) -> tuple[RotationResult, ...]:
    """Rotate ``layers``' credentials (on ``nodes``, default all) while ``watch``'s job runs; judge each."""
    chosen = [rotator(layer) for layer in layers]
    enabled = StateStore(site.name).read().info
    off = [r.layer for r in chosen if r.layer not in enabled]
    if off:
        raise LayerError(f"{', '.join(off)} is not enabled on {site.name}: nothing to rotate",
                         hint=f"ringfence encrypt enable --layer {off[0]} …")
    done: list[tuple[Rotator, tuple[Any, ...]]] = []

    def act() -> None:
        done.extend((r, r.rotate(site, policy, nodes, evidence)) for r in chosen)

    if watch is not None:
        workers = tuple(m for j in policy.jobs for m in j.members)
        obs = _observe(watch, workers, settle, act)
    else:
        t0 = time.time()
        act()
        obs = Observed(t0, time.time(), False, False, 0.0, 0.0, 0.0, 0, 0,
                       "the job was not observed (no progress source on this target)")
    try:
        return tuple(r.judge(site, rot, obs) for r, rot in done if rot)
    finally:
        # the retired credentials of every layer live under one directory: deleted only once all were probed
        tls_run.forget_retired(site.name)
