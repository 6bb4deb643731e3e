"""The values discovery produces: options, evidence, proposed rules, flagged flows, the proposal."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ringfence.errors import RingfenceError
from ringfence.policy import ApprovedFlow, Policy

#: Linux's default ``net.ipv4.ip_local_port_range``: where listeners bound to port 0 (gloo's pair
#: sockets, NCCL's bootstrap without NCCL_PORT_RANGE) and outgoing connections get their ports.
DEFAULT_EPHEMERAL = (32768, 60999)
#: torch.distributed's default ``MASTER_PORT`` (torchrun ``--master-port``): the rendezvous store.
TORCH_MASTER_PORT = 29500

#: Order of classes in a proposal, for stable, readable output.
CLASS_ORDER = ("collective", "storage", "management", "replication", "unclassified")


class DiscoverError(RingfenceError):
    """Discovery cannot run as asked (an option naming a zone or job the inventory lacks …)."""


@dataclass(frozen=True)
class DiscoverOptions:
    """How discovery turns observations into rules (see docs/discover.md for the reasoning).

    ``ephemeral``: the cluster's OS ephemeral port range (not this machine's: discovery may run
    anywhere). ``admin_zones``: zones whose nodes may use administrative services (None: the zone
    called ``admin``, if any). ``rendezvous``: (job, port) pairs of rendezvous ports known to be used;
    ``assume_rendezvous``: the port assumed for a job whose rendezvous was not observed (None: none).
    ``max_fixed_runs``: a job's fixed collective ports are kept as at most this many ranges.
    ``min_zone_nodes``: a zone selector needs at least this many nodes seen.
    """

    ephemeral: tuple[int, int] = DEFAULT_EPHEMERAL
    admin_zones: tuple[str, ...] | None = None
    rendezvous: tuple[tuple[str, int], ...] = ()
    assume_rendezvous: int | None = TORCH_MASTER_PORT
    max_fixed_runs: int = 4
    min_zone_nodes: int = 2

    def __post_init__(self) -> None:
        lo, hi = self.ephemeral
        if not 1 <= lo <= hi <= 65535:
            raise DiscoverError(f"ephemeral port range {lo}-{hi} is not inside 1-65535")
        for job, port in self.rendezvous:
            if not 1 <= port <= 65535:
                raise DiscoverError(f"rendezvous port {port} of job {job} is not inside 1-65535")
        if self.assume_rendezvous is not None and not 1 <= self.assume_rendezvous <= 65535:
            raise DiscoverError(f"assumed rendezvous port {self.assume_rendezvous} is not inside 1-65535")
        if self.max_fixed_runs < 1 or self.min_zone_nodes < 1:
            raise DiscoverError("max_fixed_runs and min_zone_nodes must be at least 1")


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if value < 1000 or unit == "TB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    raise AssertionError("unreachable")


def iso(ts: datetime | None) -> str | None:
    """``2026-11-30T10:00:00.123Z`` (milliseconds), or None."""
    if ts is None:
        return None
    return ts.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts.microsecond // 1000:03d}Z"


def _names(names: tuple[str, ...], limit: int = 6) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" (+{len(names) - limit} more)" if len(names) > limit else "")


@dataclass(frozen=True)
class Evidence:
    """What justified a rule or a flag: flows, bytes, when, who was seen, which ports."""

    flows: int
    bytes: int
    first_seen: datetime | None
    last_seen: datetime | None
    sources: tuple[str, ...]
    destinations: tuple[str, ...]
    port_lo: int | None
    port_hi: int | None

    def merge(self, other: Evidence) -> Evidence:
        """Both pieces of evidence together."""

        firsts = [t for t in (self.first_seen, other.first_seen) if t is not None]
        lasts = [t for t in (self.last_seen, other.last_seen) if t is not None]
        los = [p for p in (self.port_lo, other.port_lo) if p is not None]
        his = [p for p in (self.port_hi, other.port_hi) if p is not None]
        return Evidence(
            flows=self.flows + other.flows,
            bytes=self.bytes + other.bytes,
            first_seen=min(firsts, default=None),
            last_seen=max(lasts, default=None),
            sources=tuple(sorted({*self.sources, *other.sources})),
            destinations=tuple(sorted({*self.destinations, *other.destinations})),
            port_lo=min(los, default=None),
            port_hi=max(his, default=None),
        )

    def summary(self) -> str:
        """One line: ``68 flows, 9.1 MB, 10:00:01Z … 10:00:09Z; seen a, b → c; ports 8080``."""
        when = f"{iso(self.first_seen)} … {iso(self.last_seen)}" if self.first_seen else "time unknown"
        ports = ""
        if self.port_lo is not None:
            ports = f"; ports {self.port_lo}" + (f"-{self.port_hi}" if self.port_hi != self.port_lo else "")
        return (
            f"{self.flows} flow(s), {_size(self.bytes)}, {when}; "
            f"seen {_names(self.sources)} → {_names(self.destinations)}{ports}"
        )

    def as_json(self) -> dict[str, object]:
        """The evidence as JSON-ready data."""
        return {
            "flows": self.flows,
            "bytes": self.bytes,
            "first_seen": iso(self.first_seen),
            "last_seen": iso(self.last_seen),
            "sources": list(self.sources),
            "destinations": list(self.destinations),
            "observed_ports": None if self.port_lo is None else [self.port_lo, self.port_hi],
        }


@dataclass(frozen=True)
class ProposedRule:
    """One proposed approved flow, why its selectors and ports are what they are, and its evidence.

    ``evidence`` is None only for a rule proposed without observation (an assumed rendezvous port);
    ``notes`` then says so.
    """

    rule: ApprovedFlow
    evidence: Evidence | None
    rationale: str
    protection: str
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class FlaggedFlow:
    """Observed traffic that discovery refuses to approve: a human decides.

    ``suggested`` is the entry that would approve it (None for unclassified traffic, which must be
    classified first).
    """

    reasons: tuple[str, ...]
    source: str
    destination: str
    proto: str
    ports: str | None
    traffic_class: str
    service: str | None
    evidence: Evidence
    suggested: ApprovedFlow | None

    def describe(self) -> str:
        """``aux (workload) → mgmt:22/tcp [mgmt-ssh, management]: reason; reason``."""
        port = f":{self.ports}" if self.ports else ""
        what = ", ".join(x for x in (self.service, self.traffic_class) if x)
        return f"{self.source} → {self.destination}{port}/{self.proto} [{what}]: {'; '.join(self.reasons)}"


@dataclass(frozen=True)
class Proposal:
    """The result of discovery: the inventory with ``approved`` replaced by the proposal."""

    policy: Policy
    rules: tuple[ProposedRule, ...]
    flagged: tuple[FlaggedFlow, ...]
    notes: tuple[str, ...]
    options: DiscoverOptions
    flows: int


__all__ = [
    "CLASS_ORDER",
    "DEFAULT_EPHEMERAL",
    "TORCH_MASTER_PORT",
    "DiscoverError",
    "DiscoverOptions",
    "Evidence",
    "FlaggedFlow",
    "ProposedRule",
    "Proposal",
    "iso",
]
