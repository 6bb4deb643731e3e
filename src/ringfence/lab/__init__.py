"""A real miniature training cluster in Linux network namespaces (needs root and iproute2).

:class:`Lab` builds, attaches to, captures from and tears down labs; :func:`down_lab` and
:func:`down_all` clean up from state files alone. The topology and the lab's as-found policy are
pure functions (:func:`build_topology`, :func:`render_policy`) usable without root.
"""

from ringfence.lab.lab import Lab, down_all, down_lab
from ringfence.lab.policy_text import render_policy
from ringfence.lab.state import DEFAULT_ROOT, TlsPaths
from ringfence.lab.status import (
    CaptureResult,
    DownReport,
    JobStatus,
    LabStatus,
    NodeStatus,
    ProcessStatus,
    ServiceStatus,
    ZoneStatus,
)
from ringfence.lab.topology import LabError, Topology, build_topology

__all__ = [
    "DEFAULT_ROOT",
    "CaptureResult",
    "DownReport",
    "JobStatus",
    "Lab",
    "LabError",
    "LabStatus",
    "NodeStatus",
    "ProcessStatus",
    "ServiceStatus",
    "Topology",
    "TlsPaths",
    "ZoneStatus",
    "build_topology",
    "down_all",
    "down_lab",
    "render_policy",
]
