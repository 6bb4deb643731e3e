"""The rollout's real parts on any site: TLS (step 1), key rotation (step 2), WireGuard (steps 3, 5), the benchmark.

Everything is built on :mod:`ringfence.secure.layers` and the drills of :mod:`ringfence.secure.drills`,
and acts only through the site's executors — the lab's namespaces or SSH hosts alike. Nothing here
claims a result it did not observe:

* :class:`TlsAction` — enables mutual TLS 1.3 on storage, management and replication
  (``enable_tls``), then captures the fabric and requires, per class, zero plaintext payload bytes
  and TLS on the wire (no traffic of a class: ``unknown``).
* :class:`KeyAction` — rotates every certificate while the job runs (``rotate_under_load``),
  then requires: the job survived, the new fingerprints are the ones in use, the old certificate
  is refused, expired / revoked / foreign-CA credentials are refused while the current one is
  accepted, and no certificate outlives the policy's ``keys.cert_lifetime``.
* :class:`WireguardLayer` — the ``wireguard`` :class:`~ringfence.rollout.interface.CollectiveLayer`:
  userspace wireguard-go in strict mode between the chosen workers; verified by a plaintext probe
  sent between them during a capture (delivered, never seen on the wire, only WireGuard there),
  handshakes and the strict-mode tables; disabled and checked gone on rollback.
* :class:`Benchmarker` — the all-reduce benchmark with one rank on each node, through its executor.
  When the cluster can pause its own job (:class:`Quiet`; the lab can), it does so for the
  measurement so baseline and candidate see the same quiet machine, and notes how many bytes the
  WireGuard tunnel carried meanwhile — proof that a candidate ran over the layer it names.

The cluster is found lazily through a :class:`ClusterRef` (a resolver called on first use), so
zero-argument factories cost nothing until a step actually runs — a refused step touches nothing.
The lab's factories (:mod:`ringfence.lab.rollout`) are one such resolver.
"""

from __future__ import annotations

import contextlib
import random
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import pyarrow as pa

from ringfence.bench.driver import BenchSpec, RankSpec
from ringfence.bench.load import ExecutorLoadProbe
from ringfence.bench.placement import site_ranks
from ringfence.bench.run import BenchRun
from ringfence.controls.interface import Verdict
from ringfence.errors import RingfenceError
from ringfence.evidence import EvidenceStore
from ringfence.policy.model import Layer
from ringfence.rollout.interface import ArmSettings, Outcome, RolloutError
from ringfence.rollout.layers import AllReduceBenchmarker
from ringfence.secure import drills, pki, verify
from ringfence.secure.drills import Cluster
from ringfence.secure.layers import tls, tls_run, wireguard, wireguard_run
from ringfence.secure.layers.interface import LayerError
from ringfence.secure.layers.runtime import Runtime, StateStore
from ringfence.secure.verify_types import CredentialCheck, RotationResult
from ringfence.targets.interface import Process, RunResult, TargetError

__all__ = [
    "PROTECTED_CLASSES",
    "Benchmarker",
    "ClusterRef",
    "KeyAction",
    "Quiet",
    "StepActions",
    "TlsAction",
    "WireguardLayer",
    "step_actions",
]

#: The classes step 1 protects with TLS (the collective is steps 3–5).
PROTECTED_CLASSES: tuple[str, ...] = ("storage", "management", "replication")
_TLS_WIRE = frozenset(tls.SCOPE.wire_protocols)
_WG_WIRE = frozenset(wireguard.SCOPE.wire_protocols)


@runtime_checkable
class Quiet(Protocol):
    """A cluster that can pause its own workload for a measurement (the lab's job can; a real one may not)."""

    def stop_traffic(self) -> None:
        """Pause the workload's traffic."""

    def start_traffic(self, *, wait: bool = True, timeout: float = 90.0) -> None:
        """Resume it (and wait until it flows again)."""


class ClusterRef:
    """A cluster given now, or the one ``resolve`` returns on first use (and keeps)."""

    def __init__(self, cluster: Cluster | None = None, resolve: Callable[[], Cluster] | None = None) -> None:
        if cluster is None and resolve is None:
            raise RolloutError("a rollout action needs a cluster or a way to find one")
        self._cluster, self._resolve = cluster, resolve

    def get(self) -> Cluster:
        """The cluster (resolved once)."""
        if self._cluster is None:
            assert self._resolve is not None
            self._cluster = self._resolve()
        return self._cluster



def _failed(what: str, exc: RingfenceError) -> Outcome:
    hint = f" ({exc.hint})" if exc.hint else ""
    return Outcome(Verdict.FAIL, f"{what}: {exc.message}{hint}", {"error": exc.message})


def _capture(lab: Cluster, seconds: float, workdir: Path | None, name: str) -> tuple[pa.Table, str | None]:
    """Classified flows of ``seconds`` of the lab's traffic; the pcap is kept only in ``workdir``."""
    policy = lab.policy()
    if workdir is not None:
        workdir.mkdir(parents=True, exist_ok=True)
        path = workdir / f"{name}-{datetime.now(UTC):%Y%m%dT%H%M%S}.pcap"
        return drills.capture_flows(lab, seconds, path, policy), str(path)
    with tempfile.TemporaryDirectory(prefix="ringfence-rollout-") as tmp:
        return drills.capture_flows(lab, seconds, Path(tmp) / f"{name}.pcap", policy), None


def _class_row(c: verify.ClassBytes) -> dict[str, Any]:
    return {"verdict": c.verdict.value, "reason": c.reason, "flows": c.flows, "payload": dict(c.payload),
            "protocols": list(c.protocols), "plaintext_flows": list(c.plaintext_flows[:3])}


# --- step 1 ---------------------------------------------------------------------------------------


class TlsAction:
    """Step 1: mutual TLS 1.3 on storage, management and replication, proven by a capture per class."""

    name = "tls on storage, management, replication"

    def __init__(self, lab: ClusterRef, *, evidence: EvidenceStore | None = None,
                 classes: Sequence[str] = PROTECTED_CLASSES, capture_s: float = 5.0,
                 workdir: Path | None = None) -> None:
        """``capture_s`` must cover at least one checkpoint replication (every ~5 worker steps)."""
        self.lab, self.evidence, self.classes = lab, evidence, tuple(classes)
        self.capture_s, self.workdir = capture_s, workdir

    def _in_force(self, lab: Cluster) -> dict[str, Any] | None:
        st = StateStore(lab.site().name).read()
        covered = {c for c, layer in st.classes.items() if layer == Layer.TLS.value}
        nodes = st.nodes.get(Layer.TLS.value, [])
        rt = Runtime(lab.site())
        if set(self.classes) <= covered and nodes and all(rt.alive(f"tls-{n}") for n in nodes):
            info: dict[str, Any] = st.info.get("tls", {})
            return info
        return None

    def apply(self) -> Outcome:
        """Enable TLS on the classes; when it is already in force (sidecars alive), leave it as it is."""
        try:
            lab = self.lab.get()
            info = self._in_force(lab)
            if info is not None:
                return Outcome(Verdict.PASS, f"TLS already in force on {', '.join(self.classes)} on {lab.site().name}",
                               {"classes": list(self.classes), "ca_fingerprint": info.get("ca_fingerprint"),
                                "nodes": info.get("nodes", {}), "changed": False})
            done = tls_run.enable_tls(lab.site(), lab.policy(), self.classes, evidence=self.evidence)
        except RingfenceError as exc:
            return _failed("enabling TLS", exc)
        return Outcome(Verdict.PASS,
                       f"mutual TLS 1.3 on {', '.join(done.services)} ({', '.join(done.classes)}): "
                       f"{len(done.nodes)} sidecars, CA {done.ca_fingerprint[:19]}…",
                       {"classes": list(done.classes), "services": list(done.services),
                        "ca_fingerprint": done.ca_fingerprint, "changed": True,
                        "nodes": {n.node: {"identity": n.identity, "fingerprint": n.fingerprint} for n in done.nodes}})

    def verify(self) -> Outcome:
        """Capture the lab: each class needs zero plaintext payload bytes and TLS seen on the wire."""
        try:
            lab = self.lab.get()
            flows, pcap = _capture(lab, self.capture_s, self.workdir, "step1-tls")
            breakdown = {c.traffic_class: c for c in verify.class_breakdown(flows, lab.policy())}
        except RingfenceError as exc:
            return Outcome(Verdict.UNKNOWN, f"could not capture the fabric: {exc.message}", {"error": exc.message})
        rows = {c: breakdown[c] for c in self.classes}
        data: dict[str, Any] = {"capture_s": self.capture_s, "pcap": pcap,
                                "classes": {c: _class_row(r) for c, r in rows.items()}}
        failed = [f"{c}: {r.reason}" for c, r in rows.items() if r.verdict is Verdict.FAIL]
        no_tls = [c for c, r in rows.items() if r.verdict is Verdict.PASS and not _TLS_WIRE & set(r.protocols)]
        unknown = [f"{c}: {r.reason}" for c, r in rows.items() if r.verdict is Verdict.UNKNOWN]
        if failed or no_tls:
            why = failed + [f"{c}: no TLS seen on the wire (saw {', '.join(rows[c].protocols)})" for c in no_tls]
            return Outcome(Verdict.FAIL, "; ".join(why), data)
        if unknown:
            return Outcome(Verdict.UNKNOWN, "; ".join(unknown), data)
        return Outcome(Verdict.PASS, f"{self.capture_s:g} s capture: " + "; ".join(
            f"{c} {r.payload['encrypted']} encrypted bytes ({'/'.join(sorted(_TLS_WIRE & set(r.protocols)))}), "
            f"0 plaintext" for c, r in rows.items()), data)


# --- step 2 ---------------------------------------------------------------------------------------


class KeyAction:
    """Step 2: rotate the certificates under load, then prove the rotation and the key management."""

    name = "certificate rotation under load"

    def __init__(self, lab: ClusterRef, *, evidence: EvidenceStore | None = None, settle_s: float = 4.0) -> None:
        """``settle_s``: how long the job must keep stepping after the rotation before it is judged."""
        self.lab, self.evidence, self.settle_s = lab, evidence, settle_s
        self._rotation: tuple[RotationResult, ...] | None = None

    def apply(self) -> Outcome:
        """Rotate every enabled layer's keys (TLS certificates; WireGuard keys if on) while the job runs."""
        try:
            lab = self.lab.get()
            if "tls" not in StateStore(lab.site().name).read().info:
                return Outcome(Verdict.FAIL, f"TLS is not enabled on {lab.site().name}: step 1 comes first")
            self._rotation = drills.rotate_under_load(lab, settle=self.settle_s, evidence=self.evidence)
        except RingfenceError as exc:
            return _failed("rotating keys under load", exc)
        rows = [{"layer": r.layer, "nodes": list(r.nodes), "old": list(r.old_ids), "new": list(r.new_ids), "at": r.at}
                for r in self._rotation]
        return Outcome(Verdict.PASS, "; ".join(f"{r.layer}: {len(r.nodes)} credentials replaced at {r.at}"
                                               for r in self._rotation), {"rotated": rows})

    def verify(self) -> Outcome:
        """The rotation's measurements, refused bad credentials, and certificate lifetimes within policy."""
        if not self._rotation:
            return Outcome(Verdict.UNKNOWN, "no rotation was observed by this action: apply it first")
        try:
            lab = self.lab.get()
            with tempfile.TemporaryDirectory(prefix="ringfence-rollout-creds-") as tmp:
                creds = drills.credential_checks(lab, Path(tmp))
            lifetime = pki.parse_duration(lab.policy().keys.cert_lifetime, where="policy keys.cert_lifetime")
            certs = [i for i in drills.inventory(lab) if i.get("kind") == "certificate"]
        except RingfenceError as exc:
            return Outcome(Verdict.UNKNOWN, f"could not check credentials: {exc.message}", {"error": exc.message})
        latest = datetime.now(UTC) + lifetime + timedelta(minutes=5)  # slack for issuing time and clock steps
        too_long = [f"{c['node']} until {c['not_after']}" for c in certs
                    if datetime.fromisoformat(str(c["not_after"])) > latest]
        data = {"rotation": [_rotation_row(r) for r in self._rotation],
                "credentials": [_cred_row(c) for c in creds], "cert_lifetime": str(lifetime),
                "certificates": [dict(c) for c in certs]}
        bad = [f"{r.layer} rotation: {r.detail}" for r in self._rotation if r.verdict is not Verdict.PASS]
        bad += [f"{c.kind} credential {c.outcome}, expected {c.expected} ({c.detail})" for c in creds
                if c.verdict is not Verdict.PASS]
        bad += [f"certificate of {t} outlives the policy's {lifetime}" for t in too_long]
        if not certs:
            bad.append("no certificate found in the lab's inventory")
        if bad:
            return Outcome(Verdict.FAIL, "; ".join(bad), data)
        tls_rot = next((r for r in self._rotation if r.layer == "tls"), self._rotation[0])
        return Outcome(
            Verdict.PASS,
            f"{len(tls_rot.nodes)} certificates rotated under load: job survived (longest step gap "
            f"{tls_rot.stall_s:.2f} s, baseline {tls_rot.baseline_step_s:.2f} s), new fingerprints in use, old "
            f"certificate refused; {', '.join(c.kind for c in creds if c.expected == 'refused')} credentials refused, "
            f"current accepted; {len(certs)} certificates live ≤ {lifetime}", data)


def _rotation_row(r: RotationResult) -> dict[str, Any]:
    row = asdict(r)
    row["verdict"] = r.verdict.value
    return row


def _cred_row(c: CredentialCheck) -> dict[str, Any]:
    row = asdict(c)
    row["verdict"] = c.verdict.value
    return row


@dataclass(frozen=True)
class StepActions:
    """What ``rollout advance --actions`` loads: the step-1 and step-2 actions."""

    tls: TlsAction
    keys: KeyAction


def step_actions(ref: ClusterRef, *, evidence: EvidenceStore | None = None,
                 workdir: Path | None = None) -> StepActions:
    """Steps 1–2 on the cluster ``ref`` finds (when a step runs)."""
    return StepActions(TlsAction(ref, evidence=evidence, workdir=workdir), KeyAction(ref, evidence=evidence))


# --- steps 3 and 5 --------------------------------------------------------------------------------


def _run(argv: list[str]) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(argv, capture_output=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RolloutError(f"cannot run {argv[0]}: {exc}") from exc


_MARKER = b"RINGFENCE-ROLLOUT-PLAINTEXT-PROBE "
# The probe's two ends, run with the venv's python in the nodes' namespaces (no torch: starts in ~0.1 s).
_SERVER = """
import socket, sys
srv = socket.create_server((sys.argv[1], int(sys.argv[2])))
srv.settimeout(30)
conn, _ = srv.accept()
conn.settimeout(30)
total = 0
try:
    while chunk := conn.recv(65536):
        total += len(chunk)
except OSError:
    pass
print(total, flush=True)
"""
_CLIENT = """
import socket, sys, time
marker = sys.argv[3].encode()
chunk = marker * (16384 // len(marker))
deadline = time.monotonic() + 10
while True:
    try:
        conn = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
        break
    except OSError:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.1)
end = time.monotonic() + 60
while time.monotonic() < end:  # until stopped: the capture's start-up time is not known here
    conn.sendall(chunk)
    time.sleep(0.02)
"""


def _strict(lab: Cluster, nodes: Sequence[str]) -> tuple[dict[str, dict[str, int]], list[str]]:
    """Strict-mode drop counters per node, and the nodes whose strict-mode table is missing."""
    drops: dict[str, dict[str, int]] = {}
    missing: list[str] = []
    for n in nodes:
        try:
            drops[n] = wireguard_run.strict_counters(lab.site(), n)
        except LayerError:
            missing.append(n)
    return drops, missing


def _ring(nodes: Sequence[str]) -> list[tuple[str, str]]:
    """Probe pairs: each node to the next (one pair for two nodes)."""
    order = list(nodes)
    if len(order) < 3:
        return [(order[0], order[1])] if len(order) == 2 else []
    return list(zip(order, order[1:] + order[:1], strict=True))


class _Probes:
    """Plaintext marker streams between node pairs, for as long as the ``with`` block runs."""

    def __init__(self, lab: Cluster, pairs: Sequence[tuple[str, str]], directory: Path) -> None:
        self.lab, self.pairs, self.directory = lab, list(pairs), directory
        self.delivered: dict[tuple[str, str], int] = {}
        self._running: list[tuple[tuple[str, str], Process, Process, Path]] = []

    def __enter__(self) -> _Probes:
        try:
            for i, (a, b) in enumerate(self.pairs):
                port = str(random.randint(40000, 49999))
                out = self.directory / f"probe-{i}.out"
                site = self.lab.site()
                server = site.executor(b).spawn([*site.host(b).python, "-c", _SERVER, site.address(b), port],
                                                stdout=out, stderr=self.directory / f"probe-{i}.server.err")
                client = site.executor(a).spawn(
                    [*site.host(a).python, "-c", _CLIENT, site.address(b), port, _MARKER.decode()],
                    stderr=self.directory / f"probe-{i}.client.err")
                self._running.append(((a, b), server, client, out))
        except BaseException:
            self._stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop()

    def _stop(self) -> None:
        for pair, server, client, out in self._running:
            client.stop(timeout=2.0)  # its socket closes: the server reads EOF, prints its count, exits
            deadline = time.monotonic() + 5.0
            while server.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            server.stop(timeout=2.0)
            text = out.read_text(errors="replace").strip() if out.exists() else ""
            self.delivered[pair] = int(text) if text.isdigit() else 0
        self._running = []


class WireguardLayer:
    """WireGuard (userspace wireguard-go, strict mode) on the collective path between lab workers."""

    name = "wireguard"
    encrypts = True

    def __init__(self, lab: ClusterRef, *, evidence: EvidenceStore | None = None, verify_s: float = 3.0,
                 workdir: Path | None = None) -> None:
        """``lab``: the cluster (found on first use)."""
        self.lab = lab
        self.evidence, self.verify_s, self.workdir = evidence, verify_s, workdir

    @staticmethod
    def _on(lab: Cluster) -> set[str]:
        return set(StateStore(lab.site().name).read().nodes.get(Layer.WIREGUARD.value, []))

    def enable(self, nodes: Sequence[str]) -> Outcome:
        """Tunnel ``nodes`` (with any already tunnelled: the tunnel set is rebuilt on the union)."""
        try:
            lab = self.lab.get()
            before = self._on(lab)
            if set(nodes) <= before:
                return Outcome(Verdict.PASS, f"WireGuard already on {', '.join(sorted(before))}",
                               {"nodes": sorted(before), "changed": False})
            if before:
                # the lab driver builds a tunnel set in one go; widening it means rebuilding it
                wireguard_run.disable_wireguard(lab.site())
            done = wireguard_run.enable_wireguard(lab.site(), sorted(before | set(nodes)), strict=True,
                                              evidence=self.evidence)
            wireguard_run.set_collective_class(lab.site(), ["collective"])
        except RingfenceError as exc:
            return _failed("enabling WireGuard", exc)
        return Outcome(Verdict.PASS,
                       f"WireGuard (wireguard-go, strict mode) between {', '.join(done.nodes)} on {done.interface}",
                       {"nodes": list(done.nodes), "interface": done.interface, "public_keys": done.public_keys,
                        "strict": True, "rebuilt_from": sorted(before), "changed": True})

    def verify(self, nodes: Sequence[str]) -> Outcome:
        """Probe and capture: a known plaintext sent between the nodes never shows on the wire, WireGuard does.

        A probe streams a marker text over TCP between the nodes (a ring of them) while the lab is
        captured, so the proof does not depend on the lab's own job sending at that moment (its gloo
        connections may sit in TCP back-off for seconds after the tunnel comes up). Then: every probe
        delivered, the marker absent from the capture, zero plaintext payload bytes and WireGuard
        bytes between the nodes, every peer handshook, strict mode in place.
        """
        try:
            lab = self.lab.get()
            missing = sorted(set(nodes) - self._on(lab))
            if missing:
                return Outcome(Verdict.FAIL, f"WireGuard is not enabled on {', '.join(missing)}", {"missing": missing})
            with tempfile.TemporaryDirectory(prefix="ringfence-rollout-wg-") as tmp:
                if self.workdir is not None:
                    self.workdir.mkdir(parents=True, exist_ok=True)
                # Right after the tunnel comes up, a probe's SYN can be lost while the routes switch and
                # sit in TCP back-off past a short capture; on a loaded machine the probe programs also start
                # slowly. One more round (a fresh probe, a fresh capture) separates that from a dead tunnel.
                for attempt in (1, 2):
                    pcap = (self.workdir or Path(tmp)) / (
                        f"wireguard-verify-{datetime.now(UTC):%Y%m%dT%H%M%S}-{attempt}.pcap"
                    )
                    round_dir = Path(tmp) / f"round-{attempt}"  # probe outputs are appended to: one dir a round
                    round_dir.mkdir()
                    with _Probes(lab, _ring(nodes), round_dir) as probes:
                        flows = drills.capture_flows(lab, self.verify_s, pcap, lab.policy())
                    marker_seen = pcap.read_bytes().count(_MARKER)
                    if marker_seen or all(probes.delivered.values()):
                        break
            peers = {n: wireguard_run.node_handle(lab.site(), n).peers() for n in nodes}
            drops, no_strict = _strict(lab, nodes)
        except RingfenceError as exc:
            return Outcome(Verdict.UNKNOWN, f"could not observe WireGuard: {exc.message}", {"error": exc.message})
        addrs = {lab.site().address(n) for n in nodes}
        rows = [r for r in flows.select(["src", "dst", "protection", "protocol", "payload_bytes"]).to_pylist()
                if r["src"] in addrs and r["dst"] in addrs]
        plain = sum(int(r["payload_bytes"] or 0) for r in rows if r["protection"] == "plaintext")
        tunnelled = sum(int(r["payload_bytes"] or 0) for r in rows if r["protocol"] in _WG_WIRE)
        protocols = sorted({str(r["protocol"]) for r in rows if r["protocol"]})
        silent = [f"{n} → {p.endpoint}" for n, ps in peers.items() for p in ps
                  if p.latest_handshake == 0 and p.allowed_ips.split("/")[0] in addrs]
        undelivered = [f"{a} → {b}" for (a, b), got in probes.delivered.items() if not got]
        data = {"pcap": str(pcap) if self.workdir else None, "capture_s": self.verify_s,
                "probes": {f"{a}->{b}": got for (a, b), got in probes.delivered.items()},
                "marker_seen": marker_seen, "plaintext_payload_bytes": plain, "wireguard_payload_bytes": tunnelled,
                "protocols": protocols, "strict_drops": drops,
                "peers": {n: [asdict(p) for p in ps] for n, ps in peers.items()}}
        if marker_seen or plain:
            return Outcome(Verdict.FAIL, f"plaintext between {', '.join(nodes)} with WireGuard on: the probe's marker "
                                         f"seen {marker_seen} times, {plain} plaintext payload bytes "
                                         f"(protocols {', '.join(protocols)})", data)
        if no_strict:
            return Outcome(Verdict.FAIL, f"strict mode is missing on {', '.join(no_strict)}: a broken tunnel would "
                                         "fall back to plaintext", data)
        if undelivered:
            return Outcome(Verdict.FAIL, f"the tunnel carries nothing: probe {', '.join(undelivered)} not delivered "
                                         f"(handshakes missing: {', '.join(silent) or 'none'})", data)
        if not tunnelled or silent:
            why = "no WireGuard traffic between them in the capture" if not tunnelled else \
                f"no handshake: {', '.join(silent)}"
            return Outcome(Verdict.UNKNOWN, f"WireGuard on {', '.join(nodes)} not proven: {why}", data)
        sent = sum(probes.delivered.values())
        return Outcome(Verdict.PASS, f"{self.verify_s:g} s capture: a {sent}-byte plaintext probe between "
                                     f"{', '.join(nodes)} arrived but never showed on the wire; {tunnelled} WireGuard "
                                     f"payload bytes, 0 plaintext; every peer handshook; strict mode on", data)

    def disable(self, nodes: Sequence[str]) -> Outcome:
        """Take ``nodes`` out of the tunnel (all of it when fewer than two remain) and check nothing is left."""
        try:
            lab = self.lab.get()
            keep = sorted(self._on(lab) - set(nodes))
            wireguard_run.disable_wireguard(lab.site())
            if len(keep) >= 2:
                wireguard_run.enable_wireguard(lab.site(), keep, strict=True, evidence=self.evidence)
                wireguard_run.set_collective_class(lab.site(), ["collective"])
            left = {n: self._residue(lab, n) for n in nodes}
            # a stopped wireguard-go takes its TUN interface with it when the process is gone, which on a busy
            # host can lag the stop: observe until nothing is left (or the deadline), never judge the first look
            deadline = time.monotonic() + 15.0
            while any(left.values()) and time.monotonic() < deadline:
                time.sleep(0.2)
                left = {n: self._residue(lab, n) for n in nodes}
        except RingfenceError as exc:
            return _failed("disabling WireGuard", exc)
        left = {n: what for n, what in left.items() if what}
        data = {"nodes": list(nodes), "still_tunnelled": keep, "residue": left}
        if left:
            return Outcome(Verdict.FAIL, "WireGuard left behind: " + "; ".join(
                f"{n}: {', '.join(w)}" for n, w in left.items()), data)
        return Outcome(Verdict.PASS, f"WireGuard off on {', '.join(nodes)}: daemons stopped, interface, strict-mode "
                                     "table, policy rule and routes gone" +
                       (f"; still tunnelled: {', '.join(keep)}" if len(keep) >= 2 else ""), data)

    def _residue(self, lab: Cluster, node: str) -> list[str]:
        site = lab.site()
        ex = site.executor(node)

        def run(argv: list[str]) -> RunResult:
            try:
                return ex.run(argv, timeout=20)
            except TargetError as exc:
                raise RolloutError(f"cannot inspect {node}: {exc.message}") from exc

        out = []
        ifname = wireguard_run.interface_name(site)
        if run(["ip", "link", "show", "dev", ifname]).returncode == 0:
            out.append(f"interface {ifname}")
        if run(["nft", "list", "table", "inet", "rf_wg"]).returncode == 0:
            out.append("strict-mode table")
        if f"lookup {wireguard.TABLE}" in run(["ip", "rule", "show"]).stdout.decode(errors="replace"):
            out.append(f"policy rule to table {wireguard.TABLE}")
        procs = StateStore(site.name).read().processes
        if any(p.layer == Layer.WIREGUARD.value and p.node == node for p in procs):
            out.append("wireguard-go daemon")
        return out

    def arm(self, nodes: Sequence[str]) -> ArmSettings:
        """Unchanged: the tunnel carries the workers' own addresses (policy routing), so gloo needs nothing new."""
        return ArmSettings()


# --- the benchmark --------------------------------------------------------------------------------


def _tunnel_bytes(lab: Cluster, nodes: Sequence[str]) -> dict[str, int] | None:
    """rx+tx bytes of each tunnelled node's peers among ``nodes``; None when WireGuard is not on all of them."""
    on = WireguardLayer._on(lab)
    if not set(nodes) <= on:
        return None
    addrs = {lab.site().address(n) for n in nodes}
    return {n: sum(p.rx_bytes + p.tx_bytes for p in wireguard_run.node_handle(lab.site(), n).peers()
                   if p.allowed_ips.split("/")[0] in addrs) for n in nodes}


class Benchmarker:
    """The all-reduce benchmark on lab nodes (one rank in each node's namespace), on a quiet lab."""

    def __init__(self, spec: BenchSpec, lab: ClusterRef, *, quiet: bool = True,
                 traffic_timeout_s: float = 90.0) -> None:
        """``quiet``: pause the cluster's own traffic while measuring, when it can (restarted after, also on
        failure)."""
        self.spec, self.lab, self.quiet, self.traffic_timeout_s = spec, lab, quiet, traffic_timeout_s
        self.last_tunnel_bytes: Mapping[str, int] | None = None
        self._held = 0  # depth of hold(): only the outermost pauses and resumes the cluster

    def _ranks(self, nodes: Sequence[str]) -> list[RankSpec]:
        return site_ranks(self.lab.get().site(), nodes)

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """Keep the cluster quiet for every measurement in the block (one pause for a whole interleaved run)."""
        lab = self.lab.get()
        quiet = lab if self.quiet and isinstance(lab, Quiet) and not self._held else None
        if quiet is not None:
            quiet.stop_traffic()
        self._held += 1
        try:
            yield
        finally:
            self._held -= 1
            if quiet is not None:
                quiet.start_traffic(wait=True, timeout=self.traffic_timeout_s)

    def load_probe(self, nodes: Sequence[str]) -> ExecutorLoadProbe:
        """A host-load probe reading ``/proc`` on ``nodes`` through the cluster's executors."""
        site = self.lab.get().site()
        return ExecutorLoadProbe({n: site.executor(n) for n in nodes})

    def measure(self, nodes: Sequence[str], layer: str, arm: ArmSettings, *, repeats: int | None = None) -> BenchRun:
        """One benchmark run labelled ``layer``; its notes say what the tunnel carried meanwhile."""
        lab = self.lab.get()
        notes: list[str] = []
        spec = self.spec if repeats is None else replace(self.spec, repeats=repeats)
        with self.hold():
            if self.quiet and isinstance(lab, Quiet):
                notes.append("the cluster's own traffic was stopped during the measurement")
            before = _tunnel_bytes(lab, nodes)
            run = AllReduceBenchmarker(spec, self._ranks).measure(nodes, layer, arm)
            after = _tunnel_bytes(lab, nodes)
        self.last_tunnel_bytes = None
        if before is not None and after is not None:
            self.last_tunnel_bytes = carried = {n: after[n] - before[n] for n in nodes}
            notes.append("WireGuard carried " + ", ".join(f"{n} {v / 2**20:.1f} MiB" for n, v in carried.items())
                         + " (rx+tx) during the measurement")
        else:
            notes.append(f"no WireGuard tunnel between {', '.join(nodes)}: the ranks used the plain path")
        if layer == WireguardLayer.name:
            # each rank sends at least one message's worth per all-reduce (2 ranks: exactly size, plus headers)
            least = sum(spec.sizes) * (spec.warmup + spec.iterations) * spec.repeats
            short = [n for n in nodes if self.last_tunnel_bytes is None or self.last_tunnel_bytes[n] < least]
            if short:
                raise RolloutError(f"a run labelled {layer!r} did not go through the tunnel at {', '.join(short)} "
                                   f"(it needs ≥ {least} bytes there; {notes[-1]}): it measures nothing of the layer")
        return replace(run, notes=run.notes + tuple(notes))
