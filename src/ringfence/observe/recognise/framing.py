"""Label every sampled packet by its protocol framing, in priority order (first match wins)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from ringfence.observe.recognise import framing_datagram as dg
from ringfence.observe.recognise import framing_stream as st
from ringfence.observe.recognise._bytes import HEAD, I64, N_COLS, Labeller, Packets
from ringfence.observe.recognise.labels import Label
from ringfence.observe.samples import FlowKeys, PayloadSamples

Recogniser = Callable[[Packets, Labeller], None]

# Strong, length-checked framings first; port-defined and weaker ones last.
_ORDER: Final[tuple[Recogniser, ...]] = (
    dg.macsec,
    dg.esp,
    st.rft,
    st.tls,
    st.ssh,
    st.http,
    st.gloo,
    st.ssh_kex,
    dg.dtls,
    dg.wireguard,
    dg.quic,
    dg.ike,
    dg.nat_keepalive,
    dg.esp_in_udp,
    dg.roce,
    st.dns,
    dg.ntp,
    st.syslog,
)
_GQUIC_TAGS: Final = (b"CHLO", b"REJ\x00", b"SHLO")


@dataclass(frozen=True)
class Framing:
    """Per sampled packet: its :class:`Label` and the body region to check for readable data (-1: none)."""

    label: npt.NDArray[np.int8]
    body_start: I64
    body_stop: I64


def packets(keys: FlowKeys, samples: PayloadSamples) -> Packets:
    """Broadcast each flow's header facts to its sampled packets."""
    flow = samples.flow.astype(np.int64)
    length = samples.length.astype(np.int64)
    head = np.ascontiguousarray(samples.head, dtype=np.uint8)
    return Packets(
        head=head,
        cols=np.ascontiguousarray(head[:, :N_COLS].T),
        length=length,
        valid=np.clip(length, 0, HEAD),
        flow=flow,
        forward=samples.forward.astype(np.bool_),
        proto=keys.proto[flow],
        ethertype=keys.ethertype[flow],
        sport=keys.sport[flow],
        dport=keys.dport[flow],
    )


def _gquic_tags(p: Packets, out: Labeller, n_flows: int) -> None:
    """In flows already shown to be gQUIC, packets carrying crypto-handshake tags are handshake too."""
    gquic_flows = np.zeros(n_flows, dtype=np.bool_)
    gquic_flows[p.flow[out.label == Label.GQUIC_HS]] = True
    idx = np.flatnonzero(out.free & gquic_flows[p.flow])
    if idx.size:
        found = st.rows_matching_tags(p.head[idx], _GQUIC_TAGS)
        out.assign(idx, np.where(found, Label.GQUIC_HS, 0).astype(np.int64))


def label_packets(p: Packets, n_flows: int) -> Framing:
    """Run every recogniser over the packets; see ``docs/verdicts.md`` for what each one checks."""
    out = Labeller(p.m)
    for recognise in _ORDER:
        recognise(p, out)
    _gquic_tags(p, out, n_flows)
    return Framing(label=out.label, body_start=out.body_start, body_stop=out.body_stop)


__all__ = ["Framing", "label_packets", "packets"]
