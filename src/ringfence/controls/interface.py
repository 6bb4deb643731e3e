"""The control-point family: a control reads policy and facts and returns findings.

A control never gathers or changes anything itself (controls never import targets). Facts it needs
but does not get make its verdict ``unknown`` with the reason — never ``pass``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Protocol

import pyarrow as pa

from ringfence.policy import Policy


class Verdict(StrEnum):
    """The four verdicts, ordered by how much they demand attention."""

    PASS = "pass"
    FAIL = "fail"
    EXEMPT = "exempt"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Finding:
    """One judgement about one subject, with the evidence behind it and what to do."""

    control: str
    verdict: Verdict
    subject: str  # "flow 10.77.1.2:41234 → 10.77.2.5:8080 (storage)", "node aux", "class collective"
    message: str
    evidence: tuple[str, ...] = ()  # evidence-store ids
    remediation: str = ""
    volume: tuple[int, int] | None = None  # (records, bytes) behind a flow finding, exact; None if not a count
    requirement: str = ""  # id of the control's requirement this finding proves or contradicts ("" if none)


class Side(StrEnum):
    """Which half of a control's acceptance a requirement proves."""

    PERMITTED = "permitted"
    DENIED = "denied"


@dataclass(frozen=True)
class Requirement:
    """One named piece of a control's acceptance, and the recorded facts that alone can satisfy it.

    ``facts`` are :class:`Facts` fields, all needed (empty: judged from the policy itself); ``gather``
    is the ``ringfence`` command line that gathers them, named in the ``unknown`` finding when unmet.
    """

    id: str
    side: Side
    text: str
    facts: tuple[str, ...]
    gather: str
    # Whether the policy asks for this piece at all (None: always). A requirement the policy does not ask
    # for is not judged; one it asks for is judged like any other — never skipped because facts are missing.
    needed: Callable[[Policy], bool] | None = None

    def applies(self, policy: Policy) -> bool:
        """Whether ``policy`` asks for this requirement."""
        return self.needed is None or self.needed(policy)


@dataclass(frozen=True)
class ControlMeta:
    """What a control point is, how it is accepted, and how to fix it per enforcement target."""

    id: str  # equals the module name
    title: str
    objective: str
    acceptance: str  # the evidence that accepts it: a permitted AND a denied behaviour
    facts: tuple[str, ...]  # names of the Facts fields it reads
    remediation: Mapping[str, str]  # per target: "nftables", "networkpolicy", "cilium", "process"
    requirements: tuple[Requirement, ...] = ()  # the acceptance as code: pass needs every one met


@dataclass(frozen=True)
class ProbeResult:
    """One reachability probe: from a node to an address/port, and what happened."""

    source: str  # node name
    destination: str  # "node:port" or "ip:port"
    proto: str
    port: int
    expected: str  # "allow" | "deny"
    outcome: str  # "connected" | "timeout" | "reset" | "refused" | "error" | "unreachable" (source host down)
    by_policy: bool | None  # a deny proven to be caused by policy (counter moved / lifts when lifted)
    detail: str = ""
    evidence: tuple[str, ...] = ()
    rule: str | None = None  # approved-flow id for allow probes, drop-rule/counter for deny probes


@dataclass(frozen=True)
class Facts:
    """Everything observed, handed to every control. ``None`` means "not gathered"."""

    now: datetime = field(default_factory=lambda: datetime.now(UTC))
    flows: pa.Table | None = None  # classified flows (CLASSIFIED_SCHEMA)
    flow_evidence: tuple[str, ...] = ()  # evidence ids of the flow observations
    flow_sources: tuple[str, ...] = ()  # e.g. ("pcap:lab.pcap",)
    probes: tuple[ProbeResult, ...] | None = None
    ruleset: Mapping[str, Any] | None = None  # live enforcement state, per node/fabric
    keys: Mapping[str, Any] | None = None  # key/cert inventory and rotation events
    attestation: Mapping[str, Any] | None = None
    bench: Mapping[str, Any] | None = None  # canary comparison
    changes: Sequence[Mapping[str, Any]] | None = None  # applied ruleset versions
    containment: Mapping[str, Any] | None = None  # containment drill results
    rdma: Sequence[Any] | None = None  # RDMA key-hygiene findings of the captures (ringfence.rdma.RdmaFinding)
    traces: Sequence[Mapping[str, Any]] | None = None  # reconstructed flows (ringfence trace)
    drills: Sequence[Mapping[str, Any]] | None = None  # played incident drills (ringfence drill run), one per report
    gateway: Sequence[Mapping[str, Any]] | None = None  # the egress gateway's decisions (its access log)
    partitions: Mapping[str, Any] | None = None  # job partitions probed both ways on the fabric (ringfence partition)
    # When each fact was gathered (Facts field name → aware time). A fact without a time has an unknown
    # age, so no requirement it feeds can pass: freshness is part of the proof.
    taken: Mapping[str, datetime] = field(default_factory=dict)


class Control(Protocol):
    """A control point: metadata and a pure evaluation function."""

    meta: ControlMeta

    def evaluate(self, policy: Policy, facts: Facts) -> list[Finding]:
        """Judge the facts against the policy. Never raises for missing facts: say ``unknown``."""
        ...


@dataclass(frozen=True)
class ControlResult:
    """A control's aggregate verdict and its findings."""

    id: str
    title: str
    verdict: Verdict
    findings: tuple[Finding, ...]
    owner: str = ""


def aggregate(findings: Sequence[Finding]) -> Verdict:
    """fail if any finding fails; else unknown if any is unknown (or there are none);
    else pass if any passes; else exempt."""
    verdicts = {f.verdict for f in findings}
    if Verdict.FAIL in verdicts:
        return Verdict.FAIL
    if not verdicts or Verdict.UNKNOWN in verdicts:
        return Verdict.UNKNOWN
    if Verdict.PASS in verdicts:
        return Verdict.PASS
    return Verdict.EXEMPT


__all__ = [
    "Control",
    "ControlMeta",
    "ControlResult",
    "Facts",
    "Finding",
    "ProbeResult",
    "Requirement",
    "Side",
    "Verdict",
    "aggregate",
]
