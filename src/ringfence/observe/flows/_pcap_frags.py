"""IP fragments (v4 and v6) joined to the flow of their datagram, with hostile fragments reported.

A later fragment carries no transport header, so on its own it would make a second, port-less flow, and
its datagram would be counted in two flows. Here every fragment is keyed by its datagram (source,
destination, protocol, IP identification — the 32-bit fragment id for IPv6 — and the tunnel and VLAN it
was seen in); the first fragment (offset 0) says which ports the datagram has, and every later fragment
takes them. Each fragment still counts as one packet and its own bytes, as on the wire (and as tcpdump
and tshark count packets); the first fragment's payload sample stands for the datagram (the decoder gives
it the datagram's UDP length, so a recogniser checking a length field sees the datagram's).

A later fragment seen before its first is held back, and joins when the first comes. What is bounded,
so that a hostile capture cannot grow memory without end:
- MAX_DATAGRAMS datagrams are remembered (the oldest forgotten first); an entry also expires
  REASSEMBLY_TIMEOUT_NS after its first fragment, as a host's reassembly would (RFC 791 asks for a timer,
  Linux's ipfrag_time is 30 s), so a reused IP id does not join an old datagram's flow;
- MAX_HELD later fragments are held (the oldest is let go first); a fragment let go, or still held at the
  end of the capture, is counted in a flow of its addresses and protocol without ports, and warned about;
- MAX_PIECES fragments per datagram are checked for overlap; more than that is itself reported.
Reported, never guessed at: fragments overlapping an earlier fragment of the same datagram (how teardrop
and overlap-rewrite evasions look), fragments whose declared length is negative or that run past the
largest datagram (65,535 bytes), and datagrams with more than MAX_PIECES fragments.

Only fragments are looked at one by one (they are rare in a training fabric); every other packet passes
with one vectorised test.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

import numpy as np

from ringfence.observe.flows._pcap_layout import I64, KIND_FLOW, KIND_HELD, Cols

#: Datagrams whose ports are remembered at once.
MAX_DATAGRAMS: Final = 65536
#: Later fragments held back waiting for their first fragment.
MAX_HELD: Final = 65536
#: Fragments per datagram checked for overlap.
MAX_PIECES: Final = 64
#: How long after its first fragment a datagram's later fragments still join it.
REASSEMBLY_TIMEOUT_NS: Final = 60 * 10**9
#: The largest IP datagram (IPv4 total length; IPv6 payload length without a jumbogram).
MAX_DATAGRAM: Final = 65535

_Key = tuple[int, int, int, int, int, int, int, int, int]


@dataclass
class _Datagram:
    ts: int  # when its first fragment (or, until then, its earliest fragment) was seen
    ports: tuple[int, int] | None = None
    pieces: list[tuple[int, int]] = field(default_factory=list)


@dataclass
class _Held:
    rows: Cols
    ts: I64
    seq: I64
    keys: list[_Key]
    at: int = -1  # file offset of the first of them, for the warning


@dataclass
class Released:
    """Held fragments that now know their flow (or never will): add them to the flows as they are."""

    rows: Cols
    ts: I64
    seq: I64


class _Count:
    def __init__(self) -> None:
        self.n = 0
        self.at = -1

    def add(self, offset: int) -> None:
        self.n += 1
        if self.at < 0:
            self.at = offset


class FragmentJoiner:
    """Joins the later fragments of each batch to their datagram's flow (see the module docstring)."""

    def __init__(self, *, max_datagrams: int = MAX_DATAGRAMS, max_held: int = MAX_HELD) -> None:
        """The limits are the module's; smaller ones are for tests."""
        self.max_datagrams = max_datagrams
        self.max_held = max_held
        self._datagrams: dict[_Key, _Datagram] = {}
        self._held: list[_Held] = []
        self._let_go: list[_Held] = []  # let go to bound memory: added without ports at the next chance
        self._n_held = 0
        self._orphans = _Count()  # later fragments counted without ports
        self._overlap = _Count()
        self._bad_len = _Count()
        self._too_many = _Count()
        self.joined = 0

    def join(self, c: Cols, ts: I64, seq: I64, offsets: I64) -> Released | None:
        """Give the later fragments of batch ``c`` their datagram's ports, in place; hold those whose first
        fragment has not been seen (their ``kind`` becomes KIND_HELD). Returns earlier-held fragments that can
        now be added, if any."""
        frag = np.flatnonzero((c.kind == KIND_FLOW) & (c.frag_id >= 0))
        if not frag.shape[0]:
            return None
        cols = (c.src_hi, c.src_lo, c.dst_hi, c.dst_lo, c.proto, c.frag_id, c.okind, c.ovni, c.vlan)
        keys: list[_Key] = list(zip(*(col[frag].tolist() for col in cols), strict=True))
        off, length = c.frag_off[frag].tolist(), c.frag_len[frag].tolist()
        t, at = ts[frag].tolist(), offsets[frag].tolist()
        sport, dport = c.sport[frag].tolist(), c.dport[frag].tolist()
        # First fragments first, so a later fragment ahead of its first in the same batch still joins it.
        firsts = [i for i, o in enumerate(off) if o == 0]
        for i in firsts:
            self._first(keys[i], t[i], (sport[i], dport[i]))
        hold: list[int] = []
        for i, key in enumerate(keys):
            if length[i] < 0 or off[i] + max(length[i], 0) > MAX_DATAGRAM:
                self._bad_len.add(at[i])
                continue  # not joined: it cannot be part of a datagram
            d = self._datagrams.get(key)
            if d is not None and t[i] - d.ts > REASSEMBLY_TIMEOUT_NS:
                del self._datagrams[key]  # an IP id reused long after: not that datagram
                d = None
            if d is not None:
                self._piece(d, off[i], length[i], at[i])
            if off[i] == 0:
                continue
            if d is None or d.ports is None:
                if d is None:
                    self._remember(key, _Datagram(ts=t[i]))
                    self._piece(self._datagrams[key], off[i], length[i], at[i])
                hold.append(i)
                continue
            c.sport[frag[i]], c.dport[frag[i]] = d.ports
            self.joined += 1
        released = self._release() if firsts or self._let_go else None
        if hold:
            rows = frag[np.asarray(hold, np.int64)]
            held = _Held(
                c.take(rows), ts[rows].copy(), seq[rows].copy(), [keys[i] for i in hold], int(offsets[rows[0]])
            )
            self._hold(held)
            c.kind[rows] = KIND_HELD
        return released

    def finish(self) -> Released | None:
        """Everything still held, counted without ports (its first fragment was not in the capture)."""
        held, self._held, self._n_held = self._held, [], 0
        for h in held:
            self._orphan(h)
        held, self._let_go = self._let_go + held, []
        return _merge(held)

    def warnings(self, name: str) -> list[str]:
        """What was reported about fragments, one line per kind of trouble."""
        out: list[str] = []
        for count, words in (
            (self._orphans, "later IP fragment(s) whose first fragment was not in the capture (or came too late) "
                            "were counted in flows without ports"),
            (self._overlap, "IP fragment(s) overlap an earlier fragment of their datagram (evasion or corruption)"),
            (self._bad_len, "IP fragment(s) with a negative length or running past the largest datagram were not "
                            "joined to a flow"),
            (self._too_many, f"IP datagram(s) had more than {MAX_PIECES} fragments: the rest were not checked "
                             "for overlap"),
        ):  # fmt: skip
            if count.n:
                first = f" (first at byte {count.at})" if count.at >= 0 else ""
                out.append(f"{name}: {count.n} {words}{first}")
        return out

    # -- state -----------------------------------------------------------------------------------------

    def _remember(self, key: _Key, d: _Datagram) -> None:
        self._datagrams[key] = d
        if len(self._datagrams) > self.max_datagrams:
            del self._datagrams[next(iter(self._datagrams))]

    def _first(self, key: _Key, ts: int, ports: tuple[int, int]) -> None:
        d = self._datagrams.get(key)
        if d is None or ts - d.ts > REASSEMBLY_TIMEOUT_NS:
            self._datagrams.pop(key, None)
            self._remember(key, _Datagram(ts=ts, ports=ports))
        elif d.ports is None:
            d.ports, d.ts = ports, ts
        # A second first fragment of a live datagram keeps the first one's ports; _piece reports the overlap.

    def _piece(self, d: _Datagram, off: int, length: int, at: int) -> None:
        end = off + length
        if len(d.pieces) >= MAX_PIECES:
            if len(d.pieces) == MAX_PIECES:
                self._too_many.add(at)
                d.pieces.append((0, 0))  # reported once per datagram
            return
        if any(o < end and off < e for o, e in d.pieces):
            self._overlap.add(at)
        d.pieces.append((off, end))

    def _orphan(self, h: _Held) -> None:
        if self._orphans.at < 0 or 0 <= h.at < self._orphans.at:
            self._orphans.at = h.at
        self._orphans.n += h.ts.shape[0]

    def _hold(self, h: _Held) -> None:
        self._held.append(h)
        self._n_held += h.ts.shape[0]
        while self._n_held > self.max_held and len(self._held) > 1:
            # The oldest held fragments are let go first: they are counted without ports at the end.
            old = self._held.pop(0)
            self._n_held -= old.ts.shape[0]
            self._orphan(old)
            self._let_go.append(old)

    def _release(self) -> Released | None:
        """Held fragments whose first fragment has now been seen, with their ports set, plus those let go."""
        ready: list[_Held] = self._let_go
        self._let_go = []
        keep: list[_Held] = []
        for h in self._held:
            ports = [self._ports(k) for k in h.keys]
            done = np.flatnonzero(np.array([p is not None for p in ports], np.bool_))
            if not done.shape[0]:
                keep.append(h)
                continue
            known = [p for p in ports if p is not None]
            rows = h.rows.take(done)
            rows.sport = np.array([p[0] for p in known], np.int64)
            rows.dport = np.array([p[1] for p in known], np.int64)
            self.joined += int(done.shape[0])
            ready.append(_Held(rows, h.ts[done], h.seq[done], []))
            rest = np.flatnonzero(np.array([p is None for p in ports], np.bool_))
            if rest.shape[0]:
                keys = [h.keys[i] for i in rest.tolist()]
                keep.append(_Held(h.rows.take(rest), h.ts[rest], h.seq[rest], keys, h.at))
        self._held = keep
        self._n_held = sum(h.ts.shape[0] for h in keep)
        return _merge(ready)

    def _ports(self, key: _Key) -> tuple[int, int] | None:
        d = self._datagrams.get(key)
        return None if d is None else d.ports


def _merge(parts: list[_Held]) -> Released | None:
    if not parts:
        return None
    return Released(Cols.concat([p.rows for p in parts]), np.concatenate([p.ts for p in parts]),
                    np.concatenate([p.seq for p in parts]))  # fmt: skip


__all__ = ["MAX_DATAGRAMS", "MAX_HELD", "MAX_PIECES", "REASSEMBLY_TIMEOUT_NS", "FragmentJoiner", "Released"]
