"""Attestation over a site: verify every node, make the gate say the same, probe the fabric, record it all.

This is the action half (the gate changes the fabric) written against executors only, so ``--target
lab`` and ``--target ssh`` run the same code. Each round: a fresh quote per node; admitted nodes'
addresses are (re)admitted for the policy interval, refused nodes' are revoked at once; every
decision and the gate's action are recorded in the evidence store. With ``drill``, one node is shown
a replay of its own earlier quote first (it must be refused and cut off — the denied side, proven by
a probe), then attested normally again.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ringfence.attest.gate import Gate
from ringfence.attest.interface import AttestError, Decision, Evidence
from ringfence.attest.node import NodeTpm
from ringfence.attest.verifier import Collector, collect, verify
from ringfence.evidence.interface import RecordKind
from ringfence.evidence.store import EvidenceStore
from ringfence.facts.attestation import FORMAT
from ringfence.policy.attestation import Attestation
from ringfence.targets.interface import Host, TargetError

_PROBE = (
    "import socket,sys\n"
    "s=socket.socket(); s.settimeout(float(sys.argv[3]))\n"
    "try:\n s.connect((sys.argv[1], int(sys.argv[2]))); print('connected')\n"
    "except socket.timeout: print('timeout')\n"
    "except ConnectionRefusedError: print('refused')\n"
    "except OSError as e: print('error', e)\n"
)


@dataclass(frozen=True)
class AttestSite:
    """What a round needs: each node's TPM and host, the fabric's gate, and the jobs' rendezvous ports."""

    name: str
    tpms: Mapping[str, NodeTpm]
    hosts: Mapping[str, Host]
    gate: Gate
    jobs: tuple[tuple[str, tuple[str, ...], int], ...]  # (job, ranks in order, rank 0's port)

    def addresses(self) -> dict[str, tuple[str, ...]]:
        """Node → the addresses the gate admits or cuts off."""
        return {n: (h.address,) for n, h in self.hosts.items() if n in self.tpms}


@dataclass(frozen=True)
class Probe:
    """One collective-port probe after the gate acted."""

    source: str
    target: str
    address: str
    port: int
    expected: str  # reached | blocked
    outcome: str  # connected | timeout | refused | error
    detail: str = ""

    @property
    def verdict(self) -> str:
        """pass when the outcome is what the gate should cause; a refused port proves nothing (unknown)."""
        if self.expected == "reached":
            return "pass" if self.outcome == "connected" else "fail"
        return "pass" if self.outcome == "timeout" else "fail" if self.outcome == "connected" else "unknown"


@dataclass(frozen=True)
class Round:
    """One round's decisions (a drill's first), probes and evidence ids."""

    decisions: tuple[Decision, ...]
    probes: tuple[Probe, ...]
    evidence: Mapping[str, str]  # node → evidence id of its decision
    drilled: str | None = None

    @property
    def all_admitted(self) -> bool:
        """Every node admitted at the end of the round."""
        final = {d.node: d.admitted for d in self.decisions}
        return all(final.values())


def _probe_one(site: AttestSite, src: str, dst: str, port: int, expected: str) -> Probe:
    host = site.hosts[src]
    addr = site.hosts[dst].address
    try:
        res = host.executor.run([*host.python, "-c", _PROBE, addr, str(port), "2"], env=host.env, timeout=20)
    except TargetError as exc:
        return Probe(src, dst, addr, port, expected, "error", exc.message)
    words = res.stdout.decode(errors="replace").split()
    outcome = words[0] if words and words[0] in ("connected", "timeout", "refused") else "error"
    return Probe(src, dst, addr, port, expected, outcome, res.stderr.decode(errors="replace")[-200:])


def probe(site: AttestSite, admitted: Mapping[str, bool]) -> list[Probe]:
    """Every rank of each job probes rank 0's rendezvous port (rank 0 probed from rank 1): reached only
    when both ends are admitted."""
    out = []
    for _, ranks, port in site.jobs:
        if len(ranks) < 2:
            continue
        for src in ranks[1:]:
            both = admitted.get(src, False) and admitted.get(ranks[0], False)
            out.append(_probe_one(site, src, ranks[0], port, "reached" if both else "blocked"))
    return out


def _replay(old: Evidence) -> Collector:
    """A collector answering every nonce with ``old`` (the drill's replayed quote)."""
    return lambda _tpm, _nonce, _pcrs: old


def attest_round(site: AttestSite, policy: Attestation, registry: Path, *, store: EvidenceStore | None = None,
                 collector: Collector = collect, do_probe: bool = False, drill: str | None = None) -> Round:
    """One round (see the module docstring)."""
    if drill is not None and drill not in site.tpms:
        raise AttestError(f"--drill {drill}: no such node (nodes: {', '.join(sorted(site.tpms))})")
    addrs = site.addresses()
    members = sorted({a for n in site.tpms for a in addrs.get(n, ())})
    site.gate.install(members)
    tpms = [site.tpms[n] for n in sorted(site.tpms)]
    drill_collector = collector
    if drill is not None:
        old = site.tpms[drill].quote(b"\0" * 32, policy.pcrs)  # a genuine quote, answering a nonce of long ago
        drill_collector = _wrap(collector, drill, _replay(old))
    decisions = verify(tpms, policy, registry, site.name, addresses=addrs, collector=drill_collector)
    ids = _gate_and_record(site, policy, decisions, store, drill)
    probes = probe(site, {d.node: d.admitted for d in decisions}) if do_probe else []
    if drill is not None:
        again = verify([site.tpms[drill]], policy, registry, site.name, addresses=addrs, collector=collector)
        ids.update(_gate_and_record(site, policy, again, store, None))
        final = {d.node: d.admitted for d in decisions} | {d.node: d.admitted for d in again}
        if do_probe:
            probes += probe(site, final)
        decisions = [*decisions, *again]
    return Round(tuple(decisions), tuple(probes), ids, drill)


def _wrap(base: Collector, node: str, special: Collector) -> Collector:
    return lambda tpm, nonce, pcrs: (special if tpm.node == node else base)(tpm, nonce, pcrs)


def _gate_and_record(site: AttestSite, policy: Attestation, decisions: Sequence[Decision],
                     store: EvidenceStore | None, drill: str | None) -> dict[str, str]:
    admit = [a for d in decisions if d.admitted for a in d.addresses]
    revoke = [a for d in decisions if not d.admitted for a in d.addresses]
    site.gate.revoke(revoke)  # first: a refused node is cut off before anyone is (re)admitted
    site.gate.admit(admit, policy.interval_seconds())
    if store is None:
        return {}
    ids: dict[str, str] = {}
    for d in decisions:
        ids[d.node] = store.append(RecordKind.OBSERVATION, "attest", f"node {d.node}", data={
            "admitted": d.admitted, "reasons": list(d.reasons), "addresses": list(d.addresses),
            "clock": list(d.clock) if d.clock else None, "drill": d.node == drill,
            "quote": d.quote.hex(), "signature": d.signature.hex(), "nonce": d.nonce.hex()})
    store.append(RecordKind.ACTION, "attest", f"gate at {site.gate.executor.name}", data={
        "admitted": sorted(admit), "revoked": sorted(revoke), "timeout_s": policy.interval_seconds()})
    return ids


def facts_document(site: AttestSite, policy: Attestation, rnd: Round) -> dict[str, Any]:
    """The ``ringfence-attestation-1`` facts of a round (what ``workload_identity`` reads)."""
    nodes = [{"node": d.node, "admitted": d.admitted, "reasons": list(d.reasons), "addresses": list(d.addresses),
              "drill": d.node == rnd.drilled and not d.admitted, "evidence": rnd.evidence.get(d.node, "")}
             for d in rnd.decisions]
    return {"format": FORMAT, "site": site.name, "generated": datetime.now(UTC).isoformat(),
            "interval": policy.interval, "nodes": nodes,
            "probes": [{**dataclasses.asdict(p), "verdict": p.verdict} for p in rnd.probes]}


def watch(site: AttestSite, policy: Attestation, registry: Path, *, store: EvidenceStore | None = None,
          rounds: int | None = None, report: Callable[[Round], None] = lambda _r: None) -> None:
    """Re-attest every half interval until stopped (or ``rounds`` done): an admission outlives one missed
    round, never two. If this loop dies, admissions lapse by themselves within one interval."""
    done = 0
    while rounds is None or done < rounds:
        started = time.monotonic()
        report(attest_round(site, policy, registry, store=store))
        done += 1
        if rounds is not None and done >= rounds:
            return
        time.sleep(max(0.0, policy.interval_seconds() / 2 - (time.monotonic() - started)))


__all__ = ["AttestSite", "Probe", "Round", "attest_round", "facts_document", "probe", "watch"]
