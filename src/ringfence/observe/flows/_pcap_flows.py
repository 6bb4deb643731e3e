"""Packets → bidirectional flows, in bulk, with state per flow (never per packet) across batches.

Each batch's packets get a canonical key (the lower (address, port) side first, so both directions of a
conversation share it), are grouped by a hash of that key (Arrow's dictionary encoding, exact on the key
bytes), aggregated per group with numpy, and merged into the flows of earlier batches through a dict from
key bytes to flow id. Counters are kept per canonical direction; which side is the initiator is only
decided at the end, when every packet (a late SYN, say) has been seen.
"""

from __future__ import annotations

import socket
from typing import Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from ringfence.observe.arrow_kernels import dictionary_encode
from ringfence.observe.flows._pcap_layout import KIND_FLOW, OUTER_ID_WORDS, OUTER_NAMES, OUTER_NONE, Cols
from ringfence.observe.flows._pcap_walk import gather
from ringfence.observe.payload import classify_flows
from ringfence.observe.samples import (
    ETHERTYPE_IPV4,
    ETHERTYPE_IPV6,
    HEAD_BYTES,
    SAMPLES_PER_FLOW,
    FlowKeys,
    PayloadSamples,
)
from ringfence.observe.schema import FLOW_SCHEMA

I64 = npt.NDArray[np.int64]
U64 = npt.NDArray[np.uint64]
_MAX: Final = np.iinfo(np.int64).max
_MIN: Final = np.iinfo(np.int64).min
# Odd 64-bit multipliers for the key-field hash of :func:`_hash_groups` (splitmix64's and golden-ratio constants).
_MIX: Final = tuple(np.uint64(k) for k in (
    0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB, 0xD6E8FEB86659FD93, 0xC2B2AE3D27D4EB4F,
    0x165667B19E3779F9,
))  # fmt: skip

#: Registered (non-well-known) service ports: a side on one of these is the responder.
SERVICE_PORTS: Final = (
    2049, 2379, 2380, 3260, 4420, 4500, 4789, 4791, 5201, 6081, 6443, 6635, 8080, 8443, 9000, 9090, 9100, 10250,
    29500, 51820,
)  # fmt: skip

#: The lowest port an OS picks for an outgoing connection (Linux's default ip_local_port_range starts
#: at 32768; Windows and the IANA range at 49152).
EPHEMERAL_LOW: Final = 32768

_KEY: Final = np.dtype(
    [
        ("etype", "<u2"), ("proto", "u1"), ("okind", "u1"), ("pa", "<i4"), ("pb", "<i4"), ("vlan", "<i4"),
        ("ovni", "<i8"), ("a_hi", "<u8"), ("a_lo", "<u8"), ("b_hi", "<u8"), ("b_lo", "<u8"),
        ("oa_hi", "<u8"), ("oa_lo", "<u8"), ("ob_hi", "<u8"), ("ob_lo", "<u8"),
    ]
)  # fmt: skip

# Per-flow state: name → (dtype, initial value).
_STATE: Final[dict[str, tuple[type[np.generic], int]]] = {
    "packets": (np.int64, 0),
    "bytes": (np.int64, 0),
    "packets_ab": (np.int64, 0),  # canonical side A → side B
    "bytes_ab": (np.int64, 0),
    "payload": (np.int64, 0),
    "payload_packets": (np.int64, 0),
    "first_ts": (np.int64, _MAX),
    "last_ts": (np.int64, _MIN),
    "syn": (np.int64, _MAX),  # min over pure SYNs of seq*2 + direction
    "first_seq": (np.int64, 0),  # file order of the flow's first packet
    "first_dir": (np.int64, 0),  # direction of the first packet (0: A → B)
    "first_oswap": (np.int64, 0),  # whether the first packet's outer header went B → A
    "first_label": (np.int64, -1),  # top MPLS label of the first packet
    "sampled": (np.int64, 0),
    "pkey": (np.int64, -1),  # highest RoCEv2 BTH P_Key seen (-1: none)
}


def _lex_gt(a_hi: U64, a_lo: U64, b_hi: U64, b_lo: U64) -> npt.NDArray[np.bool_]:
    gt: npt.NDArray[np.bool_] = (a_hi > b_hi) | ((a_hi == b_hi) & (a_lo > b_lo))
    return gt


def _keys(c: Cols, sel: I64 | slice, m: int) -> npt.NDArray[np.void]:
    """The directional keys of the packets ``sel`` of a batch (``m`` of them)."""
    key = np.zeros(m, _KEY)
    key["etype"] = c.etype[sel]
    key["proto"] = c.proto[sel]
    key["okind"] = c.okind[sel]
    key["vlan"] = c.vlan[sel]
    key["pa"], key["pb"] = c.sport[sel], c.dport[sel]
    key["a_hi"], key["a_lo"] = c.src_hi[sel], c.src_lo[sel]
    key["b_hi"], key["b_lo"] = c.dst_hi[sel], c.dst_lo[sel]
    tunnelled = c.okind[sel] != OUTER_NONE
    if tunnelled.any():
        t = np.flatnonzero(tunnelled)
        r = np.arange(c.kind.shape[0])[sel][t]
        sub = key[t]
        sub["ovni"] = c.ovni[r]
        sub["oa_hi"], sub["oa_lo"] = c.osrc_hi[r], c.osrc_lo[r]
        sub["ob_hi"], sub["ob_lo"] = c.odst_hi[r], c.odst_lo[r]
        key[t] = sub
    return key


def _first_rows(g: I64, n_groups: int) -> I64:
    """Index of each group's first row, where groups are numbered in order of first appearance (Arrow's
    dictionary encoding): a row is its group's first where the running maximum of the numbers grows."""
    m = g.shape[0]
    top = np.maximum.accumulate(g)
    grows = np.empty(m, np.bool_)
    grows[:1] = True
    np.greater(top[1:], top[:-1], out=grows[1:])
    first = np.flatnonzero(grows)
    if first.shape[0] == n_groups and (m == 0 or top[-1] == n_groups - 1):
        return first
    first = np.full(n_groups, m, np.int64)  # numbered some other way: the general (slower) form
    np.minimum.at(first, g, np.arange(m, dtype=np.int64))
    return first


def _hash_groups(c: Cols, rows: I64 | slice) -> tuple[I64, int, I64] | None:
    """Groups of a batch's packets with equal keys, found by a 64-bit hash of the key's fields: (group of each
    packet, number of groups, each group's first packet), as the hash of the whole key gives them.

    Hashing the 88-byte key costs more than building it from the fields (the key is the slower half of the
    fold); here only each group's first packet gets a key. Every packet's fields are then compared with its
    group's first packet, so the groups are exact: on a hash collision — or with tunnelled packets, whose
    outer headers are part of the key — it returns None and the caller groups by the whole key.
    """
    if (c.okind[rows] != OUTER_NONE).any():
        return None
    u = np.uint64
    # (sport, dport, proto, etype) packed without overlap: ports + 1 in 17 bits each (-1: none), 8, 16 bits
    packed = (c.sport[rows] + 1).astype(u) | ((c.dport[rows] + 1).astype(u) << u(17))
    packed |= (c.proto[rows].astype(u) << u(34)) | ((c.etype[rows] & 0xFFFF).astype(u) << u(42))
    fields = [packed, c.src_lo[rows], c.dst_lo[rows], c.vlan[rows].astype(u)]
    src_hi, dst_hi = c.src_hi[rows], c.dst_hi[rows]
    if src_hi.any() or dst_hi.any():  # IPv6 (or MAC) keys: their high words too
        fields += [src_hi, dst_hi]
    h = fields[0] * _MIX[0]
    for i, f in enumerate(fields[1:], 1):
        h ^= f
        h *= _MIX[i]
    h ^= h >> u(29)
    encoded = dictionary_encode(pa.array(h))
    g = encoded.indices.to_numpy().astype(np.int64)
    n_groups = len(encoded.dictionary)
    first = _first_rows(g, n_groups)
    at_first = first[g]
    for f in fields:
        if (f != f[at_first]).any():
            return None
    return g, n_groups, first


class FlowAccumulator:
    """Accumulates decoded packet batches into flows; :meth:`table` produces the Arrow flow table."""

    def __init__(self) -> None:
        self._index: dict[bytes, int] = {}
        self._n = 0
        self._keys = np.zeros(0, _KEY)
        self._state: dict[str, I64] = {k: np.zeros(0, np.int64) for k in _STATE}
        self._samples: list[tuple[I64, I64, npt.NDArray[np.bool_], I64, npt.NDArray[np.uint8]]] = []

    @property
    def n_flows(self) -> int:
        """Flows seen so far."""
        return self._n

    def _grow(self, n: int) -> None:
        cap = self._keys.shape[0]
        if n <= cap:
            return
        new_cap = max(n, 2 * cap, 1024)
        keys = np.zeros(new_cap, _KEY)
        keys[:cap] = self._keys
        self._keys = keys
        for name, (_, init) in _STATE.items():
            arr = np.full(new_cap, init, np.int64)
            arr[:cap] = self._state[name]
            self._state[name] = arr

    def add(self, buf: npt.NDArray[np.uint8], c: Cols, ts: I64, seq0: int | I64) -> None:
        """Add the flow packets of one decoded batch (``ts``: their timestamps; ``seq0``: file index of row 0, or
        of every row, for packets held back and added later, such as fragments that waited for their first).

        Packets are grouped by their *directional* key first; each group is then put in canonical order
        (lower side first) as a whole, so no per-packet work depends on the direction.
        """
        is_flow = c.kind == KIND_FLOW
        rows: I64 | slice = slice(None) if is_flow.all() else np.flatnonzero(is_flow)
        seq_all = np.arange(c.kind.shape[0], dtype=np.int64) + seq0 if isinstance(seq0, int) else seq0
        seq = seq_all[rows]
        m = seq.shape[0]
        if not m:
            return
        grouped = _hash_groups(c, rows)
        if grouped is None:
            key = _keys(c, rows, m)
            raw = pa.FixedSizeBinaryArray.from_buffers(pa.binary(_KEY.itemsize), m, [None, pa.py_buffer(key)])
            encoded = dictionary_encode(raw)
            g = encoded.indices.to_numpy().astype(np.int64)
            n_groups = len(encoded.dictionary)
            first = _first_rows(g, n_groups)
            reps = key[first]
        else:
            g, n_groups, first = grouped
            reps = _keys(c, first if isinstance(rows, slice) else rows[first], n_groups)
        swap = _lex_gt(reps["a_hi"], reps["a_lo"], reps["b_hi"], reps["b_lo"]) | (
            (reps["a_hi"] == reps["b_hi"]) & (reps["a_lo"] == reps["b_lo"]) & (reps["pa"] > reps["pb"])
        )
        oswap = _lex_gt(reps["oa_hi"], reps["oa_lo"], reps["ob_hi"], reps["ob_lo"])
        canon = reps.copy()
        for x, y, flip in (("pa", "pb", swap), ("a_hi", "b_hi", swap), ("a_lo", "b_lo", swap),
                           ("oa_hi", "ob_hi", oswap), ("oa_lo", "ob_lo", oswap)):  # fmt: skip
            canon[x], canon[y] = np.where(flip, reps[y], reps[x]), np.where(flip, reps[x], reps[y])
        label = c.olabel[rows][first]
        gids = self._global_ids(canon, seq[first], swap, oswap, label)
        self._aggregate(g, gids, n_groups, c, rows, swap, ts[rows], seq)
        self._sample(buf, g, gids, c, rows, swap, seq)

    def _global_ids(self, canon: npt.NDArray[np.void], first_seq: I64, swap: npt.NDArray[np.bool_],
                    oswap: npt.NDArray[np.bool_], label: I64) -> I64:  # fmt: skip
        """Flow id of each group; new flows take their first-packet facts from their earliest group."""
        raw = canon.tobytes()
        size = _KEY.itemsize
        gids = np.empty(canon.shape[0], np.int64)
        fresh: list[int] = []
        index = self._index
        n = self._n
        for i in np.argsort(first_seq, kind="stable").tolist():
            k = raw[i * size : (i + 1) * size]
            j = index.get(k)
            if j is None:
                j = index[k] = n
                n += 1
                fresh.append(i)
            gids[i] = j
        self._grow(n)
        self._n = n
        if fresh:
            new = np.asarray(fresh, np.int64)
            ids = gids[new]
            self._keys[ids] = canon[new]
            st = self._state
            st["first_seq"][ids] = first_seq[new]
            st["first_dir"][ids] = swap[new]
            st["first_oswap"][ids] = oswap[new]
            st["first_label"][ids] = label[new]
        return gids

    def _aggregate(self, g: I64, gids: I64, n_groups: int, c: Cols, rows: I64 | slice, swap: npt.NDArray[np.bool_],
                   ts: I64, seq: I64) -> None:  # fmt: skip
        # Both directions of a flow may be groups of this batch: hence ufunc.at on the flow arrays.
        st = self._state
        length = c.length[rows]
        pay = c.wire_pay[rows]  # what this packet carries (a first fragment's pay_len is its datagram's)
        packets = np.bincount(g, minlength=n_groups)
        nbytes = np.bincount(g, weights=length, minlength=n_groups).astype(np.int64)
        ab = ~swap
        np.add.at(st["packets"], gids, packets)
        np.add.at(st["bytes"], gids, nbytes)
        np.add.at(st["packets_ab"], gids[ab], packets[ab])
        np.add.at(st["bytes_ab"], gids[ab], nbytes[ab])
        np.add.at(st["payload"], gids, np.bincount(g, weights=pay, minlength=n_groups).astype(np.int64))
        np.add.at(st["payload_packets"], gids, np.bincount(g[pay > 0], minlength=n_groups))
        lo = np.full(n_groups, _MAX, np.int64)
        np.minimum.at(lo, g, ts)
        hi = np.full(n_groups, _MIN, np.int64)
        np.maximum.at(hi, g, ts)
        np.minimum.at(st["first_ts"], gids, lo)
        np.maximum.at(st["last_ts"], gids, hi)
        pkey = c.pkey[rows]
        if (pkey >= 0).any():  # RoCEv2 only: every other batch skips this
            top = np.full(n_groups, -1, np.int64)
            np.maximum.at(top, g, pkey)
            np.maximum.at(st["pkey"], gids, top)
        syn = np.flatnonzero(c.syn[rows])
        if syn.shape[0]:
            code = np.full(n_groups, _MAX, np.int64)
            np.minimum.at(code, g[syn], seq[syn] * 2)
            has = code != _MAX
            np.minimum.at(st["syn"], gids[has], code[has] + swap[has])

    def _sample(self, buf: npt.NDArray[np.uint8], g: I64, gids: I64, c: Cols, rows: I64 | slice,
                swap: npt.NDArray[np.bool_], seq: I64) -> None:  # fmt: skip
        sampled = self._state["sampled"]
        cap = c.pay_cap[rows]
        e = np.flatnonzero((cap > 0) & (sampled[gids] < SAMPLES_PER_FLOW)[g])
        if not e.shape[0]:
            return
        fe = gids[g[e]]
        order = np.argsort(fe, kind="stable")  # by flow, in file order within each flow
        fs = fe[order]
        change = np.concatenate(([True], fs[1:] != fs[:-1]))
        starts = np.flatnonzero(change)
        rank = np.arange(fs.shape[0]) - starts[np.cumsum(change) - 1]
        sel = e[order[rank < SAMPLES_PER_FLOW - sampled[fs]]]
        off = c.pay_off[rows][sel]
        pcap_ = cap[sel]
        heads = gather(buf, off, HEAD_BYTES).copy()
        heads[np.arange(HEAD_BYTES)[None, :] >= pcap_[:, None]] = 0
        flow = gids[g[sel]]
        self._samples.append((flow, seq[sel], swap[g[sel]], c.pay_len[rows][sel], heads))
        np.add.at(sampled, flow, 1)

    def table(self, source: str) -> tuple[pa.Table, FlowKeys, PayloadSamples]:
        """The flow table (classification columns filled by the payload classifier) and its inputs."""
        n = self._n
        st = {k: v[:n] for k, v in self._state.items()}
        key = self._keys[:n]
        order = np.argsort(st["first_seq"], kind="stable")
        st = {k: v[order] for k, v in st.items()}
        key = key[order]
        row_of = np.empty(n, np.int64)
        row_of[order] = np.arange(n)
        init_a = _initiator_is_a(key, st)
        pa_, pb_ = key["pa"].astype(np.int64), key["pb"].astype(np.int64)
        etype = key["etype"].astype(np.int64)
        src_text = _texts(etype, np.where(init_a, key["a_hi"], key["b_hi"]), np.where(init_a, key["a_lo"], key["b_lo"]))
        dst_text = _texts(etype, np.where(init_a, key["b_hi"], key["a_hi"]), np.where(init_a, key["b_lo"], key["a_lo"]))
        sport = np.where(init_a, pa_, pb_)
        dport = np.where(init_a, pb_, pa_)
        packets_fwd = np.where(init_a, st["packets_ab"], st["packets"] - st["packets_ab"])
        bytes_fwd = np.where(init_a, st["bytes_ab"], st["bytes"] - st["bytes_ab"])
        keys = FlowKeys(
            ethertype=etype.astype(np.uint16),
            proto=key["proto"].astype(np.uint8),
            sport=sport.astype(np.int32),
            dport=dport.astype(np.int32),
            payload_bytes=st["payload"],
            payload_packets=st["payload_packets"],
        )
        samples = self._payload_samples(row_of, init_a)
        protection, protocol, reason = classify_flows(keys, samples)
        reason = _note_mid_stream(reason, protection, key["proto"], st["syn"])
        ts_type = FLOW_SCHEMA.field("first_seen").type
        no_port = sport < 0
        vlan = key["vlan"].astype(np.int64)
        columns = {
            "src": pa.array(src_text, pa.string()),
            "dst": pa.array(dst_text, pa.string()),
            "sport": pa.array(sport, pa.int32(), mask=no_port),
            "dport": pa.array(dport, pa.int32(), mask=no_port),
            "proto": pa.array(key["proto"], pa.uint8()),
            "packets": pa.array(st["packets"], pa.int64()),
            "bytes": pa.array(st["bytes"], pa.int64()),
            "packets_fwd": pa.array(packets_fwd, pa.int64()),
            "bytes_fwd": pa.array(bytes_fwd, pa.int64()),
            "payload_bytes": pa.array(st["payload"], pa.int64()),
            "first_seen": pa.array(st["first_ts"], ts_type),
            "last_seen": pa.array(st["last_ts"], ts_type),
            "protection": pa.array(protection, pa.string()),
            "protocol": pa.array(protocol, pa.string()),
            "reason": pa.array(reason, pa.string()),
            "outer": pa.array(_outer_texts(key, st, init_a), pa.string()),
            "vlan": pa.array(vlan, pa.int32(), mask=vlan < 0),
            "pkey": pa.array(st["pkey"], pa.int32(), mask=st["pkey"] < 0),
            "source": pa.array([source] * n, pa.string()),
        }
        cols = [columns.get(f.name, pa.nulls(n, f.type)) for f in FLOW_SCHEMA]
        return pa.Table.from_arrays(cols, schema=FLOW_SCHEMA), keys, samples

    def _payload_samples(self, row_of: I64, init_a: npt.NDArray[np.bool_]) -> PayloadSamples:
        if not self._samples:
            return PayloadSamples(
                flow=np.zeros(0, np.int64),
                forward=np.zeros(0, np.bool_),
                length=np.zeros(0, np.int32),
                head=np.zeros((0, HEAD_BYTES), np.uint8),
            )
        flow = row_of[np.concatenate([s[0] for s in self._samples])]
        seq = np.concatenate([s[1] for s in self._samples])
        swap = np.concatenate([s[2] for s in self._samples])
        length = np.concatenate([s[3] for s in self._samples])
        head = np.concatenate([s[4] for s in self._samples])
        order = np.lexsort((seq, flow))
        flow, swap, length, head = flow[order], swap[order], length[order], head[order]
        return PayloadSamples(
            flow=flow,
            forward=(~swap) == init_a[flow],
            length=np.minimum(length, np.iinfo(np.int32).max).astype(np.int32),
            head=np.ascontiguousarray(head),
        )


#: What a TCP flow whose opening was not captured adds to an ``unknown`` verdict's reason.
MID_STREAM_NOTE: Final = (
    "; the connection began before the capture (no SYN seen), so the handshake that names its protocol "
    "is not in it: capture from the connection's start to judge it"
)


def _note_mid_stream(reason: list[str], protection: list[str], proto: npt.NDArray[np.uint8], syn: I64) -> list[str]:
    """``reason`` with :data:`MID_STREAM_NOTE` on each TCP flow judged ``unknown`` without a SYN.

    A flow joined mid-stream (after a TLS or SSH handshake) shows only ciphertext records; content
    alone cannot name the protocol, and the reader must say why instead of leaving it a mystery.
    """
    rows = np.flatnonzero((proto == 6) & (syn == _MAX))
    if rows.shape[0] == 0:
        return reason
    out = list(reason)
    for i in rows.tolist():
        if protection[i] == "unknown":
            out[i] = f"{out[i]}{MID_STREAM_NOTE}"
    return out


def _initiator_is_a(key: npt.NDArray[np.void], st: dict[str, I64]) -> npt.NDArray[np.bool_]:
    """SYN-without-ACK sender; else the side talking to a service port; else the side whose port is
    ephemeral while the other's is not (a capture that starts mid-connection has no SYN, and a client's
    port is what the OS picked); else the first packet's sender."""
    pa_, pb_ = key["pa"].astype(np.int64), key["pb"].astype(np.int64)
    svc_a = (pa_ >= 0) & ((pa_ < 1024) | np.isin(pa_, SERVICE_PORTS))
    svc_b = (pb_ >= 0) & ((pb_ < 1024) | np.isin(pb_, SERVICE_PORTS))
    eph_a, eph_b = pa_ >= EPHEMERAL_LOW, pb_ >= EPHEMERAL_LOW
    by_first = np.where(eph_a != eph_b, eph_a, st["first_dir"] == 0)
    by_port = np.where(svc_a & svc_b & (pa_ != pb_), pb_ < pa_, svc_b)
    decided_by_port = (svc_a != svc_b) | (svc_a & svc_b & (pa_ != pb_))
    has_syn = st["syn"] != _MAX
    by_syn = (st["syn"] & 1) == 0
    return np.where(has_syn, by_syn, np.where(decided_by_port, by_port, by_first))


def _texts(etype: I64, hi: U64, lo: U64) -> list[str]:
    """Canonical text of each address (IPv4 dotted, IPv6 RFC 5952, MAC colon-separated)."""
    cache: dict[tuple[int, int, int], str] = {}
    out: list[str] = []
    for e, h, lo_ in zip(etype.tolist(), hi.tolist(), lo.tolist(), strict=True):
        k = (e, h, lo_)
        text = cache.get(k)
        if text is None:
            text = cache[k] = _text(e, h, lo_)
        out.append(text)
    return out


def _text(etype: int, hi: int, lo: int) -> str:
    if etype == ETHERTYPE_IPV4 or (etype != ETHERTYPE_IPV6 and hi == 0 and lo >> 32 == 0xFFFF):
        return socket.inet_ntop(socket.AF_INET, (lo & 0xFFFFFFFF).to_bytes(4, "big"))
    if etype == ETHERTYPE_IPV6 or hi:
        return socket.inet_ntop(socket.AF_INET6, hi.to_bytes(8, "big") + lo.to_bytes(8, "big"))
    return ":".join(f"{b:02x}" for b in lo.to_bytes(8, "big")[2:])


def _outer_texts(key: npt.NDArray[np.void], st: dict[str, I64], init_a: npt.NDArray[np.bool_]) -> list[str | None]:
    """E.g. ``vxlan 10.0.0.1→10.0.0.2 vni 42``, oriented like the flow (initiator's outer source first)."""
    out: list[str | None] = [None] * key.shape[0]
    for i in np.flatnonzero(key["okind"] != OUTER_NONE).tolist():
        k = key[i]
        kind = int(k["okind"])
        name = OUTER_NAMES[kind]
        fwd_dir = 0 if init_a[i] else 1
        swap = bool(st["first_oswap"][i]) == (fwd_dir == int(st["first_dir"][i]))
        a = _text(0, int(k["oa_hi"]), int(k["oa_lo"]))
        b = _text(0, int(k["ob_hi"]), int(k["ob_lo"]))
        label = int(st["first_label"][i])
        if name == "mpls":
            out[i] = f"mpls label {label}"
            continue
        if name == "nsh":  # no outer addresses: the service path id and index say where it is
            path = int(k["ovni"])
            out[i] = f"nsh spi {path >> 8:#x} si {path & 0xFF}"
            continue
        text = f"{name} {b}→{a}" if swap else f"{name} {a}→{b}"
        if int(k["ovni"]) >= 0:
            ident = int(k["ovni"])
            word = OUTER_ID_WORDS.get(kind, "id")
            text += f" {word} {ident:#x}" if word == "key" else f" {word} {ident}"
        if label >= 0:
            text += f" label {label}"
        out[i] = text
    return out


__all__ = ["MID_STREAM_NOTE", "SERVICE_PORTS", "FlowAccumulator"]
