"""The trace document (``ringfence trace -o``): frozen, strict models, so a consumer can rely on every key."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

Sample = Literal["allowed", "denied"]
#: What decided the flow: a rule the policy names, the default drop (no rule names it), containment, audit.
DecisionState = Literal["named-rule", "default-drop", "containment", "audit", "hubble-forwarded", "hubble-dropped"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TracedFlow(_Frozen):
    """The 5-tuple, as its initiator sent it, and its Community ID (the key every source joins on)."""

    src: str
    dst: str
    sport: int | None
    dport: int | None
    proto: int
    community_id: str | None
    first_seen: str
    last_seen: str


class Decision(_Frozen):
    """The firewall's decision: the policy rule (None: no rule named it), verdict, version in force then."""

    rule: str | None
    verdict: str
    policy_version: str | None
    state: DecisionState
    point: str | None  # the enforcement point that logged it first
    time: str
    explanation: str


class PointDecision(_Frozen):
    """One enforcement point's log line for this flow."""

    point: str | None
    time: str
    rule: str | None
    verdict: str
    prefix: str
    source: str
    line: int


class Record(_Frozen):
    """A connection-tracking (or flow-log) record of this flow."""

    source: str
    point: str | None
    time: str
    event: str
    line: int | None = None


class Endpoint(_Frozen):
    """Who one side is: inventory node, scheduler job and user, workload identity, the DNS name used."""

    address: str
    node: str | None
    zone: str | None
    job: str | None
    user: str | None
    identity: str | None
    dns: str | None


class Change(_Frozen):
    """The applied version that first carried the rule (from the evidence store's apply records)."""

    evidence: str
    action: str
    time: str
    version: str
    approved_by: str | None
    ticket: str | None


#: How an object request was tied to the flow: its logged 5-tuple's Community ID (exact); through the TLS gate
#: in front of the server (the gate's record of the client address, method and path, and time); or, for a log
#: without ports, by the client's address and time only.
ObjectJoin = Literal["5-tuple", "tls-gate", "address-time"]


class ObjectAccess(_Frozen):
    """The object server's record of a request that rode on this flow: what was read or written, by whom."""

    time: str
    node: str | None  # the object server's host
    method: str
    path: str
    job: str | None  # whose objects (the dataset's or checkpoint's job)
    result: str  # served | refused
    bytes: int | None
    identity: str | None  # the client's certificate identity, as the server (or its TLS gate) saw it
    joined: ObjectJoin
    source: str
    line: int


class TlsRecord(_Frozen):
    """A TLS sidecar's record of this flow: the SPIFFE identity the peer's certificate proved there."""

    time: str
    direction: str  # in: the gate in front of the service; out: the client's sidecar
    node: str
    peer: str
    identity: str | None
    method: str | None
    path: str | None
    result: str  # allowed | denied | refused | error
    reason: str | None
    source: str
    line: int
    #: in: the client's port the gate logged (the record then joined this flow by it); out: the service's port.
    #: None: a log from before the gates recorded it, joined by addresses and time.
    peer_port: int | None = None


class TimelineEntry(_Frozen):
    """One moment of the reconstruction, oldest first."""

    time: str
    where: str
    what: str


class Trace(_Frozen):
    """One reconstructed flow: what ``ringfence trace`` writes."""

    sample: Sample
    generated: str  # when the trace was reconstructed (ISO 8601, UTC): the age of this fact
    flow: TracedFlow
    decision: Decision
    decisions: tuple[PointDecision, ...]
    records: tuple[Record, ...]
    src: Endpoint
    dst: Endpoint
    change: Change | None
    attributed: bool
    timeline: tuple[TimelineEntry, ...]
    notes: tuple[str, ...]
    # defaults: traces written before these sources were read still load (they simply joined none)
    objects: tuple[ObjectAccess, ...] = ()  # object-server requests on this flow (dataset reads, checkpoints)
    tls: tuple[TlsRecord, ...] = ()  # the TLS sidecars' records of it (where the identities came from)


__all__ = ["Change", "Decision", "DecisionState", "Endpoint", "ObjectAccess", "ObjectJoin", "PointDecision", "Record",
           "Sample", "TimelineEntry", "TlsRecord", "Trace", "TracedFlow"]
