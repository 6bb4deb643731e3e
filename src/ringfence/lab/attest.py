"""The lab as an attestation site: its job ranks, their swtpm, its fabric namespace as the gate."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from ringfence.attest.gate import Gate
from ringfence.attest.node import NodeTpm
from ringfence.attest.run import AttestSite
from ringfence.lab.tpm import reference_allowlist
from ringfence.policy.attestation import Attestation

if TYPE_CHECKING:
    from ringfence.lab.lab import Lab


def attest_site(lab: Lab, nodes: list[str] | None = None) -> AttestSite:
    """The site ``ringfence attest --target lab`` acts on: ``nodes`` (default: every job rank), each with
    its software TPM started (lazily, now) and booted; the gate in the fabric namespace."""
    status = lab.status()
    jobs = tuple((j.name, j.members, j.master_port) for j in status.jobs)
    chosen = nodes or sorted({m for _, members, _ in jobs for m in members})
    paths = lab.ensure_tpm(chosen)
    site = lab.site()
    tpms = {n: NodeTpm(site.executor(n), p.tcti, str(p.work), str(p.event_log)) for n, p in paths.items()}
    return AttestSite(f"lab-{lab.name}", tpms, site.hosts, Gate(lab.fabric_executor()), jobs)


def lab_allowlist(interval: str = "60s") -> Attestation:
    """The lab's allowlist: the stack this machine runs, re-attested every ``interval``."""
    return Attestation.model_validate_json(json.dumps(reference_allowlist(interval)))


__all__ = ["attest_site", "lab_allowlist"]
