"""The lab's shape, computed from ``(prefix, workers, jobs)`` alone: zones, nodes, jobs, services, names.

Pure and deterministic, so a process that attaches to a running lab (``ringfence lab down`` after a
crash) rebuilds exactly the names the creating process used from the three numbers in the state file.

Naming: every namespace is ``<prefix>-<node>`` (plus ``<prefix>-fabric``); every link name starts with
the prefix and stays within Linux's 15-character interface name limit.
"""

from __future__ import annotations

import ipaddress
import re
import string
from dataclasses import dataclass

from ringfence.errors import RingfenceError

#: A lab name is its prefix: ``rf`` and 2-6 lower-case letters/digits (``rf3a9c``).
NAME_PATTERN = re.compile(r"^rf[a-z0-9]{2,6}$")
#: Linux IFNAMSIZ - 1.
IFNAME_MAX = 15
MAX_WORKERS = 32
#: Rank 0 of job *i* serves the job's rendezvous store on this port + i.
MASTER_PORT_BASE = 29500


class LabError(RingfenceError):
    """The lab cannot be built, found, or torn down as asked."""


@dataclass(frozen=True)
class ZoneSpec:
    """A zone: one /24 behind one bridge in the fabric namespace, whose ``.1`` is the zone gateway."""

    name: str
    code: str  # two letters used in link names
    subnet: str
    trust: str = "internal"
    description: str = ""

    def gateway(self) -> str:
        """The bridge address, the default route of every node in the zone."""
        return str(ipaddress.ip_network(self.subnet)[1])

    def host(self, last_octet: int) -> str:
        """The address ``.last_octet`` of the zone's subnet."""
        return str(ipaddress.ip_network(self.subnet)[last_octet])


@dataclass(frozen=True)
class NodeSpec:
    """A node: one namespace with one veth into its zone's bridge."""

    name: str
    zone: str
    address: str
    code: str  # short code used in link names
    roles: tuple[str, ...]
    identity: str | None


@dataclass(frozen=True)
class JobSpec:
    """A training job: its ranks (worker nodes, rank order) and rendezvous port on rank 0."""

    name: str
    members: tuple[str, ...]
    master_port: int


@dataclass(frozen=True)
class ServiceSpec:
    """A listening service the lab runs."""

    name: str
    node: str
    port: int
    traffic_class: str
    application: str
    admin: bool = False


ZONES: tuple[ZoneSpec, ...] = (
    ZoneSpec("workload", "wl", "10.77.1.0/24", description="training workers and auxiliary pods"),
    ZoneSpec("storage", "st", "10.77.2.0/24", description="dataset and checkpoint object store"),
    ZoneSpec("management", "mg", "10.77.3.0/24", description="job API, monitoring, sshd"),
    ZoneSpec("user", "us", "10.77.4.0/24", description="where people submit jobs from"),
    ZoneSpec("admin", "ad", "10.77.5.0/24", description="administrators' jump host"),
    ZoneSpec("external", "ex", "10.77.9.0/24", trust="external",
             description="replication target outside the trust boundary"),
)

SERVICES: tuple[ServiceSpec, ...] = (
    ServiceSpec("storage-http", "storage", 8080, "storage", "http"),
    ServiceSpec("mgmt-api", "mgmt", 8000, "management", "http"),
    ServiceSpec("mgmt-ssh", "mgmt", 22, "management", "ssh", admin=True),
    ServiceSpec("replica-sink", "external", 9000, "replication", "http"),
)


@dataclass(frozen=True)
class Topology:
    """Everything about a lab that follows from its prefix and size."""

    prefix: str
    workers: int
    jobs: tuple[JobSpec, ...]
    zones: tuple[ZoneSpec, ...]
    nodes: tuple[NodeSpec, ...]
    services: tuple[ServiceSpec, ...]

    @property
    def fabric_namespace(self) -> str:
        """The namespace that holds every bridge and routes between zones."""
        return f"{self.prefix}-fabric"

    def namespace(self, node: str) -> str:
        """The namespace of ``node``."""
        self.node(node)
        return f"{self.prefix}-{node}"

    def node(self, name: str) -> NodeSpec:
        """The node called ``name``; :class:`LabError` naming the known ones otherwise."""
        for n in self.nodes:
            if n.name == name:
                return n
        raise LabError(f"no node {name!r} in lab {self.prefix}", hint=f"nodes: {', '.join(self.node_names())}")

    def node_names(self) -> tuple[str, ...]:
        """Node names in bring-up order."""
        return tuple(n.name for n in self.nodes)

    def zone(self, name: str) -> ZoneSpec:
        """The zone called ``name``."""
        for z in self.zones:
            if z.name == name:
                return z
        raise LabError(f"no zone {name!r} in lab {self.prefix}")

    def interface(self, node: str) -> str:
        """The node-side veth name (inside the node's namespace): ``GLOO_SOCKET_IFNAME`` for workers."""
        return f"{self.prefix}-{self.node(node).code}"

    def port(self, node: str) -> str:
        """The fabric-side veth name (a port of the zone bridge)."""
        return f"{self.prefix}-{self.node(node).code}p"

    def bridge(self, zone: str) -> str:
        """The bridge of ``zone`` inside the fabric namespace."""
        return f"{self.prefix}-b-{self.zone(zone).code}"

    def job_of(self, node: str) -> JobSpec | None:
        """The job ``node`` is a rank of, if any."""
        for j in self.jobs:
            if node in j.members:
                return j
        return None

    def address(self, node: str) -> str:
        """The node's only address."""
        return self.node(node).address

    def all_link_names(self) -> tuple[str, ...]:
        """Every link name the lab creates (for checks and for the length limit)."""
        names = [self.bridge(z.name) for z in self.zones]
        for n in self.nodes:
            names += [self.interface(n.name), self.port(n.name)]
        return tuple(names)


def _job_names(count: int) -> tuple[str, ...]:
    letters = string.ascii_lowercase
    return tuple(f"train-{letters[i]}" for i in range(count))


def build_topology(prefix: str, workers: int = 2, jobs: int = 1) -> Topology:
    """The topology of a lab; workers are split into ``jobs`` jobs in contiguous, near-equal groups.

    Raises :class:`LabError` for a bad prefix, a worker count outside 2..32, or a job with under two
    ranks (a one-rank all-reduce sends nothing, so the lab would have no collective traffic).
    """
    if not NAME_PATTERN.match(prefix):
        raise LabError(f"bad lab name {prefix!r}", hint="a lab name is 'rf' and 2-6 lower-case letters or digits")
    if not 2 <= workers <= MAX_WORKERS:
        raise LabError(f"--workers must be between 2 and {MAX_WORKERS}, not {workers}")
    if jobs < 1 or jobs > len(string.ascii_lowercase) or workers < 2 * jobs:
        raise LabError(
            f"cannot split {workers} workers into {jobs} jobs",
            hint="every job needs at least two ranks: use --jobs between 1 and workers/2",
        )
    zones = {z.name: z for z in ZONES}
    wl = zones["workload"]
    nodes = [
        NodeSpec(f"worker-{i}", "workload", wl.host(10 + i), f"w{i}", ("worker",), f"spiffe://lab/node/worker-{i}")
        for i in range(workers)
    ]
    nodes += [
        NodeSpec("aux", "workload", wl.host(50), "aux", ("telemetry",), "spiffe://lab/node/aux"),
        NodeSpec("storage", "storage", zones["storage"].host(10), "sto", ("storage",), "spiffe://lab/node/storage"),
        NodeSpec("mgmt", "management", zones["management"].host(10), "mgt", ("api", "sshd"), "spiffe://lab/node/mgmt"),
        NodeSpec("user", "user", zones["user"].host(10), "usr", ("user",), "spiffe://lab/user/alice"),
        NodeSpec("jump", "admin", zones["admin"].host(10), "jmp", ("jump",), "spiffe://lab/node/jump"),
        NodeSpec("external", "external", zones["external"].host(10), "ext", ("replica",), None),
    ]
    base, extra = divmod(workers, jobs)
    job_specs: list[JobSpec] = []
    start = 0
    for i, name in enumerate(_job_names(jobs)):
        size = base + (1 if i < extra else 0)
        members = tuple(f"worker-{k}" for k in range(start, start + size))
        job_specs.append(JobSpec(name, members, MASTER_PORT_BASE + i))
        start += size
    topo = Topology(prefix, workers, tuple(job_specs), ZONES, tuple(nodes), SERVICES)
    too_long = [n for n in topo.all_link_names() if len(n) > IFNAME_MAX]
    if too_long:  # the patterns above keep this impossible; a changed pattern must fail here, not in the kernel
        raise LabError(f"link names over {IFNAME_MAX} characters: {', '.join(too_long)}")
    return topo


__all__ = [
    "IFNAME_MAX",
    "MASTER_PORT_BASE",
    "MAX_WORKERS",
    "NAME_PATTERN",
    "SERVICES",
    "ZONES",
    "JobSpec",
    "LabError",
    "NodeSpec",
    "ServiceSpec",
    "Topology",
    "ZoneSpec",
    "build_topology",
]
