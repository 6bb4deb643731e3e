"""The encryption-layer family: what a layer protects (its scope), what it renders, whether a node can run it.

A layer is one way of keeping a class of traffic confidential on the wire (DESIGN.md step 2): TLS
per connection, WireGuard or IPsec per host pair, MACsec per link, NCCL's own TLS per library-owned
socket. Each implementation module describes itself with a :class:`LayerScope` — the facts the
scope check (``ringfence verify``) reasons with — renders its configuration for a set of
:class:`Endpoint` pairs, and says honestly whether a node's kernel can run it (:class:`Support`).
Layers that ringfence also *runs* in the lab (``tls``, ``wireguard``) have their own lab drivers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from ringfence.errors import RingfenceError
from ringfence.policy.model import Layer
from ringfence.targets.interface import Executor


class LayerError(RingfenceError):
    """A layer could not be rendered, enabled or disabled."""


class Reach(StrEnum):
    """How far one protected hop reaches."""

    LINK = "link"  # one Ethernet link: decrypted at every switch/router port that terminates it
    HOST = "host"  # host to host across any number of routers (an IP tunnel)
    SOCKET = "socket"  # only the sockets a library opens itself (NCCL's ncclSocket)
    CONNECTION = "connection"  # one application connection (TLS)


class Transport(StrEnum):
    """What a path carries: a layer covers it only if it carries that transport."""

    TCP = "tcp"
    UDP = "udp"
    RDMA = "rdma"  # InfiniBand verbs / RoCE: bypasses the host IP stack and every socket


@dataclass(frozen=True)
class LayerScope:
    """The documented reach of a layer — what the scope check reasons with."""

    layer: Layer
    reach: Reach
    transports: frozenset[Transport]  # transports whose payload it encrypts
    crosses_routers: bool  # still encrypted after an L3 hop (MACsec: no, decrypted per link)
    rotates_live: bool  # keys can change under a running job without restarting it
    key_model: str  # where keys come from, in words
    wire_protocols: tuple[str, ...]  # what the flow reader's ``protocol`` column says for it
    notes: str = ""

    def covers(self, transport: Transport, *, routed: bool) -> tuple[bool, str]:
        """Whether this layer protects a path of ``transport`` that does (``routed``) or does not cross a router."""
        if transport not in self.transports:
            carried = ", ".join(sorted(t.value for t in self.transports))
            return False, f"{self.layer.value} protects {carried} only, not {transport.value}"
        if routed and not self.crosses_routers:
            return False, f"{self.layer.value} is decrypted at every {self.reach.value} end; the path is routed"
        return True, f"{self.layer.value} ({self.reach.value}) carries {transport.value}"

    def as_dict(self) -> dict[str, object]:
        """JSON-ready form (for evidence records and ``Facts.keys``)."""
        return {
            "layer": self.layer.value,
            "reach": self.reach.value,
            "transports": sorted(t.value for t in self.transports),
            "crosses_routers": self.crosses_routers,
            "rotates_live": self.rotates_live,
            "key_model": self.key_model,
            "wire_protocols": list(self.wire_protocols),
            "notes": self.notes,
        }


@dataclass(frozen=True)
class Endpoint:
    """One end of a protected link or tunnel, as a renderer needs it."""

    node: str
    address: str  # the IP address peers reach it at
    interface: str = "eth0"  # the NIC the layer binds to
    mac: str | None = None  # needed by MACsec receive channels
    identity: str | None = None  # SPIFFE identity (certificate-based layers)


@dataclass(frozen=True)
class RenderedFile:
    """One file of a rendered configuration; ``secret`` files must be written mode 0600."""

    path: str  # relative to the node's output directory
    content: str
    secret: bool = False


@dataclass(frozen=True)
class Rendered:
    """A layer's configuration for one node: files, the commands that apply them, and caveats."""

    layer: Layer
    node: str
    files: tuple[RenderedFile, ...]
    apply: tuple[str, ...]  # shell commands, in order
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Support:
    """Whether a node can run a layer, and why (or why not) — probed, never assumed."""

    layer: Layer
    node: str
    available: bool
    reason: str
    probe: tuple[str, ...] = ()  # the command that decided it

    def as_dict(self) -> dict[str, object]:
        """JSON-ready form."""
        return {
            "layer": self.layer.value,
            "node": self.node,
            "available": self.available,
            "reason": self.reason,
            "probe": list(self.probe),
        }


@dataclass(frozen=True)
class RenderOptions:
    """Knobs shared by renderers."""

    cipher: str = "gcm-aes-256"
    offload: str = "off"  # MACsec offload: off | phy | mac
    rekey: str = "1h"
    extra: Mapping[str, str] = field(default_factory=dict)


class EncryptionLayer(Protocol):
    """A layer ringfence knows: its scope, its renderer, its support probe."""

    name: Layer
    scope: LayerScope

    def render(self, pairs: tuple[tuple[Endpoint, Endpoint], ...], options: RenderOptions) -> tuple[Rendered, ...]:
        """Configuration for every node of ``pairs`` (each pair is one protected link or tunnel)."""
        ...

    def support(self, executor: Executor) -> Support:
        """Probe whether ``executor``'s node can run this layer (without changing the node)."""
        ...


__all__ = [
    "EncryptionLayer",
    "Endpoint",
    "LayerError",
    "LayerScope",
    "Reach",
    "RenderOptions",
    "Rendered",
    "RenderedFile",
    "Support",
    "Transport",
]
