"""The RDMA key-hygiene family: the vulnerability ids, a finding, a report, and the family's error.

Ids follow ReDMArk (Rothenberger, Taranov, Perrig, Hoefler, USENIX Security 2021). V1 (rkey randomness), V6 (fixed
starting PSN) and V8 (no encryption) are the ids the issue names; V2, V3 and V4 are our reading of the paper's list
(docs/fabric.md says which checks rest on it).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

from pydantic import BaseModel, ConfigDict

from ringfence.errors import InputError


class Vuln(StrEnum):
    """A ReDMArk vulnerability a capture can show."""

    V1 = "V1"  # rkeys predictable (low min-entropy: constant or small strides)
    V2 = "V2"  # one rkey opens several memory areas / connections (reuse)
    V3 = "V3"  # memory regions at adjacent virtual addresses (predictable VAs)
    V4 = "V4"  # queue-pair numbers sequential or in small strides
    V6 = "V6"  # the same starting PSN on many connections
    V8 = "V8"  # payload readable: no encryption (nor authentication) on the RDMA path


#: What each id means, in the words a finding uses.
VULN_NAMES: Final = {
    Vuln.V1: "predictable rkeys",
    Vuln.V2: "rkey reused across memory regions or connections",
    Vuln.V3: "memory regions at adjacent virtual addresses",
    Vuln.V4: "predictable queue-pair numbers",
    Vuln.V6: "fixed starting PSN",
    Vuln.V8: "no encryption or authentication on the RDMA path",
}

#: What to do about each, named in the finding.
REMEDIATION: Final = {
    Vuln.V1: "use an RNIC/driver that randomises rkeys (or re-register regions with fresh keys); isolate the fabric",
    Vuln.V2: "register one memory region per peer and invalidate keys on deregistration (memory windows type 2)",
    Vuln.V3: "randomise the placement of registered buffers; never expose more memory than one transfer needs",
    Vuln.V4: "randomise QP numbers where the driver allows; keep out-of-band QP exchange authenticated",
    Vuln.V6: "pick each connection's starting PSN at random (ibv_modify_qp sq_psn/rq_psn from a CSPRNG)",
    Vuln.V8: "encrypt the collective path (IPsec/MACsec under RoCE, or the library's own TLS) or keep it on an "
    "isolated, physically controlled fabric",
}


class RdmaFinding(BaseModel):
    """One key-hygiene pattern shown by a capture, between named hosts."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    id: Vuln
    name: str
    src: str  # the sender(s): the side that learns and uses the key, QPN or PSN
    dst: str  # the host whose memory, queue pair or traffic is exposed
    pattern: str  # what was seen, in numbers
    min_entropy_bits: float | None = None  # V1: the estimate behind the finding
    examples: tuple[str, ...] = ()  # a few of the values seen
    source: str  # the capture ("pcap:roce.pcap")
    remediation: str


class RdmaSummary(BaseModel):
    """What one capture held of RDMA, and what was found in it."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    source: str
    packets: int  # RDMA packets
    connections: int
    keys: int  # distinct (connection, rkey)
    payload_samples: int
    truncated: int
    findings: tuple[RdmaFinding, ...]
    warnings: tuple[str, ...] = ()


class RdmaError(InputError):
    """A capture the RDMA checks cannot read: names the file and the byte offset."""


__all__ = ["REMEDIATION", "VULN_NAMES", "RdmaError", "RdmaFinding", "RdmaSummary", "Vuln"]
