"""Least-path policy synthesis: from observed flows and an inventory, the minimal approved matrix.

``discover(flows, inventory)`` classifies the flows against the inventory (its zones, nodes, jobs,
services and classes; its ``approved`` may be empty and otherwise only lends its classes to flows
nothing else explains), aggregates them in DuckDB, and proposes one approved entry per (source
selector, destination selector, protocol, port range, class), each with the evidence that justified
it. What must not be approved automatically is *flagged*, not approved: unclassified traffic,
traffic with an end outside the inventory or crossing the trust boundary (egress, and ingress), use
of administrative services from outside the admin zones, storage access by nodes in no job, and
collective-class traffic between ends that share no job.

Selectors are the narrowest that stay correct for the next run: a known service port is a
``service`` destination; sources (and node destinations) become ``job`` when they are ranks of one
job, ``zone`` when every node of a zone (two or more) was seen, else ``node``. A job's collective
becomes ``job → job`` only: its ephemeral-port traffic is approved as the OS ephemeral range within
the job's declared collective ports (ports change every run, so the observed min..max would break the
next one), its fixed ports (the rendezvous store) exactly as seen — or, when the rendezvous was not
observed, torch.distributed's default port, with a note. docs/discover.md has the full reasoning.
"""

from __future__ import annotations

import pyarrow as pa

from ringfence.analyze._discover_build import Builder
from ringfence.analyze._discover_diff import PolicyDiff, RuleChange, diff_approved, diff_json, render_diff
from ringfence.analyze._discover_observe import observe
from ringfence.analyze._discover_render import EVIDENCE_FORMAT, evidence_document, render_yaml, rule_data
from ringfence.analyze._discover_select import Inventory
from ringfence.analyze._discover_types import (
    DEFAULT_EPHEMERAL,
    TORCH_MASTER_PORT,
    DiscoverError,
    DiscoverOptions,
    Evidence,
    FlaggedFlow,
    Proposal,
    ProposedRule,
)
from ringfence.analyze.engine import EngineSpec
from ringfence.policy import Policy


def _check(options: DiscoverOptions, inventory: Policy) -> None:
    zones = {z.name for z in inventory.zones}
    unknown = sorted(set(options.admin_zones or ()) - zones)
    if unknown:
        raise DiscoverError(
            f"admin zone(s) {', '.join(unknown)} not in the inventory", hint=f"zones: {', '.join(sorted(zones))}"
        )
    jobs = {j.name for j in inventory.jobs}
    missing = sorted({job for job, _ in options.rendezvous} - jobs)
    if missing:
        raise DiscoverError(
            f"rendezvous given for job(s) {', '.join(missing)} not in the inventory",
            hint=f"jobs: {', '.join(sorted(jobs)) or 'none'}",
        )


def discover(
    flows: pa.Table, inventory: Policy, options: DiscoverOptions | None = None, *, engine: EngineSpec | None = None
) -> Proposal:
    """Propose the minimal approved matrix for ``flows`` (``FLOW_SCHEMA``) under ``inventory``.

    The proposal's ``policy`` is ``inventory`` with ``approved`` replaced; ``flagged`` lists what a
    human must decide. Per-flow work is one group-by on ``engine`` (DuckDB by default); the rest is
    per aggregated path.
    """
    opt = options or DiscoverOptions()
    _check(opt, inventory)
    builder = Builder(Inventory.of(inventory), opt)
    for o in observe(flows, inventory, opt.ephemeral, engine):
        builder.add(o)
    return builder.finish(flows.num_rows)


__all__ = [
    "DEFAULT_EPHEMERAL",
    "EVIDENCE_FORMAT",
    "TORCH_MASTER_PORT",
    "DiscoverError",
    "DiscoverOptions",
    "Evidence",
    "FlaggedFlow",
    "PolicyDiff",
    "Proposal",
    "ProposedRule",
    "RuleChange",
    "diff_approved",
    "diff_json",
    "discover",
    "evidence_document",
    "render_diff",
    "render_yaml",
    "rule_data",
]
