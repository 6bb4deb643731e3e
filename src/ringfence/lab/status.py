"""What ``lab.status()`` returns: frozen snapshots of a running lab, and the results of capture and down."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ServiceStatus:
    """A service of a node, and whether its port is listening right now."""

    name: str
    port: int
    proto: str
    traffic_class: str
    application: str
    admin: bool
    tls: bool
    listening: bool


@dataclass(frozen=True)
class ProcessStatus:
    """A process the lab started (``kind``: service, traffic or capture)."""

    label: str
    pid: int
    kind: str
    alive: bool


@dataclass(frozen=True)
class TpmStatus:
    """A node's software TPM: how tpm2-tools reach it (started lazily, by attestation)."""

    tcti: str
    running: bool


@dataclass(frozen=True)
class NodeStatus:
    """One node: its namespace, zone, interface, addresses, services and processes."""

    name: str
    namespace: str
    zone: str
    interface: str
    addresses: tuple[str, ...]
    gateway: str
    roles: tuple[str, ...]
    identity: str | None
    present: bool  # its namespace exists
    services: tuple[ServiceStatus, ...]
    processes: tuple[ProcessStatus, ...]
    tpm: TpmStatus | None = None


@dataclass(frozen=True)
class ZoneStatus:
    """One zone: its subnet and the bridge (in the fabric namespace) whose address is the gateway."""

    name: str
    subnet: str
    bridge: str
    gateway: str
    trust: str


@dataclass(frozen=True)
class JobStatus:
    """One training job: its ranks in order and its rendezvous endpoint (rank 0)."""

    name: str
    members: tuple[str, ...]
    master_addr: str
    master_port: int


@dataclass(frozen=True)
class LabStatus:
    """A snapshot of a lab."""

    name: str
    phase: str
    created: str
    fabric_namespace: str
    state_file: Path
    directory: Path
    workers: int
    zones: tuple[ZoneStatus, ...]
    nodes: tuple[NodeStatus, ...]
    jobs: tuple[JobStatus, ...]
    traffic_running: bool

    def node(self, name: str) -> NodeStatus:
        """The node called ``name`` (KeyError if there is none)."""
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (paths as strings)."""
        data = dataclasses.asdict(self)
        data["state_file"] = str(self.state_file)
        data["directory"] = str(self.directory)
        return data


@dataclass(frozen=True)
class CaptureResult:
    """A finished capture: one merged pcap of every packet that entered the fabric from a node."""

    path: Path
    seconds: float
    interfaces: tuple[str, ...]
    packets: int
    dropped: int
    snaplen: int


@dataclass(frozen=True)
class DownReport:
    """What ``down`` removed, and anything it could not."""

    name: str
    processes_stopped: tuple[int, ...]
    namespaces_deleted: tuple[str, ...]
    leftover_pids: tuple[int, ...] = ()


__all__ = [
    "CaptureResult",
    "DownReport",
    "JobStatus",
    "LabStatus",
    "NodeStatus",
    "ProcessStatus",
    "ServiceStatus",
    "TpmStatus",
    "ZoneStatus",
]
