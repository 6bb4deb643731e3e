"""Build classifier inputs (FlowKeys, PayloadSamples) from hand-written flows, for the payload tests."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ringfence.observe.payload import classify_flows
from ringfence.observe.samples import HEAD_BYTES, FlowKeys, PayloadSamples


@dataclass
class Flow:
    """One flow: header facts and its sampled packets as (forward?, full payload bytes)."""

    proto: int = 6
    sport: int = 40000
    dport: int = 443
    ethertype: int = 0x0800
    packets: list[tuple[bool, bytes]] = field(default_factory=list)
    extra_payload_packets: int = 0  # payload packets the reader saw but did not sample

    def fwd(self, *payloads: bytes) -> Flow:
        """Add packets sent initiator → responder."""
        self.packets += [(True, p) for p in payloads]
        return self

    def back(self, *payloads: bytes) -> Flow:
        """Add packets sent responder → initiator."""
        self.packets += [(False, p) for p in payloads]
        return self


def build(flows: list[Flow]) -> tuple[FlowKeys, PayloadSamples]:
    """The reader's columnar view of ``flows``."""
    rows = [(i, fwd, p) for i, f in enumerate(flows) for fwd, p in f.packets]
    head = np.zeros((len(rows), HEAD_BYTES), dtype=np.uint8)
    for r, (_, _, payload) in enumerate(rows):
        part = payload[:HEAD_BYTES]
        head[r, : len(part)] = np.frombuffer(part, dtype=np.uint8)
    keys = FlowKeys(
        ethertype=np.array([f.ethertype for f in flows], dtype=np.uint16),
        proto=np.array([f.proto for f in flows], dtype=np.uint8),
        sport=np.array([f.sport for f in flows], dtype=np.int32),
        dport=np.array([f.dport for f in flows], dtype=np.int32),
        payload_bytes=np.array([sum(len(p) for _, p in f.packets) for f in flows], dtype=np.int64),
        payload_packets=np.array([len(f.packets) + f.extra_payload_packets for f in flows], dtype=np.int64),
    )
    samples = PayloadSamples(
        flow=np.array([r[0] for r in rows], dtype=np.int64),
        forward=np.array([r[1] for r in rows], dtype=np.bool_),
        length=np.array([len(r[2]) for r in rows], dtype=np.int32),
        head=head,
    )
    return keys, samples


def verdicts(*flows: Flow) -> list[tuple[str, str | None, str]]:
    """(protection, protocol, reason) per flow."""
    protection, protocol, reason = classify_flows(*build(list(flows)))
    return list(zip(protection, protocol, reason, strict=True))


def verdict(flow: Flow) -> tuple[str, str | None, str]:
    """(protection, protocol, reason) of one flow."""
    return verdicts(flow)[0]


def segments(stream: bytes, mss: int = 1448) -> list[bytes]:
    """A byte stream cut into TCP segments the way a sender fills them."""
    return [stream[i : i + mss] for i in range(0, len(stream), mss)]
