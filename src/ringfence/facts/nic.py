"""NIC capability facts: per node the raw output of ``ethtool -k``, ``ip -d link`` and ``devlink``, read for
the offloads a layer recommendation depends on (MACsec, IPsec/ESP, TLS).

The file (``format: ringfence.nic/1``)::

    {"format": "ringfence.nic/1", "taken": "2026-12-01T10:00:00+00:00",
     "nodes": [{"node": "worker-0", "interface": "eth0", "ethtool_k": "…", "ip_link": "…", "devlink": "…"}]}

A capability is present only when a tool's output says it is on; absent output proves nothing, and the
recommendation then does not assume the offload.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import AwareDatetime

from ringfence.facts.interface import Loaded, Strict, parse

__all__ = ["NIC_FORMAT", "NicCaps", "NicDoc", "capabilities", "load", "unreadable"]

NIC_FORMAT = "ringfence.nic/1"
HINT = ("gather per node: ethtool -k IFACE; ip -d link show IFACE; devlink port function show (or "
        "devlink dev param show) — into {\"format\": \"ringfence.nic/1\", \"nodes\": [...]}")


class NicNode(Strict):
    """One node's tool outputs (any may be empty: not gathered); ``error``: the node could not be asked, so
    nothing of it is known; ``notes``: what the gatherer could not read (a tool not installed)."""

    node: str
    interface: str = ""
    ethtool_k: str = ""
    ip_link: str = ""
    devlink: str = ""
    error: str = ""
    notes: list[str] = []


class NicDoc(Strict):
    """The NIC facts file (``target``: where ``ringfence recommend --gather`` read it, when it did)."""

    format: Literal["ringfence.nic/1"]
    taken: AwareDatetime
    nodes: list[NicNode]
    target: str = ""


@dataclass(frozen=True)
class NicCaps:
    """What a node's NIC offloads, each with the line that says so (empty: not shown)."""

    node: str
    macsec: str = ""
    ipsec: str = ""
    tls: str = ""

    def has(self, what: str) -> bool:
        """Whether ``what`` (``macsec``, ``ipsec``, ``tls``) is offloaded."""
        return bool(getattr(self, what))


_ON = r"\s*:\s*on\b"
_ETHTOOL = {
    "macsec": re.compile(r"^\s*macsec-hw-offload" + _ON, re.M),
    "ipsec": re.compile(r"^\s*esp-hw-offload" + _ON, re.M),
    "tls": re.compile(r"^\s*tls-hw-(?:tx|rx)-offload" + _ON, re.M),
}
# `ip -d link` of a macsec device with offload: "macsec … offload mac" / "offload phy"
_IP_MACSEC = re.compile(r"\bmacsec\b.*\boffload (?:mac|phy)\b", re.S)
# `devlink port function show`: "ipsec_crypto enable" / "ipsec_packet enable"
_DEVLINK_IPSEC = re.compile(r"\bipsec_(?:crypto|packet)\s+enable\b")


def capabilities(node: NicNode) -> NicCaps:
    """The offloads ``node``'s outputs show."""
    found = {k: m.group(0).strip() for k, rx in _ETHTOOL.items() if (m := rx.search(node.ethtool_k))}
    if "macsec" not in found and (m := _IP_MACSEC.search(node.ip_link)):
        found["macsec"] = "ip -d link: " + " ".join(m.group(0).split())[:60]
    if "ipsec" not in found and (m := _DEVLINK_IPSEC.search(node.devlink)):
        found["ipsec"] = "devlink: " + m.group(0)
    return NicCaps(node.node, **found)


def load(path: str | Path, data: bytes | None = None) -> Loaded:
    """``{node: NicCaps}`` and when the outputs were gathered; ``data``: the file's bytes, if already read."""
    doc = parse(path, NicDoc, "NIC capability facts", HINT, fmt=NIC_FORMAT, data=data)
    # a node that could not be asked has no capabilities, not "none": it is left out, so the recommendation
    # says it has no facts for it
    return Loaded("nic", str(path), {n.node: capabilities(n) for n in doc.nodes if not n.error}, doc.taken)


def unreadable(path: str | Path, data: bytes | None = None) -> dict[str, str]:
    """``{node: why}`` for each node of the file that could not be asked."""
    doc = parse(path, NicDoc, "NIC capability facts", HINT, fmt=NIC_FORMAT, data=data)
    return {n.node: n.error for n in doc.nodes if n.error}
