"""The IPsec layer's live drills: IKE and CHILD SA rekey under the running job, and a wrong or revoked certificate.

Like :mod:`ringfence.secure.drills` (whose sampler and capture helpers these share), each drill measures
through the small :class:`~ringfence.secure.drills.Cluster` protocol, returns a record whose verdict
follows from the measurements, and undoes what it broke, also when it fails. Waiting is by observation
(``swanctl --list-sas`` polled through the node's vici socket, the job's step counters), never a sleep
standing in for an event.
"""

from __future__ import annotations

import shutil
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ringfence.controls.interface import Verdict
from ringfence.policy import Policy
from ringfence.secure import pki
from ringfence.secure.drills import Cluster, capture_flows
from ringfence.secure.layers import ipsec_run
from ringfence.secure.layers.interface import LayerError
from ringfence.secure.layers.ipsec_sas import IkeSa
from ringfence.secure.layers.runtime import StateStore
from ringfence.secure.progress import plaintext_from, settled_counter, wait_progress
from ringfence.secure.rotation import Sampler, max_gap
from ringfence.secure.verify_types import FailClosedResult
from ringfence.targets.interface import RunResult

_REFUSALS = ("certificate was revoked", "no trusted", "no issuer certificate", "AUTHENTICATION_FAILED",
             "constraint check failed", "authentication of")


@dataclass(frozen=True)
class RekeyResult:
    """One rekey of a tunnel (``ike`` or ``child``) while the job ran: what changed and what the job felt."""

    kind: str  # ike | child
    tunnel: str
    old: str  # the IKE SA id or outbound CHILD SPI before
    new: str  # ... after
    rekey_s: float  # from the request until the new SA was observed installed
    job_survived: bool
    stall_s: float  # the longest gap between two steps of any rank across the rekey
    baseline_step_s: float
    failed_steps: int  # all-reduce failures counted by the ranks during the drill
    verdict: Verdict
    detail: str


def _workers(cluster: Cluster) -> tuple[str, ...]:
    return tuple(m for j in cluster.policy().jobs for m in j.members)


def _poll(what: str, check: Callable[[], bool], timeout: float) -> float:
    """Poll ``check`` every 0.1 s until true; seconds it took, :class:`LayerError` naming ``what`` on timeout."""
    t0 = time.monotonic()
    while not check():
        if time.monotonic() - t0 > timeout:
            raise LayerError(f"IPsec drill: {what} not observed within {timeout:.0f}s")
        time.sleep(0.1)
    return time.monotonic() - t0


def _tunnel_sa(sas: tuple[IkeSa, ...], tunnel: str) -> IkeSa | None:
    return next((s for s in sas if s.name == tunnel and s.state == "ESTABLISHED" and s.installed()), None)


def _steps_after(sampler: Sampler, workers: tuple[str, ...], t: float, n: int) -> bool:
    return all(sum(1 for x in sampler.progress_times(w, "steps") if x > t) >= n for w in workers)


def rekey_under_load(cluster: Cluster, *, steps_after: int = 3, timeout: float = 30.0) -> tuple[RekeyResult, ...]:
    """Rekey the first tunnel's CHILD SA, then its IKE SA, while the job's all-reduce runs; judge each."""
    site = cluster.site()
    tunnel, node = sorted(ipsec_run.initiators(site).items())[0]
    h = ipsec_run.node_handle(site, node)
    workers = _workers(cluster)
    out: list[RekeyResult] = []
    with Sampler(cluster, workers) as sampler:
        start = time.time()
        # a baseline of steps before the first rekey, observed rather than slept for
        _poll("a baseline of 3 steps per rank", lambda: _steps_after(sampler, workers, start, 3), timeout)
        for kind in ("child", "ike"):
            sa = _tunnel_sa(h.sas(), tunnel)
            if sa is None:
                raise LayerError(f"IPsec tunnel {tunnel} has no installed SA on {node} before the {kind} rekey")
            old = str(sa.uniqueid) if kind == "ike" else sa.installed()[-1].spi_out
            first = len(sampler.samples)
            t0 = time.time()
            ipsec_run.rekey(site, tunnel, ike=kind == "ike")

            def rekeyed(kind: str = kind, old: str = old) -> bool:
                now = _tunnel_sa(h.sas(), tunnel)
                if now is None:
                    return False
                if kind == "ike":
                    return str(now.uniqueid) != old
                return all(c.spi_out != old for c in now.installed())

            took = _poll(f"the {kind} rekey of {tunnel}", rekeyed, timeout)
            t1 = time.time()
            def stepped(t1: float = t1) -> bool:
                return _steps_after(sampler, workers, t1, steps_after)

            _poll(f"{steps_after} steps per rank after the {kind} rekey", stepped, timeout)
            t_end = time.time()
            now = _tunnel_sa(h.sas(), tunnel)
            new = "" if now is None else str(now.uniqueid) if kind == "ike" else now.installed()[-1].spi_out
            steps = {w: sampler.progress_times(w, "steps") for w in workers}
            before = [b - a for w in workers for a, b in zip(steps[w], steps[w][1:], strict=False) if b < t0]
            baseline = statistics.median(before) if before else 0.0
            stall = max(max_gap(steps[w], t0, t_end) for w in workers)
            failed = sum(sampler.value(w, "allreduce_failed", -1) - sampler.value(w, "allreduce_failed", first)
                         for w in workers)
            survived = cluster.workers_alive() and failed == 0
            ok = survived and new not in ("", old)
            out.append(RekeyResult(
                kind, tunnel, old, new, round(took, 3), survived, round(stall, 3), round(baseline, 3), failed,
                Verdict.PASS if ok else Verdict.FAIL,
                f"{kind.upper()} SA of {tunnel} rekeyed by swanctl --rekey on {node} ({old} → {new}) in {took:.2f}s; "
                f"{failed} failed all-reduce steps; longest step gap {stall:.2f}s (baseline step {baseline:.2f}s)",
            ))
    return tuple(out)


def _refusal(log: str) -> str:
    """The most specific refusal charon logged (revocation before a generic authentication failure)."""
    lines = [line for line in log.splitlines() if "successful" not in line]
    for marker in _REFUSALS:
        hit = next((line for line in reversed(lines) if marker in line), None)
        if hit is not None:
            return hit.split("]", 1)[-1].strip()
    return "no refusal in charon's log"


def _bad_credential(cluster: Cluster, kind: str, identity: str, work: Path, good: Path) -> Path:
    """A credential for ``identity`` that must be refused: one of a foreign CA, or a revoked one of the cluster CA."""
    store = StateStore(cluster.site().name)
    d = work / f"ipsec-{kind}"
    shutil.rmtree(d, ignore_errors=True)
    if kind == "foreign-ca":
        # the same identity and key type from a CA nobody trusts; the node keeps trusting the cluster CA
        froot = work / "ipsec-foreign-ca-root"
        shutil.rmtree(froot, ignore_errors=True)
        pki.init_ca(froot, pki.parse_identity(identity).cluster, lifetime=pki.parse_duration("1d"))
        pki.issue(froot, identity, lifetime=pki.parse_duration("1h"), out_dir=d)
    elif kind == "revoked":
        pdir = ipsec_run.pki_dir(store)
        pki.issue(pdir, identity, lifetime=pki.parse_duration("1h"), out_dir=d)
        pki.revoke(pdir, d / "cert.pem")
    else:
        raise LayerError(f"unknown IPsec credential drill {kind!r}; one of foreign-ca, revoked")
    shutil.copy2(good / "ca.pem", d / "ca.pem")
    return d


def _push(cluster: Cluster, node: str, cdir: Path) -> None:
    """Give ``node`` the credential in ``cdir`` and every node the current CRL; reload credentials and connections."""
    site = cluster.site()
    crl = pki.crl(ipsec_run.pki_dir(StateStore(site.name)))
    for n in sorted(StateStore(site.name).read().nodes.get(ipsec_run.LAYER, [])):
        h = ipsec_run.node_handle(site, n)
        if n == node:
            h.put_credential(cdir, crl)
        else:
            h.rt.put(n, f"{h.directory}/swanctl/x509crl/ca.crl", crl, mode=0o644)
        h.swanctl("--load-creds", "--clear")  # else the old certificate stays loaded beside the new
        if n == node:
            h.swanctl("--load-conns")


def fail_closed_ipsec(cluster: Cluster, policy: Policy, work: Path, *, kind: str = "revoked", seconds: float = 3.0,
                      timeout: float = 30.0) -> FailClosedResult:
    """Give a tunnel's responder a ``revoked`` or ``foreign-ca`` certificate and force a new IKE SA: none may come
    up, the collective must stop, and the capture must hold zero plaintext collective bytes."""
    site = cluster.site()
    info = ipsec_run.enabled_info(site)
    tunnel, a = sorted(ipsec_run.initiators(site).items())[0]
    store = StateStore(site.name)
    b = next(n for n in store.read().nodes.get(ipsec_run.LAYER, []) if n != a and ipsec_run.conn_name(a, n) == tunnel)
    good = ipsec_run.cred_dir(store, b)
    identity = f"spiffe://{info['cluster']}/node/{b}"
    bad = _bad_credential(cluster, kind, identity, work, good)
    ha, addrs = ipsec_run.node_handle(site, a), {site.address(a), site.address(b)}
    drops_before = ipsec_run.strict_counters(site, a)
    flows = None
    windows = 0
    try:
        _push(cluster, b, bad)
        for sa in ha.sas():
            if sa.name == tunnel:
                # --force: delete at once, not after the peer's answer (a busy peer left it waiting past the bound)
                ha.swanctl("--terminate", "--ike-id", str(sa.uniqueid), "--force", timeout=timeout)
        # the old SA is gone and no new one authenticates (observed on both ends)
        _poll(f"{tunnel} without an SA", lambda: _tunnel_sa(ha.sas(), tunnel) is None, timeout)
        # from a status the rank wrote after the SA went: one read now may lag steps taken before it
        steps0 = settled_counter(cluster, a, "steps").value
        # the job's TCP backs off while its packets are dropped: capture again, up to three windows, until the
        # drilled traffic (IKE attempts, any collective) is seen — a drill that saw nothing tried proves nothing
        # An explicit terminate starts no new IKE SA by itself, so the initiator is asked to (its refusal is the
        # point) again and again until the window closes — on a thread, as the capture blocks. One request at
        # the window's start was not enough: a refusal is quick, and on a busy machine it was over before the
        # capture (which waits for every tcpdump to be recording) had begun.
        attempts: list[RunResult] = []
        for windows in range(1, 4):  # noqa: B007 - the count is reported
            closed = threading.Event()

            def ask(closed: threading.Event = closed) -> None:
                while not closed.is_set():
                    attempts.append(ha.attempt("--initiate", "--child", tunnel, timeout=timeout))
                    closed.wait(0.3)

            asker = threading.Thread(target=ask, daemon=True)
            asker.start()
            try:
                flows = capture_flows(cluster, seconds, work / f"failclosed-ipsec-{kind}-{windows}.pcap", policy)
            finally:
                closed.set()
                asker.join(timeout)
            if plaintext_from(flows, "collective", addrs)[1] > 0:
                break
        steps1 = settled_counter(cluster, a, "steps").value
        no_sa = _tunnel_sa(ha.sas(), tunnel) is None and _tunnel_sa(ipsec_run.node_handle(site, b).sas(), tunnel) \
            is None
        drops_after = ipsec_run.strict_counters(site, a)
        # what the refused initiations printed is this drill's own log (charon's file also holds earlier drills)
        log = "\n".join(r.stdout.decode(errors="replace") for r in attempts)
        refused_initiations = sum(1 for r in attempts if r.returncode != 0)
    finally:
        _push(cluster, b, good)
        ha.attempt("--initiate", "--child", tunnel, timeout=timeout)  # judged below by what comes up
        shutil.rmtree(bad, ignore_errors=True)
    ipsec_run.wait_established(site, [a, b], timeout=timeout)
    recovered = wait_progress(cluster, a, "steps", 30.0)
    if flows is None:
        raise LayerError("IPsec drill: no capture was taken")
    plain, seen = plaintext_from(flows, "collective", addrs)
    # a step already in flight when the SA went may still finish
    stopped = steps1 - steps0 <= 1 and no_sa and refused_initiations == len(attempts)
    reason = _refusal(log)
    ok = stopped and plain == 0
    verdict = Verdict.FAIL if not ok else Verdict.PASS if seen > 0 else Verdict.UNKNOWN
    what = "a revoked certificate of the cluster CA" if kind == "revoked" else "a certificate of a foreign CA"
    return FailClosedResult(
        "ipsec", "collective", f"{b} presents {what}", stopped,
        f"IKE {a} → {b}: {reason}", plain, seen, recovered, verdict,
        f"{steps1 - steps0} steps of {a} during {windows} capture window(s) of {seconds:.0f}s; "
        f"{refused_initiations} of {len(attempts)} initiations refused; SA established: "
        f"{not no_sa}; {plain} plaintext collective bytes in {seen} flows"
        f"{'' if seen else ' (no attempt seen: nothing proven)'}; strict-mode drops at {a}: {drops_before} → "
        f"{drops_after}; {'resumed' if recovered else 'did NOT resume'} after its own certificate was restored",
        {"strict_drops_before": drops_before, "strict_drops_after": drops_after, "kind": kind},
    )


__all__ = ["RekeyResult", "fail_closed_ipsec", "rekey_under_load"]
