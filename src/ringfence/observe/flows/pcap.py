"""Fast streaming reader of pcap and pcapng captures into the one flow schema.

Speed comes from never making a Python object per packet: the file is read in large chunks into one
reused buffer, record boundaries are found in bulk (:mod:`._pcap_walk`), header fields of all packets of a
batch are gathered with numpy (:mod:`._pcap_decode`), and packets are grouped into flows per batch and
merged into per-flow state (:mod:`._pcap_flows`). Memory is bounded by the buffer, one batch and the
per-flow state (including up to ``SAMPLES_PER_FLOW`` payload heads per flow), whatever the file size.

What it decodes: classic pcap (both byte orders, micro- and nanosecond), pcapng (both byte orders, several
sections and interfaces with their own link types and timestamp resolutions; enhanced, simple and obsolete
packet blocks); Ethernet with 802.1Q/802.1ad tag stacks, Linux cooked (SLL, SLL2), raw IP, IP over
InfiniBand, BSD null/loopback, PPP, PPPoE, Cisco HDLC; MPLS label stacks; NSH; IPv4 with options; IPv6 with
extension headers; VXLAN, VXLAN-GPE, Geneve, MPLS over UDP, GRE, enhanced GRE (PPTP) and ERSPAN (the *inner*
flow is reported, the tunnel in ``outer``; see :mod:`._pcap_tunnels` for what is kept when the inner headers
are cut short); MACsec frames as L2 flows between MAC addresses. IP fragments (v4 and v6) join their
datagram's 5-tuple flow, each counted as the packet it is on the wire (:mod:`._pcap_frags`: bounds, and the
hostile fragments it reports).
Frames that are not IP (ARP, LLDP, …) make no flow and are counted in a warning.
"""

from __future__ import annotations

import io
import mmap
import os
import struct
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO, Final, cast

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from ringfence.observe.flows._pcap_decode import BAD_REASONS, KIND_BAD, KIND_FLOW, KIND_SKIP, Cols, decode
from ringfence.observe.flows._pcap_flows import FlowAccumulator
from ringfence.observe.flows._pcap_frags import FragmentJoiner
from ringfence.observe.flows._pcap_rdma import extract as extract_rdma
from ringfence.observe.flows._pcap_rdma import set_pkey
from ringfence.observe.flows._pcap_rdma_acc import RdmaAccumulator
from ringfence.observe.flows._pcap_walk import (
    LARGE_RECORD,
    MAX_BLOCK,
    PCAP_MAGIC_NS,
    PCAP_MAGIC_US,
    PCAPNG_BOM,
    PCAPNG_SHB,
    Frames,
    Interface,
    NgSection,
    PcapngWalker,
    PcapWalker,
)
from ringfence.observe.flows.interface import FlowSourceError, ProgressFn, ReadResult
from ringfence.observe.samples import FlowKeys, PayloadSamples
from ringfence.observe.schema import RdmaFacts

#: Bytes read per chunk.
CHUNK_BYTES: Final = 32 << 20
#: Bytes of the first mapped window. The processing thread starts once a window is walked: a whole 32 MB window
#: of small packets is ~50 ms of walking that nothing overlaps, a 4 MB one ~6 ms. Windows of small records then
#: double up to ``CHUNK_BYTES``.
FIRST_WINDOW_BYTES: Final = 4 << 20
#: Packets decoded per batch: the batch's columns stay in a core's L2 cache (16,384 read small packets 17 %
#: faster than 65,536 here), and the per-packet working set is a few MB.
BATCH_PACKETS: Final = 16384

_PCAP_MAGICS: Final = {
    struct.pack("<I", PCAP_MAGIC_US): (True, False),
    struct.pack(">I", PCAP_MAGIC_US): (False, False),
    struct.pack("<I", PCAP_MAGIC_NS): (True, True),
    struct.pack(">I", PCAP_MAGIC_NS): (False, True),
}
_SHB_MAGIC: Final = struct.pack("<I", PCAPNG_SHB)  # a palindrome: the same in both byte orders

# Frames and processes ``buf[start:n]`` (``buf[0]`` is at file offset ``base``); returns (end of what was
# consumed, stop?). ``start`` is a record boundary.
_Step = Callable[[npt.NDArray[np.uint8], int, int, int], tuple[int, bool]]
# Populate the page tables up front: one system call instead of a page fault per 4 KiB.
_MAP_FLAGS: Final = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)


class _Tally:
    """Counts of packets that made no flow, for the warnings."""

    def __init__(self) -> None:
        self.non_ip: Counter[int] = Counter()
        self.bad: Counter[int] = Counter()
        self.bad_at: dict[int, int] = {}
        self.trunc = 0
        self.trunc_at = -1
        self.cut = 0
        self.cut_at = -1

    def add(self, cols: Cols, offsets: npt.NDArray[np.int64]) -> None:
        """Count the packets of one decoded batch that made no flow, or a flow with less than was asked."""
        kind, why, etype, trunc = cols.kind, cols.why, cols.etype, cols.trunc
        cut = np.flatnonzero(cols.cut & (kind == KIND_FLOW))
        if cut.shape[0]:
            self.cut += int(cut.shape[0])
            if self.cut_at < 0:
                self.cut_at = int(offsets[cut[0]])
        skip = kind == KIND_SKIP
        if skip.any():
            values, counts = np.unique(etype[skip], return_counts=True)
            self.non_ip.update(dict(zip(values.tolist(), counts.tolist(), strict=True)))
        bad = np.flatnonzero(kind == KIND_BAD)
        for code in np.unique(why[bad]).tolist():
            at = bad[why[bad] == code]
            self.bad[code] += int(at.shape[0])
            self.bad_at.setdefault(code, int(offsets[at[0]]))
        t = np.flatnonzero(trunc & (kind == KIND_FLOW))
        if t.shape[0]:
            self.trunc += int(t.shape[0])
            if self.trunc_at < 0:
                self.trunc_at = int(offsets[t[0]])

    def warnings(self, name: str) -> list[str]:
        out = [
            f"{name}: {count} packet(s) not decoded: {BAD_REASONS[code]} (first at byte {self.bad_at[code]})"
            for code, count in sorted(self.bad.items())
        ]
        if self.trunc:
            out.append(
                f"{name}: {self.trunc} packet(s) cut before their transport header were counted in flows without "
                f"ports (first at byte {self.trunc_at})"
            )
        if self.cut:
            out.append(
                f"{name}: {self.cut} tunnel packet(s) whose inner headers are cut short, invalid or not followed were "
                f"counted in the tunnel's own flow (first at byte {self.cut_at})"
            )
        if self.non_ip:
            kinds = ", ".join(f"{et:#06x}×{c}" for et, c in sorted(self.non_ip.items()))
            out.append(f"{name}: {sum(self.non_ip.values())} frame(s) that are not IP made no flow (ethertype {kinds})")
        return out


class PcapReader:
    """Reads classic pcap and pcapng files into flows (see the module docstring for what it decodes)."""

    name = "pcap"

    def __init__(self, *, chunk_bytes: int = CHUNK_BYTES, batch_packets: int = BATCH_PACKETS) -> None:
        """``chunk_bytes`` and ``batch_packets`` trade memory for speed; small values are for tests."""
        self.chunk_bytes = max(4096, chunk_bytes)
        self.batch_packets = max(1, batch_packets)

    def sniff(self, head: bytes) -> bool:
        """True if ``head`` starts with a pcap magic number or a pcapng section header."""
        return head[:4] in _PCAP_MAGICS or head[:4] == _SHB_MAGIC

    def read(self, path: Path, *, progress: ProgressFn | None = None) -> ReadResult:
        """Read the whole capture into flows. Raises :class:`FlowSourceError` if nothing of it is readable."""
        table, _, _, run = self._read(path, progress)
        return ReadResult(flows=table, warnings=run.all_warnings(), records=run.records)

    def read_rdma(self, path: Path, *, progress: ProgressFn | None = None) -> tuple[ReadResult, RdmaFacts]:
        """:meth:`read`, with the RDMA transport facts (BTH, RETH) gathered in the same pass."""
        table, _, _, run = self._read(path, progress, rdma=True)
        assert run.rdma is not None
        result = ReadResult(flows=table, warnings=run.all_warnings(), records=run.records)
        return result, run.rdma.facts(f"pcap:{path.name}")

    def _read(self, path: Path, progress: ProgressFn | None, *, rdma: bool = False,
              ) -> tuple[pa.Table, FlowKeys, PayloadSamples, _Read]:  # fmt: skip
        """The flows with the classifier's inputs (tests look at those too); ``rdma``: gather RDMA facts too."""
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                run = _Read(self, path, f, size, progress, rdma)
                run.run()
        except OSError as exc:
            raise FlowSourceError(str(path), f"cannot read capture: {exc.strerror or exc}") from exc
        table, keys, samples = run.flows.table(f"pcap:{path.name}")
        return table, keys, samples, run


class _Read:
    """One read of one file: buffer, walkers and accumulators."""

    def __init__(self, reader: PcapReader, path: Path, f: BinaryIO, size: int, progress: ProgressFn | None,
                 rdma: bool = False) -> None:  # fmt: skip
        self.path = path
        self.f = f
        self.size = size
        self.progress = progress
        self.batch = reader.batch_packets
        self.chunk = reader.chunk_bytes
        self.flows = FlowAccumulator()
        self.frags = FragmentJoiner()
        self.tally = _Tally()
        # RDMA facts only when asked for (read_rdma): a flows-only read takes just the P_Key of RoCEv2 packets.
        self.rdma = RdmaAccumulator() if rdma else None
        self.warnings: list[str] = []
        self.records = 0
        self.interfaces: list[Interface] = []
        self.pool: ThreadPoolExecutor | None = None  # the processing thread, started for the first large window
        self.pending: Future[None] | None = None
        self.handover = True  # False for a pipe: its one buffer is refilled at once, so nothing would overlap
        self.large_records = False  # the records framed so far average more than LARGE_RECORD bytes

    def _error(self, offset: int, message: str) -> FlowSourceError:
        return FlowSourceError(f"{self.path}@{offset}", message)

    def run(self) -> None:
        try:
            self._run()
        finally:
            if self.pool is not None:
                self.pool.shutdown(wait=True)

    def _run(self) -> None:
        head = self.f.read(24)
        if not head:
            self.warnings.append(f"{self.path.name}: the file is empty")
        elif head[:4] in _PCAP_MAGICS:
            self._run_pcap(head)
        elif head[:4] == _SHB_MAGIC:
            self._run_pcapng(head)
        else:
            raise self._error(0, f"not a pcap or pcapng capture (starts with {head[:4].hex()})")
        self.drain()
        self.finish()
        if self.records and not self.flows.n_flows and self.tally.bad and not (self.rdma and self.rdma.packets):
            # Nothing usable, and not because the capture holds only ARP or LLDP: an empty result here would
            # look like a clean one to whoever reads it, so it is an input error (exit 2) with the reasons.
            reasons = "; ".join(f"{c} × {BAD_REASONS[k]}" for k, c in sorted(self.tally.bad.items()))
            raise self._error(
                min(self.tally.bad_at.values()),
                f"none of its {self.records} packet(s) could be decoded into a flow: {reasons}",
            )

    def all_warnings(self) -> tuple[str, ...]:
        """Framing warnings, then the tallies of packets that made no flow."""
        name = self.path.name
        rdma = self.rdma
        cut = (
            [f"{name}: {rdma.truncated} RDMA packet(s) with their BTH or RETH cut short by the capture were not read "
             f"(first at byte {rdma.truncated_at})"]
            if rdma is not None and rdma.truncated
            else []
        )  # fmt: skip
        return (*self.warnings, *self.tally.warnings(name), *self.frags.warnings(name), *cut)

    # -- chunked reading ---------------------------------------------------------------------------------

    def _stop(self, offset: int, message: str) -> None:
        """Corruption at ``offset``: an error if nothing was readable before it, else a warning."""
        self.drain()  # the records before it are counted first
        if self.records == 0:
            raise self._error(offset, message)
        self.warnings.append(
            f"{self.path.name}: stopped at byte {offset}: {message}; flows before it are reported, the rest is not read"
        )

    def _loop(self, start: int, step: _Step, prefix: bytes) -> None:
        """Feed the file to ``step`` window by window, each window starting on a record boundary.

        ``prefix``: bytes from ``start`` on that were already read from the stream (for pipes).
        """
        try:
            fileno = self.f.fileno()
            mappable = self.size > 0 and os.path.isfile(self.path)
        except (OSError, ValueError):
            mappable = False
        if mappable:
            self._loop_mmap(fileno, start, step)
        else:
            self._loop_read(start, step, prefix)

    def _loop_mmap(self, fileno: int, file_off: int, step: _Step) -> None:
        # Mapped windows: only the cache lines of headers are touched, never the bulk of the payload bytes.
        window = min(self.chunk, FIRST_WINDOW_BYTES)
        while file_off < self.size:
            base = file_off - file_off % mmap.ALLOCATIONGRANULARITY
            length = min(window, self.size - base)
            eof = base + length >= self.size
            mm = mmap.mmap(fileno, length, flags=_MAP_FLAGS, prot=mmap.PROT_READ, offset=base)
            try:
                buf = np.frombuffer(mm, np.uint8)
                rel = file_off - base
                consumed, stop = step(buf, rel, length, base)
                del buf
            finally:
                try:
                    mm.close()
                except BufferError:  # a view still alive: the mapping goes when it does
                    pass
            if stop:
                return
            if self.progress is not None:
                self.progress(base + consumed, self.size)
            if eof:
                if consumed < length:
                    self._stop(base + consumed, f"the last {length - consumed} byte(s) are not a complete record")
                return
            if consumed == rel:  # a record longer than the window: widen it (bounded by the framing limits)
                if window >= 4 * MAX_BLOCK:
                    raise self._error(file_off, "record larger than any valid capture record")
                self.chunk = max(self.chunk, 2 * window)
            # Small records: the windows grow from the small first one. Large records hold too few packets to
            # hand over, so nothing is gained by growing, and it costs: the 1 GB mixed benchmark read 8 %
            # slower through windows of 4, 8 and 16 MB before its 32 MB ones than through 32 MB ones only.
            window = self.chunk if self.large_records else min(2 * window, self.chunk)
            file_off = base + consumed

    def _loop_read(self, file_off: int, step: _Step, prefix: bytes) -> None:
        # Pipes and devices: read into one reused buffer, carrying an incomplete record to the next read. The
        # buffer is refilled as soon as a step returns, so no window is handed to the processing thread.
        self.handover = False
        buf = np.zeros(max(self.chunk, len(prefix)), np.uint8)
        buf[: len(prefix)] = np.frombuffer(prefix, np.uint8)
        carry = len(prefix)
        while True:
            n = carry
            mem = memoryview(buf)  # type: ignore[arg-type]
            while n < buf.shape[0]:
                got = cast(io.BufferedIOBase, self.f).readinto(mem[n:])
                if not got:
                    break
                n += got
            del mem
            eof = n < buf.shape[0]
            if n == 0:
                return
            consumed, stop = step(buf[:n], 0, n, file_off)
            if stop:
                return
            if self.progress is not None:
                self.progress(file_off + consumed, self.size)
            if eof:
                if consumed < n:
                    self._stop(file_off + consumed, f"the last {n - consumed} byte(s) are not a complete record")
                return
            if consumed == 0:
                if buf.shape[0] >= 4 * MAX_BLOCK:
                    raise self._error(file_off, "record larger than any valid capture record")
                buf = np.concatenate([buf, np.zeros(buf.shape[0], np.uint8)])
            rest = n - consumed
            buf[:rest] = buf[consumed:n]
            carry = rest
            file_off += consumed

    # -- classic pcap ------------------------------------------------------------------------------------

    def _run_pcap(self, head: bytes) -> None:
        little, nano = _PCAP_MAGICS[head[:4]]
        if len(head) < 24:
            raise self._error(len(head), "truncated pcap file header (24 bytes expected)")
        e = "<" if little else ">"
        major, _minor, _zone, _sigfigs, _snaplen, linktype = struct.unpack(e + "HHiIII", head[4:24])
        if major != 2:
            raise self._error(4, f"unsupported pcap version {major}")
        walker = PcapWalker(little, nano, linktype & 0xFFFF)
        self.interfaces.append(Interface(linktype & 0xFFFF, 10**9 if nano else 10**6))

        def step(buf: npt.NDArray[np.uint8], start: int, n: int, base: int) -> tuple[int, bool]:
            walk = walker.walk(buf, start, n)
            self.large_records = walker.mean_record > LARGE_RECORD
            self._submit(buf, walker.frames(buf, walk.pos), walk.pos, base)
            if walk.error is not None:
                self._stop(base + walk.error.offset, walk.error.message)
                return walk.tail, True
            return walk.tail, False

        self._loop(24, step, b"")

    # -- pcapng ------------------------------------------------------------------------------------------

    def _run_pcapng(self, head: bytes) -> None:
        state: dict[str, PcapngWalker | None] = {"walker": None}

        def step(buf: npt.NDArray[np.uint8], start: int, n: int, base: int) -> tuple[int, bool]:
            p = start
            while True:
                walker = state["walker"]
                if walker is None:  # at a section header block
                    shb = self._section(buf, p, n, base)
                    if shb is None:
                        return p, False
                    walker, p = shb
                    state["walker"] = walker
                    continue
                walk, at_shb = walker.walk(buf, p, n)
                if walk.pos.shape[0]:
                    self.large_records = (walk.tail - p) / walk.pos.shape[0] > LARGE_RECORD
                assert walk.kinds is not None
                frames, error = walker.frames(buf, walk.pos, walk.kinds)
                self._submit(buf, frames, walk.pos, base)
                if error is None:
                    error = walk.error
                if error is not None:
                    self._stop(base + error.offset, error.message)
                    return walk.tail, True
                p = walk.tail
                if not at_shb:
                    return p, False
                state["walker"] = None

        self._loop(0, step, head)

    def _section(self, buf: npt.NDArray[np.uint8], p: int, n: int, base: int) -> tuple[PcapngWalker, int] | None:
        """Parse the section header block at ``p``; None if it is not complete in the buffer yet."""
        if p + 12 > n:
            return None
        raw = buf[p : p + 12].tobytes()
        if raw[:4] != _SHB_MAGIC:
            raise self._error(base + p, "pcapng section header block expected")
        bom = raw[8:12]
        if bom == struct.pack("<I", PCAPNG_BOM):
            little = True
        elif bom == struct.pack(">I", PCAPNG_BOM):
            little = False
        else:
            raise self._error(base + p + 8, f"pcapng byte-order magic {bom.hex()} is not valid")
        total = struct.unpack("<I" if little else ">I", raw[4:8])[0]
        if total % 4 or total < 28 or total > MAX_BLOCK:
            raise self._error(base + p + 4, f"pcapng section header block length {total} is invalid")
        if p + total > n:
            return None
        section = NgSection(little=little, base=len(self.interfaces))
        return PcapngWalker(section, self.interfaces), p + total

    # -- decoding ----------------------------------------------------------------------------------------

    def _process(self, buf: npt.NDArray[np.uint8], frames: Frames, pos: npt.NDArray[np.int64], base: int) -> None:
        """Decode and aggregate the packets of ``frames`` in batches."""
        linktypes = np.array([i.linktype for i in self.interfaces] or [0], np.int64)
        for s in range(0, frames.n, self.batch):
            e = min(frames.n, s + self.batch)
            data = frames.data[s:e]
            end = data + frames.caplen[s:e]
            wire_end = data + np.maximum(frames.wirelen[s:e], frames.caplen[s:e])
            lt = linktypes[frames.iface[s:e]]
            cols = decode(buf, data, end, wire_end, lt)
            offsets = pos[s:e] + base
            ts = frames.ts_ns[s:e]
            seq = np.arange(e - s, dtype=np.int64) + self.records
            # Before the flows take the batch: this sets the RoCEv2 packets' P_Key.
            if self.rdma is None:
                set_pkey(buf, cols, end)
            else:
                rdma = extract_rdma(buf, cols, data, end, lt)
                if rdma is not None:
                    self.rdma.add(buf, rdma, ts, self.records, offsets)
            released = self.frags.join(cols, ts, seq, offsets)
            self.tally.add(cols, offsets)
            self.flows.add(buf, cols, ts, self.records)
            if released is not None:  # fragments held until their first fragment came: never sampled
                self.flows.add(buf, released.rows, released.ts, released.seq)
            self.records += e - s

    def _submit(self, buf: npt.NDArray[np.uint8], frames: Frames, pos: npt.NDArray[np.int64], base: int) -> None:
        """:meth:`_process` this window on the processing thread, once the window before it is done.

        The walk of the next window (on this thread) overlaps the decoding of this one (numpy drops the GIL in
        its loops); windows are processed one at a time, in file order, so the result is a one-thread read's,
        bit for bit. (The records' header gathers stay on the walking thread: the processing thread is the
        slower of the two, 0.33 s against 0.35 s on the small-packet benchmark with them moved over.)
        """
        self.drain()
        if frames.n < 2 * self.batch or not self.handover:  # not worth a hand-over
            self._process(buf, frames, pos, base)
            return
        if self.pool is None:
            self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ringfence-decode")
        self.pending = self.pool.submit(self._process, buf, frames, pos, base)

    def drain(self) -> None:
        """Wait for the window being processed (its errors are raised here)."""
        pending, self.pending = self.pending, None
        if pending is not None:
            pending.result()

    def finish(self) -> None:
        """Fragments still waiting for a first fragment go into flows without ports."""
        released = self.frags.finish()
        if released is not None:
            self.flows.add(np.zeros(0, np.uint8), released.rows, released.ts, released.seq)


__all__ = ["BATCH_PACKETS", "CHUNK_BYTES", "PcapReader"]
