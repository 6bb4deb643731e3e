"""The live drills of ``ringfence verify keys``: rotation under load, fail-closed, refused credentials.

Each drill measures and returns a record (:mod:`ringfence.secure.verify_types`) whose verdict
follows from the measurements; it always undoes what it broke, also when it fails.

A drill needs more than a site's executors: it watches the training job make progress and captures
the fabric while it breaks a key. What it needs is the small :class:`Cluster` protocol — the lab
provides it, and so can any cluster whose job reports progress — so nothing here knows the lab.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final, Protocol

import pyarrow as pa

from ringfence.analyze import classify
from ringfence.controls.interface import Verdict
from ringfence.observe.flows.pcap import PcapReader
from ringfence.policy import Policy
from ringfence.secure import pki, rotation
from ringfence.secure.layers import tls_run, wireguard_run
from ringfence.secure.layers.interface import LayerError
from ringfence.secure.layers.runtime import Runtime, StateStore
from ringfence.secure.progress import plaintext_from, settled_counter, wait_progress
from ringfence.secure.verify_types import CredentialCheck, FailClosedResult, RotationResult
from ringfence.targets.interface import Site


class Cluster(Protocol):
    """What a drill observes and acts on: the site's hosts, its policy, the job's progress, a fabric capture."""

    def site(self) -> Site:
        """The hosts, each behind its executor."""
        ...

    def policy(self) -> Policy:
        """The cluster's policy (jobs, services, classes)."""
        ...

    def agent_status(self) -> dict[str, dict[str, Any]]:
        """The workload's progress: ``<node>-<agent>`` → ``{"counters": {...}, ...}``."""
        ...

    def capture(self, seconds: float, out_path: Path) -> object:
        """Capture ``seconds`` of the fabric into one pcap at ``out_path``."""
        ...

    def workers_alive(self) -> bool:
        """Whether every training rank still runs."""
        ...


def capture_flows(cluster: Cluster, seconds: float, path: Path, policy: Policy) -> pa.Table:
    """Capture ``seconds`` of the cluster into ``path`` and return the classified flows."""
    cluster.capture(seconds, path)
    return classify(PcapReader().read(path).flows, policy)


def rotate_under_load(cluster: Cluster, *, settle: float = 4.0, evidence: Any = None) -> tuple[RotationResult, ...]:
    """Rotate every enabled layer's keys (TLS certificates, WireGuard keys) while the job runs, and judge it.

    The rotation itself, per layer, is :mod:`ringfence.secure.rotation`'s (also ``encrypt rotate``'s).
    """
    enabled = StateStore(cluster.site().name).read().info
    layers = [layer for layer in rotation.ROTATORS if layer in enabled]
    if not layers:
        return ()
    return rotation.rotate_live(cluster.site(), cluster.policy(), layers, watch=cluster, settle=settle,
                                evidence=evidence)


def fail_closed_wireguard(cluster: Cluster, policy: Policy, work: Path, *, seconds: float = 3.0) -> FailClosedResult:
    """Give one worker a wrong public key for its peer; collective traffic must stop, with zero plaintext."""
    info = StateStore(cluster.site().name).read().info.get("wireguard")
    if not info:
        raise LayerError(f"WireGuard is not enabled in cluster {cluster.site().name}")
    a, b = sorted(info["public_keys"])[:2]
    hb = wireguard_run.node_handle(cluster.site(), b)
    good = info["public_keys"][a]
    wrong = wireguard_run.random_public_key()
    addr_a = cluster.site().address(a)
    drops_before = wireguard_run.strict_counters(cluster.site(), a)
    hb.wg("set", hb.ifname, "peer", wrong, "allowed-ips", f"{addr_a}/32", "endpoint", f"{addr_a}:51820")
    hb.wg("set", hb.ifname, "peer", good, "remove")
    try:
        # counted from a status the rank wrote after the key broke: one read now may lag steps taken before
        steps0 = settled_counter(cluster, a, "steps").value
        # WireGuard retries a handshake only every 5 s (REKEY_TIMEOUT) and the job's TCP backs off, so one
        # short window may hold no attempt at all. Capture again, up to three windows, until the drilled
        # traffic is seen: a drill that saw nothing tried proves nothing (and is judged unknown below).
        windows = 0
        for windows in range(1, 4):  # noqa: B007 - the count is reported
            flows = capture_flows(cluster, seconds, work / f"failclosed-wireguard-{windows}.pcap", policy)
            if plaintext_from(flows, "collective", {addr_a, cluster.site().address(b)})[1] > 0:
                break
        steps1 = settled_counter(cluster, a, "steps").value
        peer = next(p for p in hb.peers() if p.public_key == wrong)
        drops_after = wireguard_run.strict_counters(cluster.site(), a)
    finally:
        hb.wg("set", hb.ifname, "peer", good, "allowed-ips", f"{addr_a}/32", "endpoint", f"{addr_a}:51820")
        hb.wg("set", hb.ifname, "peer", wrong, "remove")
    recovered = wait_progress(cluster, a, "steps", 30.0)
    plain, seen = plaintext_from(flows, "collective", {addr_a, cluster.site().address(b)})
    stopped = steps1 - steps0 <= 1  # a step already on the wire when the key broke may still finish
    error = (
        f"WireGuard {b} → {a}: no handshake with the configured peer key (latest handshake "
        f"{'never' if peer.latest_handshake == 0 else peer.latest_handshake}); the key does not match {a}'s "
        "private key, so the collective stopped"
    )
    ok = stopped and plain == 0
    verdict = Verdict.FAIL if not ok else Verdict.PASS if seen > 0 else Verdict.UNKNOWN
    return FailClosedResult(
        "wireguard",
        "collective",
        f"{b} holds a wrong public key for {a}",
        stopped,
        error,
        plain,
        seen,
        recovered,
        verdict,
        f"{steps1 - steps0} steps of {a} during {windows} capture window(s) of {seconds:.0f}s; {plain} plaintext "
        f"collective bytes in {seen} flows{'' if seen else ' (no attempt seen: nothing proven)'}; "
        f"strict-mode drops at {a}: {drops_before} → {drops_after}; "
        f"{'resumed' if recovered else 'did NOT resume'} after the right key was restored",
        {"strict_drops_before": drops_before, "strict_drops_after": drops_after},
    )


@contextmanager
def _swapped_credential(site: Site, node: str, cert_dir: Path, replacement: Path) -> Iterator[None]:
    """Put ``replacement``'s cert/key/ca into ``cert_dir`` (and onto ``node``) for a while.

    The originals are moved aside on the controller, not copied, and written back to the node at
    the end, also when the drill fails.
    """
    rt = Runtime(site)
    aside = Path(tempfile.mkdtemp(prefix=".aside-", dir=cert_dir.parent))
    os.chmod(aside, 0o700)
    names = ("cert.pem", "key.pem", "ca.pem")
    for n in names:
        os.replace(cert_dir / n, aside / n)
    try:
        for n in names:
            shutil.copy2(replacement / n, cert_dir / n)
        tls_run.push_credential(rt, node, cert_dir)
        yield
    finally:
        for n in names:
            os.replace(aside / n, cert_dir / n)
        shutil.rmtree(aside, ignore_errors=True)
        tls_run.push_credential(rt, node, cert_dir)


#: How long a drill waits for the node to read a shard before it starts, and to try the swapped credential after.
_READY_S: Final = 60.0
_ATTEMPT_S: Final = 30.0


def fail_closed_tls(
    cluster: Cluster, policy: Policy, work: Path, *, node: str = "worker-0", seconds: float = 3.0
) -> FailClosedResult:
    """Give ``node`` a certificate of a foreign CA; its storage traffic must stop, with zero plaintext."""
    info = StateStore(cluster.site().name).read().info.get("tls")
    if not info:
        raise LayerError(f"TLS is not enabled in cluster {cluster.site().name}")
    cert_dir = Path(info["pki"]) / "nodes" / node
    ident = info["nodes"][node]["identity"]
    foreign = tls_run.issue_foreign(work / "foreign", ident)
    # The drill needs the node to *try*: after an earlier drill its worker may still be in TCP back-off on its
    # collective, sending no storage request at all. Start only once it reads again (as observed), and capture
    # windows until it has been refused or has read something — bounded by a deadline, not a count, so a busy
    # machine's slower job is waited for.
    reading = wait_progress(cluster, node, "shards_read", _READY_S)
    t0 = time.time()

    def refused(since: float) -> list[dict[str, Any]]:
        return [
            e
            for e in tls_run.read_events(cluster.site(), since=since)
            if e.get("result") == "refused"
            and (e.get("node") == node or e.get("peer") == cluster.site().address(node))
        ]

    with _swapped_credential(cluster.site(), node, cert_dir, foreign):
        time.sleep(1.0)
        deadline = time.monotonic() + _ATTEMPT_S
        while True:
            t_window = time.time()
            before = cluster.agent_status()[f"{node}-worker"]["counters"]
            flows = capture_flows(cluster, seconds, work / "failclosed-tls.pcap", policy)
            after = cluster.agent_status()[f"{node}-worker"]["counters"]
            # judged on a window that holds the attempt: refused (or, failing closed not at all, read) in it
            if refused(t_window) or after.get("shards_read", 0) > before.get("shards_read", 0):
                break
            if time.monotonic() >= deadline:
                break
    recovered = wait_progress(cluster, node, "shards_read", _READY_S)
    refusals = refused(t0)
    plain, seen = plaintext_from(flows, "storage", {cluster.site().address(node)})
    read = after.get("shards_read", 0) - before.get("shards_read", 0)
    stopped = read == 0 and bool(refusals)
    error = refusals[0]["reason"] if refusals else "no refusal was logged"
    if not refusals and not reading:
        error += f" ({node} read no shard in {_READY_S:.0f}s before the drill: nothing tried the foreign certificate)"
    ok = stopped and plain == 0
    return FailClosedResult(
        "tls",
        "storage",
        f"{node} presents a certificate of a foreign CA",
        stopped,
        error,
        plain,
        seen,
        recovered,
        Verdict.PASS if ok else Verdict.FAIL,
        f"{read} shards read by {node} during the {seconds:.0f}s capture, {len(refusals)} refused connections; "
        f"{plain} plaintext storage bytes from {node} in {seen} flows; "
        f"{'resumed' if recovered else 'did NOT resume'} after its own certificate was restored",
    )


def credential_checks(cluster: Cluster, work: Path, *, node: str = "worker-0") -> tuple[CredentialCheck, ...]:
    """Expired, revoked and foreign-CA credentials are refused by the storage gate; the current one is accepted."""
    store = StateStore(cluster.site().name)
    info = store.read().info.get("tls")
    if not info:
        raise LayerError(f"TLS is not enabled in cluster {cluster.site().name}")
    pdir = Path(info["pki"])
    ident = info["nodes"][node]["identity"]
    url = f"https://{cluster.site().address('storage')}:8080/healthz"
    cases: list[tuple[str, Path, str]] = [("current", pdir / "nodes" / node, "accepted")]
    cases.append(("expired", tls_run.issue_expired(pdir, ident, work / "expired"), "refused"))
    cases.append(("foreign-ca", tls_run.issue_foreign(work / "foreign-check", ident), "refused"))
    revoked_dir = pki.issue(pdir, ident, lifetime=pki.parse_duration("1h"), out_dir=work / "revoked").directory
    pki.revoke(pdir, revoked_dir / "cert.pem")
    cases.append(("revoked", revoked_dir, "refused"))
    out = []
    for kind, cdir, expected in cases:
        res = tls_run.probe_request(cluster.site(), node, cdir, url)
        outcome = "accepted" if res.get("outcome") == "response" and res.get("status") == 200 else "refused"
        fp = pki.show(cdir).fingerprint
        out.append(
            CredentialCheck(
                kind,
                ident,
                fp,
                expected,
                outcome,
                Verdict.PASS if outcome == expected else Verdict.FAIL,
                f"{res.get('outcome')}: {res.get('status', res.get('error', ''))}",
            )
        )
    for d in ("expired", "revoked", "foreign-check"):
        shutil.rmtree(work / d, ignore_errors=True)
    return tuple(out)


def inventory(cluster: Cluster) -> tuple[Mapping[str, Any], ...]:
    """Certificates (by fingerprint) and tunnel keys (by public key) of the layers — never private material."""
    info = StateStore(cluster.site().name).read().info
    out: list[Mapping[str, Any]] = []
    if "tls" in info:
        for node, item in sorted(info["tls"]["nodes"].items()):
            cert = pki.show(Path(info["tls"]["pki"]) / "nodes" / node)
            out.append(
                {
                    "kind": "certificate",
                    "node": node,
                    "identity": item["identity"],
                    "fingerprint": cert.fingerprint,
                    "not_after": cert.not_after.isoformat(),
                }
            )
        out.append({"kind": "ca", "fingerprint": info["tls"]["ca_fingerprint"]})
    if "wireguard" in info:
        out += [
            {"kind": "wireguard", "node": n, "public_key": k}
            for n, k in sorted(info["wireguard"]["public_keys"].items())
        ]
    return tuple(out)


__all__ = [
    "capture_flows",
    "credential_checks",
    "fail_closed_tls",
    "fail_closed_wireguard",
    "inventory",
    "rotate_under_load",
]
