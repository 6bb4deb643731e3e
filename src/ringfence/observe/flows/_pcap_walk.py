"""Record framing for classic pcap and pcapng: find every packet record in a buffer, in bulk.

A capture is a chain of length-prefixed records, so finding record *n* needs record *n-1*'s length: a
sequential walk. A Python loop costs ~0.5 µs a record on our machines, which is fine for jumbo frames
but caps small-packet captures at ~2 Mpkt/s. So for small records the walk is done speculatively in
numpy: every place whose bytes look like a record header is a *candidate* (classic pcap: the top byte of
``ts_sec`` equals the current record's, then the whole header is plausible — same high 16 bits of
``ts_sec``, a valid fraction and length; pcapng: an aligned block type of 6), and each candidate's
declared length gives where its successor must start. Runs of candidates that chain exactly onto each
other are taken as records in one step. Where the chain breaks (a false candidate inside a payload, a
block of another type, a timestamp rollover), the walk takes one exact Python step and looks for the
chain again. The result is exactly what a sequential walk gives, because every record accepted was
reached from the previous one by its own length.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Final

import numpy as np
import numpy.typing as npt

#: Largest captured length of one packet we accept (libpcap's MAXIMUM_SNAPLEN); beyond it a record is corrupt.
MAX_CAPLEN: Final = 262144
#: Largest pcapng block of another kind (name resolution, custom) we accept.
MAX_BLOCK: Final = 16 << 20
#: Bytes of zero padding every framing buffer must carry after its data (windows read past record ends).
PAD: Final = 512
#: Bytes scanned for record-header candidates at once (bounds the candidate arrays to a few MB).
SCAN_SEGMENT: Final = 4 << 20
#: Where more than one candidate in this many bytes looks like a record header, scanning costs more than the
#: exact walk (a timestamp of 0 makes every zero byte a candidate): that segment is walked exactly instead.
SCAN_DENSITY: Final = 24
#: Mean record size (bytes) above which records are walked exactly, not scanned for (and the reader maps its
#: windows whole: they hold too few records to hand over).
LARGE_RECORD: Final = 1500.0
_ZERO_HEADER: Final = bytes(16)

PCAP_MAGIC_US: Final = 0xA1B2C3D4
PCAP_MAGIC_NS: Final = 0xA1B23C4D
PCAPNG_SHB: Final = 0x0A0D0D0A
PCAPNG_BOM: Final = 0x1A2B3C4D

_EPB: Final = 6
_SPB: Final = 3
_PB: Final = 2
_IDB: Final = 1

I64 = npt.NDArray[np.int64]


class FramingError(Exception):
    """A record that cannot be framed: ``offset`` is relative to the buffer; the reader adds the file offset."""

    def __init__(self, offset: int, message: str) -> None:
        super().__init__(message)
        self.offset = offset
        self.message = message


@dataclass(frozen=True)
class Interface:
    """One pcapng interface (or the single implicit one of a classic pcap)."""

    linktype: int
    units_per_s: int  # timestamp units per second (10**6 for microseconds)
    offset_s: int = 0  # if_tsoffset, seconds added to every timestamp


@dataclass(frozen=True)
class Frames:
    """Packet records found in one buffer (all arrays of equal length, in file order)."""

    data: I64  # offset of the packet's first byte in the buffer
    caplen: I64  # captured bytes
    wirelen: I64  # original length on the wire
    ts_ns: I64  # nanoseconds since the epoch
    iface: npt.NDArray[np.int32]  # index into the reader's interface list

    @property
    def n(self) -> int:
        """Number of packets."""
        return int(self.data.shape[0])


@dataclass(frozen=True)
class Walk:
    """Records found by one walk: their positions, where the walk stopped, and why if not at the end."""

    pos: I64
    tail: int  # first byte not consumed (an incomplete record, or the corrupt one)
    error: FramingError | None
    kinds: I64 | None = None  # pcapng block type of each record


@dataclass
class NgSection:
    """Mutable state of the pcapng section being read: byte order and the interfaces seen so far."""

    little: bool
    base: int  # global index of this section's interface 0
    interfaces: list[Interface] = field(default_factory=list)


def u32(buf: npt.NDArray[np.uint8], pos: int, little: bool) -> int:
    """The unsigned 32-bit integer at ``pos``."""
    return int.from_bytes(buf[pos : pos + 4].tobytes(), "little" if little else "big")


def gather(buf: npt.NDArray[np.uint8], pos: I64, width: int) -> npt.NDArray[np.uint8]:
    """Rows of ``width`` bytes starting at each ``pos`` (one memcpy per row), zero past the buffer's end."""
    size = buf.shape[0]
    limit = size - width
    if pos.shape[0] == 0:
        return np.zeros((0, width), np.uint8)
    if limit >= 0 and int(pos.max()) <= limit and int(pos.min()) >= 0:
        view = np.ndarray(shape=(limit + 1,), dtype=np.dtype((np.void, width)), buffer=buf, strides=(1,))
        return view[pos].view(np.uint8).reshape(-1, width)
    # Rows reaching past the end (the last packets of a file, or hostile offsets): read from a padded copy.
    p = np.clip(pos, 0, size)
    lo = int(p[p > limit].min())
    tail = np.zeros(size - lo + width, np.uint8)
    tail[: size - lo] = buf[lo:]
    padded_view = np.ndarray(shape=(size - lo + 1,), dtype=np.dtype((np.void, width)), buffer=tail, strides=(1,))
    rows = np.zeros((p.shape[0], width), np.uint8)
    over = p > limit
    if (~over).any():
        rows[~over] = gather(buf, p[~over], width)
    rows[over] = padded_view[p[over] - lo].view(np.uint8).reshape(-1, width)
    return rows


def words(buf: npt.NDArray[np.uint8], pos: I64, count: int, little: bool) -> npt.NDArray[np.int64]:
    """``count`` consecutive unsigned 32-bit words at each ``pos``, as int64 columns (n, count)."""
    rows = gather(buf, pos, 4 * count)
    return rows.view("<u4" if little else ">u4").astype(np.int64)


def _find_byte(buf: npt.NDArray[np.uint8], lo: int, hi: int, value: int) -> I64:
    """Sorted positions ``x`` in ``[lo, hi)`` where ``buf[x] == value``."""
    found: list[I64] = []
    step = 1 << 20  # cache-sized blocks: the compare and its nonzero stay in L2
    for start in range(lo, hi, step):
        stop = min(hi, start + step)
        found.append(np.flatnonzero(buf[start:stop] == value).astype(np.int64) + start)
    return _cat(found)


class _Chain:
    """Candidate record positions with their successors, and where their chain breaks."""

    def __init__(self, cands: I64, nxt: I64) -> None:
        self.cands = cands
        self.breaks = np.flatnonzero(nxt[:-1] != cands[1:])

    def run(self, start: int) -> tuple[I64, int]:
        """From ``cands[start]``, the records whose successor is the next candidate, and the index of the last one."""
        k = int(np.searchsorted(self.breaks, start))
        stop = int(self.breaks[k]) if k < self.breaks.shape[0] else self.cands.shape[0] - 1
        return self.cands[start:stop], stop

    def index(self, p: int) -> int:
        """Index of the candidate at ``p``, or -1."""
        i = int(np.searchsorted(self.cands, p))
        return i if i < self.cands.shape[0] and self.cands[i] == p else -1


class PcapWalker:
    """Finds the records of a classic pcap file in a buffer."""

    def __init__(self, little: bool, nano: bool, linktype: int) -> None:
        self.little = little
        self.nano = nano
        self.linktype = linktype
        self._u32 = struct.Struct("<I" if little else ">I").unpack_from
        self.mean_record = 0.0  # running mean record size, decides walk vs scan

    def _step(self, mem: memoryview, p: int, n: int) -> int:
        """Exact single step: the next record's position, or -1 if the record at ``p`` is not complete."""
        if p + 16 > n:
            return -1
        length = self._u32(mem, p + 8)[0]
        if length == 0 and mem[p : p + 16] == _ZERO_HEADER:
            # 16 zero bytes: no time, no length, nothing on the wire — the file is zero-filled from here (space
            # preallocated or never written, ``truncate -s``), and reading on would frame 1 GB as 67 M packets.
            raise FramingError(p, "record header is all zeros: the file is zero-filled from here (never written)")
        if length > MAX_CAPLEN:
            raise FramingError(p, f"record declares {length} captured bytes (more than {MAX_CAPLEN}): corrupt")
        q = p + 16 + length
        return q if q <= n else -1

    def _walk_python(self, mem: memoryview, p: int, n: int, limit: int, parts: list[I64], stop: int = -1) -> int:
        """Exact walk of up to ``limit`` records (and, if ``stop`` >= 0, until ``p`` reaches ``stop``).

        This loop is :meth:`_step` inlined: at jumbo-frame sizes it is the reader's hottest Python (a call per
        record costs about as much as the rest of the step), so the uncommon cases leave the loop to ``_step``.
        """
        found: list[int] = []
        append = found.append
        unpack = self._u32
        stop = n if stop < 0 else stop
        last = n - 16  # the last place a complete record header can start
        try:
            if limit < n:  # a bounded sample: count as we go
                while len(found) < limit and p < stop:
                    q = self._step(mem, p, n)
                    if q < 0:
                        break
                    append(p)
                    p = q
                return p
            while p < stop and p <= last:
                length = unpack(mem, p + 8)[0]
                q = p + 16 + length
                if length == 0 or length > MAX_CAPLEN or q > n:
                    q = self._step(mem, p, n)  # raises on corruption; -1: incomplete
                    if q < 0:
                        break
                append(p)
                p = q
        finally:
            parts.append(np.asarray(found, dtype=np.int64))
        return p

    def _walk_scan(self, buf: npt.NDArray[np.uint8], mem: memoryview, p: int, n: int, parts: list[I64]) -> int:
        top = 3 if self.little else 0  # the most significant byte of ts_sec
        frac_limit = 10**9 if self.nano else 10**6
        while p + 16 <= n:
            tsec = self._u32(mem, p)[0]
            hi = min(n, p + SCAN_SEGMENT)
            cands = _find_byte(buf, p + top, hi - 16 + top + 1, tsec >> 24) - top
            if cands.shape[0] * SCAN_DENSITY > hi - p:
                q = self._walk_python(mem, p, n, n, parts, stop=hi)
                if q < hi:  # an incomplete record: the end of what this window holds
                    return q
                p = q
                continue
            # Keep candidates whose whole header is plausible: same high 16 bits of ts_sec, a valid fraction
            # and a length, not zero (a zero-length record is left to the exact step, which knows zero-filled
            # files). A true record failing this is still found: the exact step below takes it.
            w = words(buf, cands, 4, self.little)
            ok = ((w[:, 0] >> 16) == tsec >> 16) & (w[:, 1] < frac_limit) & (w[:, 2] <= MAX_CAPLEN) & (w[:, 2] > 0)
            cands, lengths = cands[ok], w[ok, 2]
            if cands.shape[0] == 0 or cands[0] != p:
                keep = cands > p
                cands = np.concatenate([np.array([p], np.int64), cands[keep]])
                lengths = np.concatenate([words(buf, cands[:1] + 8, 1, self.little)[:, 0], lengths[keep]])
            chain = _Chain(cands, np.where(lengths <= MAX_CAPLEN, cands + 16 + lengths, -1))
            i = 0
            misses = 0
            while misses <= 64:
                run, last = chain.run(i)
                parts.append(run)
                p = int(cands[last])
                # Exact steps until we land on a candidate again (or give up and rescan from here).
                while misses <= 64:
                    q = self._step(mem, p, n)
                    if q < 0:
                        return p
                    parts.append(np.array([p], np.int64))
                    p = q
                    i = chain.index(p)
                    if i >= 0:
                        break
                    misses += 1
        return p

    def walk(self, buf: npt.NDArray[np.uint8], start: int, n: int) -> Walk:
        """Record positions in ``buf[start:n]`` (``start`` is a record boundary) and where the incomplete tail starts.

        Stops at the first corrupt record and reports it in :attr:`Walk.error`.
        """
        mem = memoryview(buf)  # type: ignore[arg-type]
        parts: list[I64] = []
        p = start
        try:
            if self.mean_record == 0.0:
                p = self._walk_python(mem, p, n, 1024, parts)  # a sample to estimate the record size
                if parts[0].shape[0]:
                    self.mean_record = (p - start) / parts[0].shape[0]
            if self.mean_record > LARGE_RECORD:
                # Large records: the exact loop is cheaper than scanning every byte.
                p = self._walk_python(mem, p, n, n, parts)
            else:
                p = self._walk_scan(buf, mem, p, n, parts)
        except FramingError as exc:
            return Walk(_cat(parts), exc.offset, exc)
        pos = _cat(parts)
        if pos.shape[0]:
            self.mean_record = (p - start) / pos.shape[0]
        return Walk(pos, p, None)

    def frames(self, buf: npt.NDArray[np.uint8], pos: I64) -> Frames:
        """Header fields of the records at ``pos``."""
        w = words(buf, pos, 4, self.little)
        frac = w[:, 1] if self.nano else w[:, 1] * 1000
        return Frames(
            data=pos + 16,
            caplen=w[:, 2],
            wirelen=w[:, 3],
            ts_ns=w[:, 0] * 1_000_000_000 + frac,
            iface=np.zeros(pos.shape[0], np.int32),
        )


def _cat(parts: list[I64]) -> I64:
    return np.concatenate(parts) if parts else np.empty(0, np.int64)


def parse_idb(body: bytes, little: bool) -> Interface:
    """An Interface Description Block's link type and timestamp options (``body`` excludes type and lengths)."""
    e = "<" if little else ">"
    if len(body) < 8:
        raise ValueError("interface description block shorter than 8 bytes")
    linktype = struct.unpack_from(e + "H", body, 0)[0]
    units = 1_000_000
    offset_s = 0
    pos = 8
    while pos + 4 <= len(body):
        code, olen = struct.unpack_from(e + "HH", body, pos)
        if code == 0:
            break
        if pos + 4 + olen > len(body):
            raise ValueError(f"option {code} declares {olen} bytes, past the end of the block")
        value = body[pos + 4 : pos + 4 + olen]
        if code == 9 and olen >= 1:  # if_tsresol
            r = value[0]
            exp = r & 0x7F
            if exp > 63:
                raise ValueError(f"if_tsresol {r:#x} out of range")
            units = 2**exp if r & 0x80 else 10**exp
        elif code == 14 and olen >= 8:  # if_tsoffset
            offset_s = struct.unpack_from(e + "q", value, 0)[0]
        pos += 4 + ((olen + 3) & ~3)
    if units > 10**18:
        raise ValueError("if_tsresol finer than 1e-18 s")
    if abs(offset_s) > 1 << 32:
        raise ValueError(f"if_tsoffset {offset_s} s out of range")
    return Interface(linktype=linktype, units_per_s=units, offset_s=offset_s)


def ticks_to_ns(ticks: npt.NDArray[np.uint64], iface: Interface) -> I64:
    """Convert pcapng timestamps in ``iface``'s units to nanoseconds since the epoch."""
    u = iface.units_per_s
    t = ticks.astype(np.uint64)
    if u == 10**9:
        ns = t.astype(np.int64)
    elif 10**9 % u == 0:
        ns = (t * np.uint64(10**9 // u)).astype(np.int64)
    elif u % 10**9 == 0:
        ns = (t // np.uint64(u // 10**9)).astype(np.int64)
    else:  # e.g. binary fractions: split to stay within 64 bits
        whole = t // np.uint64(u)
        rest = t % np.uint64(u)
        ns = (whole * np.uint64(10**9) + (rest * np.uint64(10**9)) // np.uint64(u)).astype(np.int64)
    return ns + np.int64(iface.offset_s * 1_000_000_000)


class PcapngWalker:
    """Finds the packet blocks of one pcapng section in a buffer; parses interface blocks on the way."""

    def __init__(self, section: NgSection, interfaces: list[Interface]) -> None:
        self.section = section
        self.interfaces = interfaces  # global list shared by all sections of the file
        self.little = section.little
        self._u32 = struct.Struct("<I" if section.little else ">I").unpack_from
        self.last_ts = 0

    def _block(self, mem: memoryview, p: int, n: int) -> tuple[int, int]:
        """(type, total length) of the block at ``p``; length -1 if it is not complete in the buffer."""
        if p + 12 > n:
            return -1, -1
        btype = self._u32(mem, p)[0]
        total = self._u32(mem, p + 4)[0]
        if btype == PCAPNG_SHB:
            return btype, total
        if total % 4 or total < 12:
            raise FramingError(p, f"pcapng block length {total} is not a multiple of 4 of at least 12: corrupt")
        limit = MAX_CAPLEN + 64 if btype in (_EPB, _SPB, _PB) else MAX_BLOCK
        if total > limit:
            raise FramingError(p, f"pcapng block of type {btype:#x} declares {total} bytes: corrupt")
        if p + total > n:
            return btype, -1
        if self._u32(mem, p + total - 4)[0] != total:
            raise FramingError(p, "pcapng block's trailing length differs from its leading length: corrupt")
        return btype, total

    def walk(self, buf: npt.NDArray[np.uint8], start: int, n: int) -> tuple[Walk, bool]:
        """Packet blocks in ``buf[start:n]``, and whether the walk stopped at a new section header.

        ``start`` must be a block boundary at a multiple of 4 (pcapng blocks are 4-aligned).
        """
        mem = memoryview(buf)  # type: ignore[arg-type]
        count = max(0, (n - 8) // 4)
        w = np.frombuffer(buf, dtype="<u4" if self.little else ">u4", count=count + 2)
        cands = (np.flatnonzero(w[start // 4 : count] == _EPB) * 4 + start).astype(np.int64)
        totals = w[cands // 4 + 1].astype(np.int64) if cands.shape[0] else np.empty(0, np.int64)
        good = (totals % 4 == 0) & (totals >= 32) & (totals <= MAX_CAPLEN + 64)
        chain = _Chain(cands, np.where(good, cands + totals, -1))
        parts: list[I64] = []
        kinds: list[I64] = []
        p = start
        try:
            while True:
                j = chain.index(p)
                if j >= 0:
                    run, last = chain.run(j)
                    parts.append(run)
                    kinds.append(np.full(run.shape[0], _EPB, np.int64))
                    p = int(cands[last])
                btype, total = self._block(mem, p, n)
                if total < 0:
                    break
                if btype == PCAPNG_SHB:
                    return Walk(_cat(parts), p, None, _cat(kinds)), True
                if btype in (_EPB, _SPB, _PB):
                    parts.append(np.array([p], np.int64))
                    kinds.append(np.array([btype], np.int64))
                elif btype == _IDB:
                    try:
                        iface = parse_idb(bytes(mem[p + 8 : p + total - 4]), self.little)
                    except (ValueError, struct.error) as exc:
                        raise FramingError(p, f"bad interface description block: {exc}") from exc
                    self.section.interfaces.append(iface)
                    self.interfaces.append(iface)
                p += total
        except FramingError as exc:
            return Walk(_cat(parts), exc.offset, exc, _cat(kinds)), False
        return Walk(_cat(parts), p, None, _cat(kinds)), False

    def frames(self, buf: npt.NDArray[np.uint8], pos: I64, kinds: I64) -> tuple[Frames, FramingError | None]:
        """Header fields of the packet blocks at ``pos``, cut short at the first inconsistent one."""
        w = words(buf, pos, 7, self.little)  # type, total, iface|drops, ts_hi, ts_lo, caplen, origlen
        total = w[:, 1]
        iface_local = np.where(kinds == _PB, w[:, 2] & 0xFFFF if self.little else w[:, 2] >> 16, w[:, 2])
        caplen = w[:, 5].copy()
        wirelen = w[:, 6].copy()
        data = pos + 28
        spb = kinds == _SPB
        if spb.any():  # simple packet block: original length, then the data; no timestamp, interface 0
            wirelen[spb] = w[spb, 2]
            caplen[spb] = np.minimum(w[spb, 2], total[spb] - 16)
            data[spb] = pos[spb] + 12
            iface_local[spb] = 0
        n_if = len(self.section.interfaces)
        trailing = words(buf, pos + total - 4, 1, self.little)[:, 0]
        bad = (caplen > MAX_CAPLEN) | (data + caplen > pos + total - 4) | (iface_local >= n_if) | (trailing != total)
        error = None
        if bad.any():
            k = int(np.argmax(bad))
            error = FramingError(
                int(pos[k]),
                f"packet block inconsistent (captured length {int(caplen[k])}, block length {int(total[k])}, "
                f"interface {int(iface_local[k])} of {n_if} defined): corrupt",
            )
            w, total, iface_local, caplen, wirelen, data, spb = (
                w[:k],
                total[:k],
                iface_local[:k],
                caplen[:k],
                wirelen[:k],
                data[:k],
                spb[:k],
            )
        m = data.shape[0]
        ticks = (w[:, 3].astype(np.uint64) << np.uint64(32)) | w[:, 4].astype(np.uint64)
        ts = np.zeros(m, np.int64)
        for local in np.unique(iface_local).tolist():
            sel = iface_local == local
            ts[sel] = ticks_to_ns(ticks[sel], self.section.interfaces[int(local)])
        if spb.any():
            # A simple packet block carries no timestamp: it takes the time of the packet before it.
            idx = np.where(spb, -1, np.arange(m))
            np.maximum.accumulate(idx, out=idx)
            ts = np.where(idx < 0, self.last_ts, ts[np.maximum(idx, 0)])
        if m:
            self.last_ts = int(ts[-1])
        frames = Frames(
            data=data,
            caplen=caplen,
            wirelen=wirelen,
            ts_ns=ts,
            iface=(iface_local + self.section.base).astype(np.int32),
        )
        return frames, error


__all__ = [
    "MAX_BLOCK",
    "MAX_CAPLEN",
    "PAD",
    "PCAPNG_BOM",
    "PCAPNG_SHB",
    "PCAP_MAGIC_NS",
    "PCAP_MAGIC_US",
    "Frames",
    "FramingError",
    "Interface",
    "NgSection",
    "Walk",
    "gather",
    "PcapWalker",
    "PcapngWalker",
    "parse_idb",
    "ticks_to_ns",
    "u32",
    "words",
]
