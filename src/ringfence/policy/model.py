"""The policy-as-code model: the intended state of a training network.

Strict, frozen pydantic models (``extra="forbid"``) — the only place that knows the file format is
:mod:`ringfence.policy.load`. Everything inside ringfence reads these objects, never raw YAML.
"""

from __future__ import annotations

import ipaddress
import re
from datetime import UTC, date, datetime, timedelta
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator, model_validator

from ringfence.policy.attestation import Attestation

NAME = r"^[a-z0-9]([a-z0-9._-]{0,62}[a-z0-9])?$"

#: The ten control points (DESIGN.md step 5), in order. A policy names only these: an exception or
#: an owner for a misspelt control would apply to nothing while looking like it applies.
CONTROL_POINTS: tuple[str, ...] = (
    "zones",
    "workload_identity",
    "admin_paths",
    "storage_flows",
    "training_traffic",
    "egress",
    "encryption_keys",
    "telemetry",
    "change_control",
    "containment",
)

#: A positive duration: a count and one unit (s, m, h, d), e.g. ``30m``, ``24h``, ``7d``.
_DURATION = re.compile(r"^([1-9][0-9]{0,6})([smhd])$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
#: Longest duration accepted (10 years): beyond it a lifetime or interval is a typo, not a policy.
MAX_DURATION = timedelta(days=3650)


def parse_duration(text: str) -> timedelta:
    """``"24h"`` → ``timedelta(hours=24)``; ``ValueError`` for anything but a positive count and one unit."""
    m = _DURATION.match(text)
    if m is None:
        raise ValueError(f"{text[:40]!r} is not a positive duration like 30m, 24h or 7d (units s, m, h, d)")
    value = timedelta(seconds=int(m.group(1)) * _UNIT_SECONDS[m.group(2)])
    if value > MAX_DURATION:
        raise ValueError(f"{text!r} is longer than {MAX_DURATION.days} days")
    return value


def canonical_address(text: str) -> str:
    """The canonical text of an IP address; an IPv4-mapped IPv6 address (``::ffff:10.0.0.1``) is IPv4.

    A dual-stack socket reports IPv4 peers in the mapped form: it is the same host, so one node and
    one flow endpoint, never two.
    """
    ip = ipaddress.ip_address(text)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class TrafficClass(StrEnum):
    """The four traffic classes of DESIGN.md, plus the finding-worthy rest."""

    STORAGE = "storage"
    COLLECTIVE = "collective"
    MANAGEMENT = "management"
    REPLICATION = "replication"
    UNCLASSIFIED = "unclassified"


class Trust(StrEnum):
    """Which side of the trust boundary a zone is on."""

    INTERNAL = "internal"
    EXTERNAL = "external"


class Requirement(StrEnum):
    """Whether a class must be protected on the wire."""

    REQUIRED = "required"
    OPTIONAL = "optional"


class Layer(StrEnum):
    """Encryption layers ringfence knows (DESIGN.md step 2)."""

    TLS = "tls"
    WIREGUARD = "wireguard"
    IPSEC = "ipsec"
    MACSEC = "macsec"
    NCCL_TLS = "nccl-tls"
    RINGFENCE = "ringfence-transport"


def _port_range(value: int | str) -> tuple[int, int]:
    if isinstance(value, int):
        lo = hi = value
    else:
        parts = value.split("-")
        if len(parts) not in (1, 2) or not all(p.strip().isdigit() for p in parts):
            raise ValueError(f"{value!r} is not a port or a range like 1024-65535")
        lo, hi = int(parts[0]), int(parts[-1])
    if not (0 < lo <= hi <= 65535):
        raise ValueError(f"{value!r} is not a port range inside 1-65535")
    return lo, hi


PortSpec = Annotated[int | str, Field(description="a port (8443) or an inclusive range ('1024-65535')")]


class Standard(_Strict):
    """A referenced standard, with the version followed and when it was last reviewed."""

    name: str
    version: str
    reviewed: date


class Zone(_Strict):
    """A security zone. ``external`` zones are outside the cluster's trust boundary."""

    name: Annotated[str, Field(pattern=NAME)]
    trust: Trust = Trust.INTERNAL
    description: str = ""


class Node(_Strict):
    """A host (or pod) with its addresses. ``zone`` must name a zone."""

    name: Annotated[str, Field(pattern=NAME)]
    zone: str
    addresses: Annotated[tuple[str, ...], Field(min_length=1)]
    identity: str | None = None  # workload identity (SPIFFE URI) of the node itself, if any
    roles: tuple[str, ...] = ()

    @field_validator("addresses")
    @classmethod
    def _addresses_are_ips(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(canonical_address(a) for a in v)  # ValueError names the bad address


class Partition(_Strict):
    """The fabric partition a job's collective traffic must stay in: an InfiniBand/RoCE P_Key, an Ethernet VLAN
    (and the VRF the switch configuration puts it in). At least one of ``pkey`` and ``vlan``."""

    pkey: Annotated[int, Field(ge=0x0001, le=0x7FFE)] | None = None  # base value; 0x7FFF is the default partition
    vlan: Annotated[int, Field(ge=1, le=4094)] | None = None
    vrf: Annotated[str, Field(pattern=NAME)] | None = None

    @model_validator(mode="after")
    def _one(self) -> Partition:
        if self.pkey is None and self.vlan is None:
            raise ValueError("a partition names a pkey, a vlan, or both")
        return self


class Job(_Strict):
    """A training job: its identity, its member nodes, the port range its collective uses, and optionally the
    fabric partition its collective traffic must stay in (``training_traffic`` judges flows against it)."""

    name: Annotated[str, Field(pattern=NAME)]
    identity: str
    members: Annotated[tuple[str, ...], Field(min_length=1)]
    collective_ports: PortSpec = "1024-65535"
    backend: str = "gloo"
    partition: Partition | None = None

    @field_validator("collective_ports")
    @classmethod
    def _ports(cls, v: int | str) -> int | str:
        _port_range(v)
        return v

    @property
    def collective_range(self) -> tuple[int, int]:
        """The inclusive collective port range."""
        return _port_range(self.collective_ports)


class Service(_Strict):
    """A listening service on a node, and the traffic class its traffic belongs to."""

    name: Annotated[str, Field(pattern=NAME)]
    node: str
    proto: Literal["tcp", "udp"] = "tcp"
    port: PortSpec
    traffic_class: TrafficClass = Field(alias="class")
    application: str = ""  # "http", "ssh", "https", … — what an application-level probe speaks
    admin: bool = False  # an administrative path (sshd, BMC, console)
    #: it listens only while it works (srun on SrunPortRange during a step): when nothing of it listens,
    #: the probe matrix proves its paths to a stand-in listener (ringfence.enforce.standin), not a closed port
    on_demand: bool = False

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=True)

    @field_validator("port")
    @classmethod
    def _ports(cls, v: int | str) -> int | str:
        _port_range(v)
        return v

    @property
    def port_range(self) -> tuple[int, int]:
        """The inclusive port range of the service."""
        return _port_range(self.port)


class Endpoint(_Strict):
    """One side of an approved flow: exactly one selector is set."""

    zone: str | None = None
    node: str | None = None
    job: str | None = None
    service: str | None = None
    identity: str | None = None
    cidr: str | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> Endpoint:
        set_ = [k for k in ("zone", "node", "job", "service", "identity", "cidr") if getattr(self, k)]
        if len(set_) != 1:
            raise ValueError(f"an endpoint takes exactly one of zone/node/job/service/identity/cidr, got {set_}")
        if self.cidr is not None:
            ipaddress.ip_network(self.cidr, strict=False)
        return self

    def describe(self) -> str:
        """``zone:workload``, ``service:storage-http`` …"""
        for k in ("zone", "node", "job", "service", "identity", "cidr"):
            v = getattr(self, k)
            if v:
                return f"{k}:{v}"
        raise AssertionError("validated endpoint has a selector")


class ApprovedFlow(_Strict):
    """One entry of the approved communication matrix."""

    id: Annotated[str, Field(pattern=NAME)]
    source: Endpoint = Field(alias="from")
    destination: Endpoint = Field(alias="to")
    proto: Literal["tcp", "udp", "any"] = "tcp"
    ports: PortSpec | None = None  # default: the destination service's port
    traffic_class: TrafficClass = Field(alias="class")
    description: str = ""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=True)

    @field_validator("ports")
    @classmethod
    def _ports(cls, v: int | str | None) -> int | str | None:
        if v is not None:
            _port_range(v)
        return v

    @property
    def port_range(self) -> tuple[int, int] | None:
        """Inclusive port range, or None when it is the destination service's."""
        return None if self.ports is None else _port_range(self.ports)


class ClassPolicy(_Strict):
    """Protection required for a traffic class, and who decided it."""

    protection: Requirement = Requirement.REQUIRED
    layers: tuple[Layer, ...] = ()  # acceptable layers; empty = any confidential layer
    confidential: bool = True  # for collective: are gradients confidential? (a policy decision)
    decision_owner: str = ""  # who owns that decision
    rationale: str = ""


class Classes(_Strict):
    """Per-class protection requirements. All four must be stated."""

    storage: ClassPolicy
    collective: ClassPolicy
    management: ClassPolicy
    replication: ClassPolicy

    def of(self, cls: TrafficClass) -> ClassPolicy | None:
        """The policy of a class (None for ``unclassified``)."""
        return None if cls is TrafficClass.UNCLASSIFIED else getattr(self, cls.value)


class Budget(_Strict):
    """The performance budget of the collective path, fixed before encryption is enabled."""

    busbw_loss_pct: Annotated[float, Field(ge=0, le=100)] = 5.0
    p99_growth_pct: Annotated[float, Field(ge=0)] = 25.0
    sizes: tuple[int, ...] = ()  # message sizes in bytes that matter for the job (empty: all)
    min_repeats: Annotated[int, Field(ge=1)] = 3


class Fabric(_Strict):
    """How the collective links are built — a tenancy decision with an owner (``ringfence recommend`` reads it).

    ``shared`` (the default, so nothing is assumed): other tenants' traffic may cross the links.
    ``dedicated``: a single-tenant fabric, physically inside the trust boundary.
    """

    links: Literal["shared", "dedicated"] = "shared"
    owner: str = ""
    rationale: str = ""


class Keys(_Strict):
    """Key and certificate lifetimes (``24h``, ``30m``, ``7d``)."""

    cert_lifetime: str = "24h"
    rotation: str = "12h"
    tunnel_rekey: str = "2m"

    @field_validator("cert_lifetime", "rotation", "tunnel_rekey")
    @classmethod
    def _positive_duration(cls, v: str) -> str:
        # Checked here, not where used: a check that silently skips an unparsable interval is a pass.
        parse_duration(v)
        return v

    def duration(self, name: str) -> timedelta:
        """``cert_lifetime``, ``rotation`` or ``tunnel_rekey`` as a timedelta (validated when loaded)."""
        return parse_duration(str(getattr(self, name)))


DURATION = r"^[1-9][0-9]*[smhd]$"


class FactAges(_Strict):
    """How old a gathered fact may be and still prove a control's requirement (``7d``, ``12h``)."""

    max_age: Annotated[str, Field(pattern=DURATION)] = "7d"
    per_fact: dict[str, Annotated[str, Field(pattern=DURATION)]] = Field(default_factory=dict)  # fact → max age


class TemporaryPath(_Strict):
    """A path an exception opens at the enforcement point until it expires (``nft`` set elements with a timeout).

    ``from``/``to`` name a node of the inventory or an IPv4 address; one protocol and one port, so the
    kernel's element is exactly the path that was granted and nothing wider.
    """

    source: str = Field(alias="from")
    destination: str = Field(alias="to")
    proto: Literal["tcp", "udp"] = "tcp"
    port: Annotated[int, Field(ge=1, le=65535)]


class ExceptionEntry(_Strict):
    """A time-limited exception: who owns it, why, until when, and what compensates.

    ``opens``: a path the exception grants, rendered with its own kernel timeout so the path closes on
    time with nobody acting; ``until``: the exact expiry (default: the end of ``expires``, UTC).
    """

    id: Annotated[str, Field(pattern=NAME)]
    control: str
    subject: str  # "class:collective", "flow:<id>", "node:aux" …
    owner: str
    reason: str
    expires: date
    review_trigger: str = ""
    compensating: tuple[str, ...] = ()
    trusted_boundary: str = ""
    opens: TemporaryPath | None = None
    # not strict: YAML and JSON give the time as text; it must carry its zone (a naive time is refused)
    until: Annotated[AwareDatetime | None, Field(strict=False)] = None

    def expires_at(self) -> datetime:
        """When the exception lapses: ``until``, else the end of its ``expires`` day (UTC)."""
        if self.until is not None:
            return self.until
        return datetime.combine(self.expires + timedelta(days=1), datetime.min.time(), tzinfo=UTC)

    @field_validator("control")
    @classmethod
    def _known_control(cls, v: str) -> str:
        if v not in CONTROL_POINTS:
            raise ValueError(f"unknown control {v[:60]!r}; the control points are {', '.join(CONTROL_POINTS)}")
        return v


class ControlOwner(_Strict):
    """Ownership and operation of one control point."""

    owner: str
    log_source: str = ""
    exception_process: str = ""
    deployed: str = ""  # the deployed configuration (file, CRD, ruleset name)


class ChangeControl(_Strict):
    """How changes of this policy are controlled (control point ``change_control``).

    ``required``: ``ringfence apply`` deploys only a request approved by someone other than its
    requester (or an ``--emergency`` change, a finding until reviewed). ``approvers``: identity →
    Ed25519 public key (64 hex digits) that an approval by that identity must verify with.
    ``review_interval``: the longest time the rules may go without a review (PCI DSS 1.2.7: six months).
    """

    required: bool = False
    approvers: dict[str, Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]] = Field(default_factory=dict)
    review_interval: Annotated[str, Field(pattern=DURATION)] = "183d"


#: The incident scenarios ``ringfence drill run`` plays (ringfence.drill.registry.NAMES; a test keeps them equal).
DRILL_SCENARIOS: tuple[str, ...] = ("credential-compromise", "malicious-job", "exfiltration",
                                    "management-plane-failure")
DrillScenario = Literal["credential-compromise", "malicious-job", "exfiltration", "management-plane-failure"]


class IncidentDrills(_Strict):
    """Which incident scenarios must have been drilled, and how recently (control point ``containment``).

    ``scenarios``: each must have a passing ``ringfence drill run`` report no older than ``every``;
    ``bystander_stall``: the longest stall the bystander job's ranks may show while a drill plays.
    """

    scenarios: tuple[DrillScenario, ...] = ()
    every: Annotated[str, Field(pattern=DURATION)] = "90d"
    bystander_stall: Annotated[str, Field(pattern=DURATION)] = "10s"

    @field_validator("every", "bystander_stall")
    @classmethod
    def _duration(cls, v: str) -> str:
        parse_duration(v)  # a bound that cannot be read would admit every drill, however old
        return v

    @field_validator("scenarios")
    @classmethod
    def _once(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(v)) != len(v):
            raise ValueError("a scenario is named twice")
        return v


class Policy(_Strict):
    """The whole intended state of one cluster."""

    version: Literal[1] = 1
    cluster: Annotated[str, Field(pattern=NAME)]
    standards: tuple[Standard, ...] = ()
    zones: Annotated[tuple[Zone, ...], Field(min_length=1)]
    nodes: tuple[Node, ...] = ()
    jobs: tuple[Job, ...] = ()
    services: tuple[Service, ...] = ()
    approved: tuple[ApprovedFlow, ...] = ()
    classes: Classes
    budget: Budget = Budget()
    fabric: Fabric = Fabric()
    keys: Keys = Keys()
    exceptions: tuple[ExceptionEntry, ...] = ()
    controls: dict[str, ControlOwner] = Field(default_factory=dict)
    facts: FactAges = FactAges()
    change_control: ChangeControl = ChangeControl()
    attestation: Attestation | None = None  # the measured-stack allowlist (ringfence.policy.attestation)
    incident_drills: IncidentDrills = IncidentDrills()

    @field_validator("controls")
    @classmethod
    def _known_controls(cls, v: dict[str, ControlOwner]) -> dict[str, ControlOwner]:
        unknown = [k for k in v if k not in CONTROL_POINTS]
        if unknown:
            raise ValueError(
                f"unknown control {unknown[0][:60]!r}; the control points are {', '.join(CONTROL_POINTS)}"
            )
        return v

    def expired_exceptions(self, today: date) -> tuple[ExceptionEntry, ...]:
        """Exceptions whose ``expires`` date is before ``today``: they exempt nothing any more."""
        return tuple(e for e in self.exceptions if e.expires < today)

    # Lookups used everywhere; cheap enough to compute on demand for inventories of 10k nodes.
    def zone(self, name: str) -> Zone | None:
        """The zone called ``name``."""
        return next((z for z in self.zones if z.name == name), None)

    def node(self, name: str) -> Node | None:
        """The node called ``name``."""
        return next((n for n in self.nodes if n.name == name), None)

    def service(self, name: str) -> Service | None:
        """The service called ``name``."""
        return next((s for s in self.services if s.name == name), None)

    def job(self, name: str) -> Job | None:
        """The job called ``name``."""
        return next((j for j in self.jobs if j.name == name), None)


__all__ = [
    "CONTROL_POINTS",
    "DRILL_SCENARIOS",
    "MAX_DURATION",
    "ApprovedFlow",
    "Budget",
    "ChangeControl",
    "IncidentDrills",
    "ClassPolicy",
    "Classes",
    "ControlOwner",
    "Endpoint",
    "ExceptionEntry",
    "Job",
    "Partition",
    "Keys",
    "Layer",
    "Node",
    "Policy",
    "Requirement",
    "Service",
    "Standard",
    "TemporaryPath",
    "TrafficClass",
    "Trust",
    "Zone",
    "canonical_address",
    "parse_duration",
]
