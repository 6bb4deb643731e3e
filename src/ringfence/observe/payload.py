"""Per-flow encryption verdicts from payload samples (see :mod:`ringfence.observe.samples`).

The verdict comes from protocol framing and payload structure, never from ports alone and never
from entropy alone: a TLS record layer, an SSH banner, a QUIC long header, a WireGuard message, an
ESP SPI or a MACsec SecTAG prove a protocol; readable text, float tensors or zeros prove plaintext;
high entropy without framing stays ``unknown`` (compressed data looks the same). Every rule, what it
proves and what it cannot, is in ``docs/verdicts.md``.

Work is columnar: one pass of vectorised tests over all sampled heads labels each packet, a bounded
number of packets per flow get a content analysis, per-flow counts come from ``bincount``, and
reasons are worded once per distinct combination of facts.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt

from ringfence.observe.recognise.content import analyse
from ringfence.observe.recognise.framing import Framing, label_packets, packets
from ringfence.observe.recognise.labels import HTTP_LABELS, N_KINDS, N_LABELS, Label
from ringfence.observe.recognise.verdict import FlowFacts, decide
from ringfence.observe.samples import HEAD_BYTES, FlowKeys, PayloadSamples

#: Unframed packets per flow whose bytes are analysed (zeros, text, tensors).
GENERIC_PER_FLOW: Final = 4
#: … of which this many also get an entropy figure (the costliest test).
ENTROPY_PER_FLOW: Final = 2
#: Protocol bodies per flow checked for readable data (TLS records, ESP payloads, RDMA payloads …).
BODY_PER_FLOW: Final = 2

I64 = npt.NDArray[np.int64]
_TCP: Final = 6
_RPC_CALLS: Final = (
    Label.RPC_CALL_CLEAR,
    Label.RPC_GSS_NONE,
    Label.RPC_GSS_INTEG,
    Label.RPC_GSS_PRIV,
    Label.RPC_GSS_CTRL,
    Label.RPC_NULL,
    Label.RPC_TLS_PROBE,
)


def _check(keys: FlowKeys, samples: PayloadSamples) -> None:
    """The reader→classifier contract; a violation is a bug in the reader, not bad user input."""
    n, m = keys.n, samples.m
    for name in ("ethertype", "sport", "dport", "payload_bytes", "payload_packets"):
        if getattr(keys, name).shape != (n,):
            raise ValueError(f"FlowKeys.{name} has shape {getattr(keys, name).shape}, expected ({n},)")
    for name in ("forward", "length"):
        if getattr(samples, name).shape != (m,):
            raise ValueError(f"PayloadSamples.{name} has shape {getattr(samples, name).shape}, expected ({m},)")
    if samples.head.shape != (m, HEAD_BYTES):
        raise ValueError(f"PayloadSamples.head has shape {samples.head.shape}, expected ({m}, {HEAD_BYTES})")
    if m and (int(samples.flow.min()) < 0 or int(samples.flow.max()) >= n):
        raise ValueError(f"PayloadSamples.flow holds indices outside 0..{n - 1}")


def _rank(flow: I64, mask: npt.NDArray[np.bool_]) -> I64:
    """Per row: its position among the ``mask`` rows of the same flow, in row (time) order; large if not in mask."""
    rank = np.full(flow.shape[0], np.iinfo(np.int64).max, dtype=np.int64)
    rows = np.flatnonzero(mask)
    if rows.size == 0:
        return rank
    f = flow[rows]
    order = np.argsort(f, kind="stable") if bool(np.any(f[1:] < f[:-1])) else np.arange(f.size)
    fs = f[order]
    starts = np.flatnonzero(np.r_[True, fs[1:] != fs[:-1]])
    within = np.arange(fs.size) - np.repeat(starts, np.diff(np.r_[starts, fs.size]))
    rank[rows[order]] = within
    return rank


def _first_rows(flow: I64, rows: I64) -> tuple[I64, I64]:
    """(flows, their earliest row) among ``rows``."""
    flows, first = np.unique(flow[rows], return_index=True)
    return flows, rows[first]


def _details(
    fr: Framing, flow: I64, head: npt.NDArray[np.uint8], valid: I64, proto: npt.NDArray[np.uint8]
) -> dict[int, str]:
    """Short excerpts for reasons: an HTTP flow's first line, an ESP flow's SPI, an RPC call's program, the
    protocol type of GRE that was not decoded."""
    details: dict[int, str] = {}
    http = np.flatnonzero(np.isin(fr.label, HTTP_LABELS))
    for f, row in zip(*(a.tolist() for a in _first_rows(flow, http)), strict=True):
        line = bytes(head[row, : valid[row]]).split(b"\r", 1)[0].split(b"\n", 1)[0]
        details[f] = line[:60].decode("ascii", errors="replace")
    esp = np.flatnonzero(np.isin(fr.label, [Label.ESP, Label.ESP_NULL]))
    for f, row in zip(*(a.tolist() for a in _first_rows(flow, esp)), strict=True):
        details[f] = f"SPI 0x{int.from_bytes(bytes(head[row, :4]), 'big'):08x}"
    ah = np.flatnonzero(np.isin(fr.label, [Label.AH, Label.AH_ESP]))
    for f, row in zip(*(a.tolist() for a in _first_rows(flow, ah)), strict=True):
        details[f] = f"SPI 0x{int.from_bytes(bytes(head[row, 4:8]), 'big'):08x}"
    opaque = np.flatnonzero(fr.label == Label.GRE_OPAQUE)
    for f, row in zip(*(a.tolist() for a in _first_rows(flow, opaque)), strict=True):
        details[f] = f"protocol type 0x{int.from_bytes(bytes(head[row, 2:4]), 'big'):04x}"
    calls = np.flatnonzero(np.isin(fr.label, _RPC_CALLS))
    for f, row in zip(*(a.tolist() for a in _first_rows(flow, calls)), strict=True):
        base = 4 if proto[row] == _TCP else 0  # after the record mark
        program = int.from_bytes(bytes(head[row, base + 12 : base + 16]), "big")
        version = int.from_bytes(bytes(head[row, base + 16 : base + 20]), "big")
        details[f] = f"program {program} v{version}"
    return details


def _mean_by_flow(flow: I64, values: npt.NDArray[np.float64], n: int) -> npt.NDArray[np.float64]:
    have = ~np.isnan(values)
    total = np.bincount(flow[have], weights=values[have], minlength=n)
    count = np.bincount(flow[have], minlength=n)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def classify_flows(keys: FlowKeys, samples: PayloadSamples) -> tuple[list[str], list[str | None], list[str]]:
    """(protection, protocol, reason) for each of the ``keys.n`` flows.

    ``protection`` is a :class:`ringfence.observe.schema.Protection` value; ``protocol`` names what
    was recognised (``tls1.3``, ``ssh``, ``esp``, ``macsec``, ``tensor-bf16`` …) or is None;
    ``reason`` says in words what the payload showed.
    """
    _check(keys, samples)
    n = keys.n
    if n == 0:
        return [], [], []
    p = packets(keys, samples)
    fr = label_packets(p, n)
    label = fr.label.astype(np.int64)
    free = label == Label.NONE

    # Content analysis on a bounded number of packets per flow: unframed ones, then protocol bodies.
    generic_rank = _rank(p.flow, free)
    body_rank = _rank(p.flow, fr.body_start >= 0)
    gen_rows = np.flatnonzero(generic_rank < GENERIC_PER_FLOW)
    body_rows = np.flatnonzero(body_rank < BODY_PER_FLOW)
    rows = np.concatenate([gen_rows, body_rows])
    content = analyse(
        p.head[rows],
        np.concatenate([np.zeros(gen_rows.size, dtype=np.int64), fr.body_start[body_rows]]),
        np.concatenate([p.valid[gen_rows], fr.body_stop[body_rows]]),
        with_entropy=np.concatenate([generic_rank[gen_rows] < ENTROPY_PER_FLOW, body_rank[body_rows] < 1]),
    )
    g = gen_rows.size
    gen_flow, body_flow = p.flow[gen_rows], p.flow[body_rows]
    kind = content.kind.astype(np.int64)

    udp_free = free & (p.proto == 17)
    first = p.cols[0]
    facts = FlowFacts(
        ethertype=keys.ethertype,
        proto=keys.proto,
        sport=keys.sport,
        dport=keys.dport,
        payload_packets=keys.payload_packets.astype(np.int64),
        sampled=np.bincount(p.flow, minlength=n),
        later_bytes=np.maximum(
            keys.payload_bytes.astype(np.int64) - np.bincount(p.flow, weights=p.length, minlength=n).astype(np.int64), 0
        ),
        labels=np.bincount(label * n + p.flow, minlength=n * N_LABELS).reshape(N_LABELS, n),
        free_forward=np.bincount(p.flow[free & p.forward], minlength=n),
        short_form=np.bincount(p.flow[udp_free & ((first & 0xC0) == 0x40)], minlength=n),
        unified_form=np.bincount(p.flow[udp_free & ((first & 0xE0) == 0x20)], minlength=n),
        generic=np.bincount(kind[:g] * n + gen_flow, minlength=n * N_KINDS).reshape(N_KINDS, n),
        body=np.bincount(kind[g:] * n + body_flow, minlength=n * N_KINDS).reshape(N_KINDS, n),
        generic_entropy=_mean_by_flow(gen_flow, content.entropy[:g], n),
        body_entropy=_mean_by_flow(body_flow, content.entropy[g:], n),
        details=_details(fr, p.flow, p.head, p.valid, p.proto),
    )
    return decide(facts)


__all__ = ["BODY_PER_FLOW", "ENTROPY_PER_FLOW", "GENERIC_PER_FLOW", "classify_flows"]
