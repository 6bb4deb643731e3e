"""Raw NetFlow v5 / v9 / IPFIX export datagrams, concatenated in a file, → one-direction records.

Datagrams are walked in Python (one header each); the records inside them are decoded with numpy:
v5 records are a fixed 48-byte layout, v9/IPFIX data records follow their template, so all records of
one template are gathered and their fields cut out of a 2-D byte array in bulk.
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from ringfence.observe.flows._bidir import RECORD_SCHEMA
from ringfence.observe.flows._common import WarningLog
from ringfence.observe.flows.interface import FlowSourceError, ProgressFn
from ringfence.observe.schema import TS

#: Information elements used (IANA numbers; v9 shares them).
IE_OCTETS, IE_PACKETS, IE_PROTO, IE_TCP_FLAGS, IE_SPORT, IE_SRC4, IE_DPORT, IE_DST4 = 1, 2, 4, 6, 7, 8, 11, 12
IE_LAST_UPTIME, IE_FIRST_UPTIME, IE_SRC6, IE_DST6, IE_VLAN = 21, 22, 27, 28, 58
IE_START_S, IE_END_S, IE_START_MS, IE_END_MS, IE_START_US, IE_END_US, IE_DOT1Q = 150, 151, 152, 153, 154, 155, 243
IE_OCTETS_TOTAL, IE_PACKETS_TOTAL = 85, 86
_FLUSH: Final = 65536  # records gathered per template before a bulk decode (bounds memory)
#: Templates held at once, over all observation domains. Exporters define a handful; a file defining
#: tens of thousands is hostile, and each one held costs memory. Beyond it new templates are ignored
#: (with one warning) and their data sets are reported as records without a template.
MAX_TEMPLATES: Final = 4096
#: Decoded tables kept before they are concatenated into one: many tiny tables (one per redefinition
#: of a template) would otherwise cost per-table overhead without bound.
_COMPACT: Final = 256
#: Largest counter accepted (as in the text readers): 2^62 packets or bytes is already absurd, and
#: 2^64-1 (an exporter's "unknown") must not wrap to -1.
_MAX_COUNTER: Final = 2**62
#: Latest flow time accepted, in ms since 1970: timestamps in ns must fit int64 (year 2262).
_MAX_MS: Final = (2**63 - 1) // 1_000_000

_V5 = np.dtype(
    [
        ("src", ">u4"),
        ("dst", ">u4"),
        ("nexthop", ">u4"),
        ("input", ">u2"),
        ("output", ">u2"),
        ("packets", ">u4"),
        ("octets", ">u4"),
        ("first", ">u4"),
        ("last", ">u4"),
        ("sport", ">u2"),
        ("dport", ">u2"),
        ("pad1", "u1"),
        ("flags", "u1"),
        ("proto", "u1"),
        ("tos", "u1"),
        ("src_as", ">u2"),
        ("dst_as", ">u2"),
        ("src_mask", "u1"),
        ("dst_mask", "u1"),
        ("pad2", ">u2"),
    ]
)


@dataclass
class _Pending:
    """Records of one template waiting for a bulk decode, with their datagram's clock."""

    fields: tuple[tuple[int, int, int], ...]  # (ie, offset, length)
    length: int
    chunks: list[bytes] = field(default_factory=list)
    export_ms: list[npt.NDArray[np.int64]] = field(default_factory=list)
    uptime_ms: list[npt.NDArray[np.int64]] = field(default_factory=list)
    vantage: str = ""
    count: int = 0


class RawDatagramParser:
    """Walks a file of concatenated export datagrams and yields record tables."""

    def __init__(self, path: Path, warnings: WarningLog) -> None:
        self.path = path
        self.warnings = warnings
        self.templates: dict[tuple[int, int, int], tuple[tuple[int, int, int], ...] | None] = {}
        self.pending: dict[tuple[int, int, int], _Pending] = {}
        self.tables: list[pa.Table] = []
        self.missing_template_sets = 0
        self.records = 0
        self._template_limit_warned = False
        self.templates_ignored = 0
        # v5 records waiting for one bulk decode: their bytes, and (count, export ms, uptime) per datagram
        self._v5_chunks: list[bytes] = []
        self._v5_clocks: list[tuple[int, int, int]] = []
        self._v5_count = 0

    def parse(self, data: bytes, progress: ProgressFn | None = None) -> list[pa.Table]:
        """Parse the whole buffer; raises :class:`FlowSourceError` where framing is lost."""
        off = 0
        total = len(data)
        while off < total:
            if total - off < 4:
                raise self._err(off, "truncated datagram header")
            version = struct.unpack_from(">H", data, off)[0]
            if version == 5:
                off = self._v5(data, off)
            elif version == 9:
                off = self._v9(data, off)
            elif version == 10:
                off = self._ipfix(data, off)
            else:
                raise self._err(off, f"not a NetFlow v5/v9 or IPFIX datagram (version {version})")
            if progress is not None:
                progress(off, total)
        self._flush_v5()
        for key in list(self.pending):
            self._flush(key)
        return self.tables

    def _err(self, off: int, msg: str) -> FlowSourceError:
        return FlowSourceError(f"{self.path}@{off}", msg)

    # --- NetFlow v5: fixed records -------------------------------------------------------------
    def _v5(self, data: bytes, off: int) -> int:
        if len(data) - off < 24:
            raise self._err(off, "truncated NetFlow v5 header")
        _, count, uptime, secs, nsecs = struct.unpack_from(">HHIII", data, off)
        end = off + 24 + 48 * count
        if count == 0 or count > 30 or end > len(data):
            raise self._err(off, f"NetFlow v5 header announces {count} records that are not there")
        # Gathered, not decoded here: a datagram holds at most 30 records, and a table per datagram cost
        # ~1 ms of numpy and Arrow set-up each (a file of 1-record datagrams: ~14 s a MB).
        self._v5_chunks.append(data[off + 24 : end])
        self._v5_clocks.append((count, secs * 1000 + nsecs // 1_000_000, uptime))
        self._v5_count += count
        self.records += count
        if self._v5_count >= _FLUSH:
            self._flush_v5()
        return int(end)

    def _flush_v5(self) -> None:
        """Decode the gathered v5 records in bulk (one table), each timed by its own datagram's clock."""
        if not self._v5_count:
            return
        rec = np.frombuffer(b"".join(self._v5_chunks), dtype=_V5)
        counts = np.array([c for c, _, _ in self._v5_clocks], dtype=np.int64)
        export_ms = np.repeat(np.array([e for _, e, _ in self._v5_clocks], dtype=np.int64), counts)
        uptime = np.repeat(np.array([u for _, _, u in self._v5_clocks], dtype=np.int64), counts)
        self._v5_chunks, self._v5_clocks, self._v5_count = [], [], 0
        first = export_ms - (uptime - rec["first"].astype(np.int64))
        last = export_ms - (uptime - rec["last"].astype(np.int64))
        self._keep(
            _table(
                src=_ip4_text(rec["src"]),
                dst=_ip4_text(rec["dst"]),
                sport=rec["sport"].astype(np.int32),
                dport=rec["dport"].astype(np.int32),
                proto=rec["proto"].astype(np.uint8),
                packets=rec["packets"].astype(np.int64),
                octets=rec["octets"].astype(np.int64),
                first_ms=first,
                last_ms=last,
                flags=rec["flags"].astype(np.int64),
                vlan=None,
                vantage="v5",
            )
        )

    # --- NetFlow v9 and IPFIX: templates, then data --------------------------------------------
    def _v9(self, data: bytes, off: int) -> int:
        if len(data) - off < 20:
            raise self._err(off, "truncated NetFlow v9 header")
        _, _count, uptime, secs, _seq, source = struct.unpack_from(">HHIIII", data, off)
        pos = off + 20
        # v9 has no datagram length: flow sets follow until the next datagram's version number
        # (5, 9, 10 can never be a flow set id: those are 0, 1 or >= 256).
        while len(data) - pos >= 4:
            set_id, length = struct.unpack_from(">HH", data, pos)
            if 2 <= set_id < 256:
                break
            if length < 4 or pos + length > len(data):
                raise self._err(pos, f"NetFlow v9 flow set with impossible length {length}")
            self._set(9, source, set_id, data, pos + 4, pos + length, secs * 1000, uptime)
            pos += length
        return int(pos) if len(data) - pos >= 4 else len(data)

    def _ipfix(self, data: bytes, off: int) -> int:
        if len(data) - off < 16:
            raise self._err(off, "truncated IPFIX header")
        _, length, secs, _seq, domain = struct.unpack_from(">HHIII", data, off)
        end = off + length
        if length < 16 or end > len(data):
            raise self._err(off, f"IPFIX message length {length} runs past the end of the file")
        pos = off + 16
        while end - pos >= 4:
            set_id, set_len = struct.unpack_from(">HH", data, pos)
            if set_len < 4 or pos + set_len > end:
                raise self._err(pos, f"IPFIX set with impossible length {set_len}")
            self._set(10, domain, set_id, data, pos + 4, pos + set_len, secs * 1000, None)
            pos += set_len
        return int(end)

    def _set(
        self,
        version: int,
        domain: int,
        set_id: int,
        data: bytes,
        start: int,
        end: int,
        export_ms: int,
        uptime: int | None,
    ) -> None:
        template_set, options_set = (0, 1) if version == 9 else (2, 3)
        if set_id == template_set:
            self._templates(version, domain, data, start, end)
        elif set_id == options_set:
            return  # options (sampling, exporter statistics) describe no flows
        elif set_id >= 256:
            key = (version, domain, set_id)
            fields = self.templates.get(key)
            if key not in self.templates:
                self.missing_template_sets += 1
                self.warnings.add(f"{self.path}@{start - 4}: data set for template {set_id} without its template")
                return
            if fields is None:
                return  # a template with variable-length fields: reported once when it was defined
            self._gather(key, fields, data, start, end, export_ms, uptime)

    def _templates(self, version: int, domain: int, data: bytes, pos: int, end: int) -> None:
        while end - pos >= 4:
            tid, count = struct.unpack_from(">HH", data, pos)
            pos += 4
            fields: list[tuple[int, int, int]] = []
            offset = 0
            variable = False
            for _ in range(count):
                if end - pos < 4:
                    raise self._err(pos, "template runs past its set")
                ie, flen = struct.unpack_from(">HH", data, pos)
                pos += 4
                if version == 10 and ie & 0x8000:
                    pos += 4  # enterprise number: the element is vendor-specific, skipped by length
                    ie = 0
                if flen == 0xFFFF:
                    variable = True
                fields.append((ie & 0x7FFF, offset, flen))
                offset += flen
            if count == 0:
                self._withdraw(version, domain, tid, pos)
                continue
            if tid < 256:
                raise self._err(pos, f"template id {tid} below 256")
            key = (version, domain, tid)
            if key not in self.templates and len(self.templates) >= MAX_TEMPLATES:
                self.templates_ignored += 1
                if not self._template_limit_warned:
                    self.warnings.add(
                        f"{self.path}@{pos}: more than {MAX_TEMPLATES} templates defined; later ones are ignored"
                    )
                    self._template_limit_warned = True
                continue
            if key in self.pending:
                self._flush(key)  # a redefined template: decode what was gathered under the old one
            if variable:
                self.warnings.add(f"{self.path}@{pos}: template {tid} has variable-length fields; its records skipped")
                self.templates[key] = None
            else:
                self.templates[key] = tuple(fields)

    def _withdraw(self, version: int, domain: int, tid: int, pos: int) -> None:
        """A template withdrawal (field count 0, RFC 7011 §8.1): one template, or all of the domain's.

        Records gathered under a withdrawn template are decoded first: they were sent while it held.
        """
        if tid >= 256:
            keys = [(version, domain, tid)]
        elif version == 10 and tid in (2, 3):  # "withdraw all (options) templates" of this domain
            keys = [k for k in self.templates if k[0] == version and k[1] == domain]
        else:
            raise self._err(pos, f"template withdrawal for id {tid}, which is no template")
        for key in keys:
            self._flush(key)
            self.templates.pop(key, None)

    def _gather(
        self,
        key: tuple[int, int, int],
        fields: tuple[tuple[int, int, int], ...],
        data: bytes,
        start: int,
        end: int,
        export_ms: int,
        uptime: int | None,
    ) -> None:
        length = sum(f[2] for f in fields)
        if length == 0:
            return
        n = (end - start) // length  # the remainder is padding
        if n == 0:
            return
        pend = self.pending.get(key)
        if pend is None:
            pend = _Pending(fields=fields, length=length, vantage=f"v{key[0]} domain {key[1]}")
            self.pending[key] = pend
        pend.chunks.append(data[start : start + n * length])
        pend.export_ms.append(np.full(n, export_ms, dtype=np.int64))
        pend.uptime_ms.append(np.full(n, -1 if uptime is None else uptime, dtype=np.int64))
        pend.count += n
        self.records += n
        if pend.count >= _FLUSH:
            self._flush(key)

    def _flush(self, key: tuple[int, int, int]) -> None:
        pend = self.pending.pop(key, None)
        if pend is None or pend.count == 0:
            return
        raw = np.frombuffer(b"".join(pend.chunks), dtype=np.uint8).reshape(pend.count, pend.length)
        export_ms = np.concatenate(pend.export_ms)
        uptime = np.concatenate(pend.uptime_ms)
        by_ie = {ie: (off, flen) for ie, off, flen in pend.fields if ie}

        too_big = np.zeros(pend.count, dtype=bool)

        def unsigned(ie: int) -> npt.NDArray[np.uint64] | None:
            if ie not in by_ie:
                return None
            off, flen = by_ie[ie]
            if flen > 8 or flen == 0:
                return None
            cols = raw[:, off : off + flen].astype(np.uint64)
            weights = (np.uint64(256) ** np.arange(flen - 1, -1, -1, dtype=np.uint64)).astype(np.uint64)
            return np.asarray((cols * weights).sum(axis=1, dtype=np.uint64), dtype=np.uint64)

        def num(ie: int) -> npt.NDArray[np.int64] | None:
            value = unsigned(ie)
            if value is None:
                return None
            # Values beyond int64 are clamped (never wrapped to negative); counters and times check ranges.
            return np.minimum(value, np.uint64(2**63 - 1)).astype(np.int64)

        def counter(ie: int) -> npt.NDArray[np.int64] | None:
            value = num(ie)
            if value is not None:
                too_big[value > _MAX_COUNTER] = True
            return value

        def addr(ie4: int, ie6: int) -> pa.Array | None:
            if ie4 in by_ie and by_ie[ie4][1] == 4:
                value = num(ie4)
                return None if value is None else _ip4_text(value.astype(np.uint32))
            if ie6 in by_ie and by_ie[ie6][1] == 16:
                off, _ = by_ie[ie6]
                return _ip6_text(raw[:, off : off + 16])
            return None

        src, dst = addr(IE_SRC4, IE_SRC6), addr(IE_DST4, IE_DST6)
        proto = num(IE_PROTO)
        packets = counter(IE_PACKETS) if IE_PACKETS in by_ie else counter(IE_PACKETS_TOTAL)
        octets = counter(IE_OCTETS) if IE_OCTETS in by_ie else counter(IE_OCTETS_TOTAL)
        if src is None or dst is None or proto is None or packets is None or octets is None:
            self.warnings.add(
                f"{self.path}: {pend.count} record(s) of template {key[2]} skipped: "
                "template lacks addresses, protocol or counters"
            )
            return
        first, last = _times(num, export_ms, uptime)
        bad_time = np.zeros(pend.count, dtype=bool)
        for ms in (first, last):
            if ms is not None:
                wrong = (ms < 0) | (ms > _MAX_MS)
                bad_time |= wrong & (ms != -1)
                ms[wrong] = -1  # unknown, never a wrapped 1970
        if bad_time.any():
            self.warnings.add(
                f"{self.path}: {int(bad_time.sum())} record(s) of template {key[2]} have a flow time beyond year "
                "2262 or before 1970: first/last seen left empty"
            )
        zeros = np.full(pend.count, -1, dtype=np.int64)
        sport, dport = num(IE_SPORT), num(IE_DPORT)
        vlan = num(IE_DOT1Q) if IE_DOT1Q in by_ie else num(IE_VLAN)
        table = _table(
                src=src,
                dst=dst,
                sport=(zeros if sport is None else sport).astype(np.int32),
                dport=(zeros if dport is None else dport).astype(np.int32),
                proto=(proto & 0xFF).astype(np.uint8),
                packets=packets,
                octets=octets,
                first_ms=first,
                last_ms=last,
                flags=num(IE_TCP_FLAGS),
                vlan=vlan,
                vantage=pend.vantage,
            )
        if too_big.any():
            self.warnings.add(
                f"{self.path}: {int(too_big.sum())} record(s) of template {key[2]} skipped: packet or byte counter "
                f"above 2^62 (2^64-1 is an exporter's 'unknown', not a count)"
            )
            table = table.filter(pa.array(~too_big))
        self._keep(table)

    def _keep(self, table: pa.Table) -> None:
        self.tables.append(table)
        if len(self.tables) >= _COMPACT:
            self.tables = [pa.concat_tables(self.tables).combine_chunks()]


def _times(
    num: object, export_ms: npt.NDArray[np.int64], uptime: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.int64] | None, npt.NDArray[np.int64] | None]:
    """Absolute flow start/end in ms, from whichever time elements the template carries."""
    assert callable(num)
    for start_ie, end_ie, scale in (
        (IE_START_MS, IE_END_MS, 1.0),
        (IE_START_S, IE_END_S, 1000.0),
        (IE_START_US, IE_END_US, 0.001),
    ):
        s, e = num(start_ie), num(end_ie)
        if s is not None and e is not None:
            return _scaled_ms(s, scale), _scaled_ms(e, scale)
    s, e = num(IE_FIRST_UPTIME), num(IE_LAST_UPTIME)
    if s is not None and e is not None:
        known = uptime >= 0
        first = np.where(known, export_ms - (uptime - s), -1)
        last = np.where(known, export_ms - (uptime - e), -1)
        return first, last
    return None, None


def _scaled_ms(values: npt.NDArray[np.int64], scale: float) -> npt.NDArray[np.int64]:
    """Times in ms; a value whose ms would not fit (seconds of 2^62) becomes -2: flagged as out of range."""
    ms = values.astype(np.float64) * scale
    out = np.full(values.shape, -2, dtype=np.int64)
    fits = ms <= float(_MAX_MS)
    out[fits] = ms[fits].astype(np.int64)
    return out


def _ip4_text(values: npt.NDArray[np.uint32]) -> pa.Array:
    uniq, inverse = np.unique(values, return_inverse=True)
    texts = pa.array([str(ipaddress.IPv4Address(int(v))) for v in uniq], pa.string())
    return texts.take(pa.array(inverse.astype(np.int64)))


def _ip6_text(raw: npt.NDArray[np.uint8]) -> pa.Array:
    view = np.ascontiguousarray(raw).view(np.dtype((np.void, 16))).ravel()
    uniq, inverse = np.unique(view, return_inverse=True)
    texts = pa.array([str(ipaddress.IPv6Address(bytes(v))) for v in uniq], pa.string())
    return texts.take(pa.array(inverse.astype(np.int64)))


def _table(
    *,
    src: pa.Array,
    dst: pa.Array,
    sport: npt.NDArray[np.int32],
    dport: npt.NDArray[np.int32],
    proto: npt.NDArray[np.uint8],
    packets: npt.NDArray[np.int64],
    octets: npt.NDArray[np.int64],
    first_ms: npt.NDArray[np.int64] | None,
    last_ms: npt.NDArray[np.int64] | None,
    flags: npt.NDArray[np.int64] | None,
    vlan: npt.NDArray[np.int64] | None,
    vantage: str,
) -> pa.Table:
    n = len(src)
    has_ports = np.isin(proto, (6, 17, 132))
    null_ts = pa.nulls(n, TS)

    def ts(ms: npt.NDArray[np.int64] | None) -> pa.Array:
        if ms is None:
            return null_ts
        return pa.array(ms * 1_000_000, pa.int64(), mask=ms < 0).cast(TS)

    hint = np.zeros(n, dtype=np.int8)
    if flags is not None:
        # OR-ed flags of one direction: SYN without ACK is only the initiator of an unanswered attempt.
        hint[((flags & 0x02) != 0) & ((flags & 0x10) == 0)] = 1
    table = pa.table(
        {
            "src": src,
            "dst": dst,
            "sport": pa.array(sport, mask=~has_ports | (sport < 0)),
            "dport": pa.array(dport, mask=~has_ports | (dport < 0)),
            "proto": pa.array(proto),
            "packets": pa.array(packets),
            "bytes": pa.array(octets),
            "payload_bytes": pa.nulls(n, pa.int64()),
            "first_seen": ts(first_ms),
            "last_seen": ts(last_ms),
            "hint": pa.array(hint),
            "vantage": pa.array([vantage] * n, pa.string()),
            "src_identity": pa.nulls(n, pa.string()),
            "dst_identity": pa.nulls(n, pa.string()),
            "verdict": pa.nulls(n, pa.string()),
            "attr": pa.nulls(n, pa.string()) if vlan is None else pa.array(vlan).cast(pa.string()),
        }
    )
    return table.cast(RECORD_SCHEMA)


__all__ = ["MAX_TEMPLATES", "RawDatagramParser"]
