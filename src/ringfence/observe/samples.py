"""Columnar payload samples a capture reader hands to the payload classifier.

Readers keep, per flow, the first few payload-carrying packets' heads — enough to recognise TLS
records, SSH banners, WireGuard and ESP headers, MACsec SecTAGs or float tensors — as numpy arrays,
never as per-packet Python objects.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

#: Bytes of payload kept per sampled packet.
HEAD_BYTES: Final = 64
#: Payload-carrying packets sampled per flow (first ones in time order, both directions).
SAMPLES_PER_FLOW: Final = 16

ETHERTYPE_IPV4: Final = 0x0800
ETHERTYPE_IPV6: Final = 0x86DD
ETHERTYPE_MACSEC: Final = 0x88E5


@dataclass(frozen=True)
class FlowKeys:
    """Per-flow header facts the classifier may use (arrays of length n_flows)."""

    ethertype: npt.NDArray[np.uint16]  # 0x0800/0x86DD for IP flows; e.g. 0x88E5 for an L2 MACsec flow
    proto: npt.NDArray[np.uint8]  # IP protocol (0 for L2-only flows)
    sport: npt.NDArray[np.int32]  # -1 where the protocol has no ports
    dport: npt.NDArray[np.int32]
    payload_bytes: npt.NDArray[np.int64]  # total L4 payload bytes of the flow, both directions
    payload_packets: npt.NDArray[np.int64]  # packets carrying payload, both directions

    @property
    def n(self) -> int:
        """Number of flows."""
        return int(self.proto.shape[0])


@dataclass(frozen=True)
class PayloadSamples:
    """Sampled payload heads, one row per sampled packet (m rows), grouped by ``flow``."""

    flow: npt.NDArray[np.int64]  # (m,) index of the flow (0..n_flows-1)
    forward: npt.NDArray[np.bool_]  # (m,) True if sent initiator → responder
    length: npt.NDArray[np.int32]  # (m,) full L4 payload length of that packet
    head: npt.NDArray[np.uint8]  # (m, HEAD_BYTES) first payload bytes, zero padded

    @property
    def m(self) -> int:
        """Number of sampled packets."""
        return int(self.flow.shape[0])


__all__ = [
    "ETHERTYPE_IPV4",
    "ETHERTYPE_IPV6",
    "ETHERTYPE_MACSEC",
    "HEAD_BYTES",
    "SAMPLES_PER_FLOW",
    "FlowKeys",
    "PayloadSamples",
]
