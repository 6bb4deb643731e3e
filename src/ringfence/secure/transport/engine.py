"""The collective engine: a connected group of ranks running pipelined ring schedules over protected links.

Torch-free on purpose: it moves and reduces bytes (``memoryview``) with a reducer the caller passes,
so the protocol and its failure modes are tested without starting torch.

Parallelism: the calling thread receives, decrypts and reduces; one sender thread per group seals
and sends. Socket calls, AES-GCM (``cryptography`` 50 releases the GIL in ``encrypt_into`` and
``decrypt_into``; ``benchmarks/bench_transport.py --aead-gil``) and numpy's reduction all release the
GIL, so with a spare core chunk k is opened and reduced while chunk k+1 is sealed; each send waits only
for the one received chunk it forwards (a per-chunk dependency), which pipelines the ring across steps.
Schedules of small records (at most ``_INLINE_MAX`` bytes each) skip the sender thread and run on the
calling thread alone.
"""

from __future__ import annotations

import atexit
import queue
import secrets
import select
import socket
import struct
import sys
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ringfence.secure.transport.config import TransportConfig
from ringfence.secure.transport.handshake import Credentials, initiate, load_credentials, respond
from ringfence.secure.transport.link import Link
from ringfence.secure.transport.wire import HEADER_SIZE, TAG_SIZE, KeyEvent, LinkBroken, TransportError

Reducer = Callable[[memoryview, memoryview], None]
# A segment is cut into at least two chunks (so the ring pipelines) but not into pieces under 1 MiB:
# every chunk costs two GIL hand-offs between the threads, which on a busy 2-core machine cost more
# than the overlap gains (measured at 4 MiB, 2 ranks: 2 chunks 4.1-6.9 ms, 8 chunks 6.4-9.8 ms).
_MIN_PIPELINE_CHUNK = 1 << 20
_MAX_PIPELINE_DEPTH = 8
_GRACE = 0.5  # seconds a broken-pipe error waits for a more specific one from the receiving side
# Schedules whose every record carries at most this much run on the calling thread alone: for small
# messages the hand-offs to and from the sender thread (two or three thread wake-ups per collective)
# cost more than the overlap they buy. Safe from deadlock because in every schedule here a rank has at
# most one unread record per link outstanding when it blocks in a send (a ring step's send waits for
# the previous step's receive), and one record of this size fits in the kernel's socket buffers
# (Linux: ≥ 64 KiB receive window plus the send buffer) without the peer reading.
_INLINE_MAX = 32 << 10


class Store(Protocol):
    """The part of ``torch.distributed.Store`` the rendezvous needs (its content is not secret)."""

    def set(self, key: str, value: str) -> None:
        """Publish ``value`` under ``key``."""
        ...

    def get(self, key: str) -> bytes:
        """Wait for ``key`` and return its value."""
        ...


@dataclass(frozen=True)
class Send:
    """Send ``src`` to ``peer`` once ``after`` receives of the same schedule have completed."""

    peer: int
    src: memoryview
    after: int = 0


@dataclass(frozen=True)
class Recv:
    """Receive ``len(dst)`` bytes from ``peer`` into ``dst`` (``reduce``: combine with the reducer)."""

    peer: int
    dst: memoryview
    reduce: bool = False


@dataclass(eq=False)
class _Job:
    sends: Sequence[Send]
    cond: threading.Condition = field(default_factory=threading.Condition)
    done: int = 0
    finished: threading.Event = field(default_factory=threading.Event)
    error: TransportError | None = None
    on_done: Callable[[TransportError | None], None] | None = None


def _split(n: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` contiguous ranges covering ``range(n)``, sizes differing by at most one."""
    q, r = divmod(n, parts)
    out, start = [], 0
    for i in range(parts):
        end = start + q + (1 if i < r else 0)
        out.append((start, end))
        start = end
    return out


def _chunks(buf: memoryview, itemsize: int, parts: int, chunk_bytes: int) -> tuple[list[list[memoryview]], int]:
    """Split ``buf`` into ``parts`` segments of whole elements, each into the same number of chunks."""
    segs = _split(len(buf) // itemsize, parts)
    biggest = max(e - s for s, e in segs)  # elements
    # whole elements per chunk, never more than chunk_bytes (the size of every record buffer)
    k = max(
        -(-biggest // (chunk_bytes // itemsize)), min(_MAX_PIPELINE_DEPTH, biggest * itemsize // _MIN_PIPELINE_CHUNK), 1
    )
    out = []
    for s, e in segs:
        out.append([buf[(s + a) * itemsize : (s + b) * itemsize] for a, b in _split(e - s, k)])
    return out, k


def ring_allreduce(buf: memoryview, itemsize: int, rank: int, world: int, chunk: int) -> tuple[list[Send], list[Recv]]:
    """Reduce-scatter then all-gather around the ring; a send waits only for the chunk it forwards."""
    segs, k = _chunks(buf, itemsize, world, chunk)
    right, left = (rank + 1) % world, (rank - 1) % world
    sends: list[Send] = []
    recvs: list[Recv] = []
    for g in range(2 * world - 2):
        if g < world - 1:
            s_seg, r_seg, reduce = (rank - g) % world, (rank - g - 1) % world, True
        else:
            a = g - (world - 1)
            s_seg, r_seg, reduce = (rank + 1 - a) % world, (rank - a) % world, False
        for j in range(k):
            sends.append(Send(right, segs[s_seg][j], (g - 1) * k + j + 1 if g else 0))
            recvs.append(Recv(left, segs[r_seg][j], reduce))
    return sends, recvs


def ring_reduce_scatter(
    buf: memoryview, itemsize: int, rank: int, world: int, chunk: int
) -> tuple[list[Send], list[Recv]]:
    """Reduce-scatter so that rank r ends with the reduced segment r of ``buf``."""
    segs, k = _chunks(buf, itemsize, world, chunk)
    right, left = (rank + 1) % world, (rank - 1) % world
    sends: list[Send] = []
    recvs: list[Recv] = []
    for g in range(world - 1):
        for j in range(k):
            sends.append(Send(right, segs[(rank - g - 1) % world][j], (g - 1) * k + j + 1 if g else 0))
            recvs.append(Recv(left, segs[(rank - g - 2) % world][j], True))
    return sends, recvs


def ring_allgather(blocks: Sequence[memoryview], rank: int, world: int, chunk: int) -> tuple[list[Send], list[Recv]]:
    """All-gather of equal-size ``blocks`` (block ``rank`` already filled) around the ring."""
    per = [_chunks(b, 1, 1, chunk) for b in blocks]
    k = per[0][1]
    right, left = (rank + 1) % world, (rank - 1) % world
    sends: list[Send] = []
    recvs: list[Recv] = []
    for g in range(world - 1):
        for j in range(k):
            sends.append(Send(right, per[(rank - g) % world][0][0][j], (g - 1) * k + j + 1 if g else 0))
            recvs.append(Recv(left, per[(rank - g - 1) % world][0][0][j]))
    return sends, recvs


def chain_broadcast(buf: memoryview, root: int, rank: int, world: int, chunk: int) -> tuple[list[Send], list[Recv]]:
    """Pipelined chain root → root+1 → …: each rank forwards chunk j as soon as it has it."""
    (parts,), k = _chunks(buf, 1, 1, chunk)
    pos = (rank - root) % world
    right, left = (rank + 1) % world, (rank - 1) % world
    recvs = [Recv(left, c) for c in parts] if pos else []
    sends = [Send(right, c, j + 1 if pos else 0) for j, c in enumerate(parts)] if pos < world - 1 else []
    return sends, recvs


class _Sender(threading.Thread):
    """Seals and sends the jobs of one group in order."""

    def __init__(self, group: Group) -> None:
        super().__init__(name=f"ringfence-sender-{group.rank}", daemon=True)
        self.group = group
        self.jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()

    def run(self) -> None:
        while (job := self.jobs.get()) is not None:
            try:
                for s in job.sends:
                    if job.done < s.after:
                        with job.cond:
                            while job.done < s.after and self.group.failure is None:
                                job.cond.wait(1.0)
                    if self.group.failure is not None:
                        raise self.group.failure
                    link = self.group.links.get(s.peer)
                    if link is None:
                        raise TransportError(f"no link to rank {s.peer} (the group is closed)", peer=s.peer)
                    link.send(s.src)
            except Exception as exc:  # the thread's one boundary: any failure aborts the group, loudly
                err = exc if isinstance(exc, TransportError) else _internal(self.group.rank, exc)
                job.error = err
                if isinstance(err, LinkBroken):
                    # A link closed under our send says little; the receiving side usually learns why
                    # (the peer's ABORT record, a truncated record) a moment later. Let it speak first.
                    self.group.failed.wait(_GRACE)
                self.group.abort(err)
            finally:
                job.finished.set()
                if job.on_done is not None:
                    job.on_done(job.error)


class Group:
    """A connected, mutually authenticated group of ranks (the full mesh of links)."""

    def __init__(self, rank: int, world: int, links: dict[int, Link], config: TransportConfig, timeout: float) -> None:
        self.rank = rank
        self.world = world
        self.links = links
        self.config = config
        self.timeout = timeout
        self.chunk = config.chunk_bytes
        self.failure: TransportError | None = None
        self.failed = threading.Event()
        self._fail_lock = threading.Lock()
        self._scratch = memoryview(bytearray(config.chunk_bytes))
        if world > 1 and config.switch_interval and sys.getswitchinterval() > config.switch_interval:
            # The receive and send threads hand the GIL back and forth once per chunk; with CPython's
            # default 5 ms switch interval a thread back from a socket call may wait that long. Under
            # load the 5 ms default was slightly ahead in an interleaved A/B (BENCHMARKS.md, issue 15,
            # 2026-12-02: 13 and 12 of 18 paired repeats at 4 and 64 MiB), within the spread, so this stays.
            _SAVED_SWITCH.setdefault("interval", sys.getswitchinterval())
            sys.setswitchinterval(config.switch_interval)
        self._sender = _Sender(self)
        self._last_job: _Job | None = None  # the newest job handed to the sender thread
        self._sender.start()
        _LIVE.add(self)

    # ------------------------------------------------------------------ setup
    @classmethod
    def connect(cls, store: Store, rank: int, world: int, config: TransportConfig, *, timeout: float = 300.0) -> Group:
        """Rendezvous through ``store``, then handshake with every peer (higher ranks initiate)."""
        timeout = config.timeout or timeout
        creds = load_credentials(config, rank)
        if world == 1:
            return cls(rank, world, {}, config, timeout)
        if rank == 0:
            store.set("ringfence/session", secrets.token_hex(16))
        session = store.get("ringfence/session")
        host = config.bind_address()
        try:
            listener = socket.create_server((host, config.port), backlog=max(world, 16))
        except OSError as exc:
            raise TransportError(f"rank {rank}: cannot listen on {host}:{config.port}: {exc.strerror}") from exc
        links: dict[int, Link] = {}
        try:
            bound = listener.getsockname()
            store.set(f"ringfence/addr/{rank}", config.advertise or f"{bound[0]}:{bound[1]}")
            for peer in range(rank):
                links[peer] = cls._dial(store, creds, config, rank, peer, world, session, timeout)
            listener.settimeout(timeout)
            while len(links) < world - 1:
                try:
                    conn, addr = listener.accept()
                except TimeoutError:
                    missing = sorted(set(range(rank + 1, world)) - set(links))
                    raise TransportError(
                        f"rank {rank}: ranks {missing} did not connect within {timeout:.0f}s"
                    ) from None
                _tune(conn, timeout)
                link = respond(
                    conn,
                    creds,
                    config,
                    rank=rank,
                    world=world,
                    group=session,
                    taken=set(links),
                    addr=f"{addr[0]}:{addr[1]}",
                )
                links[link.peer] = link
        except BaseException:
            for link in links.values():
                link.close()
            raise
        finally:
            listener.close()
        return cls(rank, world, links, config, timeout)

    @staticmethod
    def _dial(
        store: Store,
        creds: Credentials,
        config: TransportConfig,
        rank: int,
        peer: int,
        world: int,
        session: bytes,
        timeout: float,
    ) -> Link:
        where = store.get(f"ringfence/addr/{peer}").decode()
        host, _, port = where.rpartition(":")
        try:
            sock = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout)
        except (OSError, ValueError) as exc:
            raise TransportError(f"rank {rank}: cannot connect to rank {peer} at {where}: {exc}", peer=peer) from exc
        _tune(sock, timeout)
        try:
            return initiate(sock, creds, config, rank=rank, peer=peer, world=world, group=session)
        except BaseException:
            sock.close()
            raise

    # ------------------------------------------------------------ execution
    def run(self, sends: Sequence[Send], recvs: Sequence[Recv], reducer: Reducer | None = None) -> None:
        """Execute one schedule; any failure aborts the group on every rank (fail closed)."""
        self._check()
        # Inline only when the sender thread is idle: its queued records (a point-to-point send) must
        # reach the link before this schedule's, and records of one link are never sent concurrently.
        last = self._last_job
        idle = last is None or last.finished.is_set()
        inline = idle and all(len(s.src) <= _INLINE_MAX for s in sends)
        polled = idle and not inline and self.config.engine == "polled"
        job = None
        if sends and not inline and not polled:
            job = _Job(sends)
            self._last_job = job
            self._sender.jobs.put(job)
        try:
            if inline:
                self._run_inline(sends, recvs, reducer)
            elif polled:
                self._run_polled(sends, recvs, reducer)
            else:
                self._receive(recvs, reducer, job)
                while job is not None and not job.finished.wait(1.0):
                    self._check()
        except BaseException as exc:  # fail closed on anything, a KeyboardInterrupt included
            err = exc if isinstance(exc, TransportError) else _internal(self.rank, exc)
            self.abort(err)
            if job is not None:
                with job.cond:
                    job.cond.notify_all()
            if not isinstance(exc, Exception):
                raise
            raise (self.failure or err) from (None if exc is err else exc)
        if job is not None and job.error is not None:
            raise job.error

    def _receive_one(self, r: Recv, reducer: Reducer | None) -> None:
        link = self.links[r.peer]
        if r.reduce:
            if reducer is None:
                raise TransportError("a reducing schedule needs a reducer")
            tmp = self._scratch[: len(r.dst)]
            link.recv_into(tmp)
            reducer(r.dst, tmp)
        else:
            link.recv_into(r.dst)

    def _receive(self, recvs: Sequence[Recv], reducer: Reducer | None, job: _Job | None) -> None:
        """The calling thread's half of a threaded schedule: receive, and release the sends waiting on it."""
        for i, r in enumerate(recvs):
            self._receive_one(r, reducer)
            if job is not None:
                job.done = i + 1
                with job.cond:
                    job.cond.notify()

    def _run_inline(self, sends: Sequence[Send], recvs: Sequence[Recv], reducer: Reducer | None) -> None:
        """Run a small schedule on this thread: each send as soon as the receives it waits for are done."""
        si, ns = 0, len(sends)
        for i in range(len(recvs) + 1):
            while si < ns and sends[si].after <= i:
                s = sends[si]
                link = self._link(s.peer)
                try:
                    link.send(s.src)
                except LinkBroken as exc:
                    # as the sender thread does: the peer's own reason, when it sent one, says more
                    raise link.abort_notice(_GRACE) or exc from None
                si += 1
            if i < len(recvs):
                self._receive_one(recvs[i], reducer)

    def _run_polled(self, sends: Sequence[Send], recvs: Sequence[Recv], reducer: Reducer | None) -> None:
        """Run a schedule of any size on this thread alone, never blocking in a socket call (engine ``polled``).

        The next send starts once the receives it waits for are done and is written as its socket takes it;
        the next receive is read as its bytes arrive; when neither moves, ``poll`` waits for either socket.
        One runnable thread per rank instead of two: on a machine whose cores are all busy, the ring's
        chain (receive, open, reduce, seal, send) then waits for one thread to be scheduled, not for two
        to hand work to each other. It cannot deadlock: a rank blocked on a full send buffer still reads.
        """
        si, ri, ns, nr = 0, 0, len(sends), len(recvs)
        tx: Link | None = None  # the link a record is being written to
        record = memoryview(b"")
        off = 0  # bytes of it written
        got = 0  # bytes held of the record recvs[ri]
        poller = select.poll()
        try:
            while si < ns or ri < nr or tx is not None:
                moved = False
                if tx is None and si < ns and sends[si].after <= ri:
                    tx = self._link(sends[si].peer)
                    record, off = tx.begin_send(sends[si].src), 0
                    si += 1
                if tx is not None:
                    k = tx.send_some(record[off:])
                    off += k
                    if off == len(record):
                        tx.end_send()
                        tx, moved = None, True
                        continue  # the next send may be ready at once
                    moved = k > 0
                if ri < nr:
                    r = recvs[ri]
                    rx = self._link(r.peer)
                    dst = self._scratch[: len(r.dst)] if r.reduce else r.dst
                    now = rx.recv_some(dst, got)
                    if now != got:
                        moved, got = True, now
                        if got == HEADER_SIZE + len(dst) + TAG_SIZE:
                            if r.reduce:
                                if reducer is None:
                                    raise TransportError("a reducing schedule needs a reducer")
                                reducer(r.dst, dst)
                            ri, got = ri + 1, 0
                if not moved:
                    if tx is None and ri >= nr:
                        raise TransportError(f"rank {self.rank}: a send waits for a receive the schedule lacks")
                    self._await(poller, tx, self.links[recvs[ri].peer] if ri < nr else None)
        except LinkBroken as exc:
            # as the sender thread does: what the peer's side of the link says, when it says something, says more
            raise self._reason_after_broken(exc, recvs[ri] if ri < nr else None, got) or exc from None
        finally:
            if tx is not None and off == 0:
                tx.end_send()
            # A record cut short keeps its link's sending held: the abort that follows must not write its
            # notice into the middle of it (the peer would read garbage); it closes the link instead.

    def _reason_after_broken(self, exc: LinkBroken, pending: Recv | None, got: int) -> TransportError | None:
        """After the polled engine found a link closed: the reason its remaining bytes give, if any.

        The record being received from that peer (``pending``, ``got`` bytes of it held) is read on first,
        for at most the grace period: the cut or bad tag it ends in, or the peer's ABORT in its place, names
        the cause where the broken pipe does not — the threaded engine's receiving thread would have met it.
        After that record, or with none pending there, the peer's abort notice is looked for as the other
        engines do.
        """
        link = self.links.get(exc.peer) if exc.peer is not None else None
        if link is None:
            return None
        if pending is not None and pending.peer == exc.peer:
            dst = self._scratch[: len(pending.dst)] if pending.reduce else pending.dst
            want = HEADER_SIZE + len(dst) + TAG_SIZE
            poller = select.poll()
            poller.register(link.sock.fileno(), select.POLLIN)
            deadline = time.monotonic() + _GRACE
            try:
                while got < want:
                    now = link.recv_some(dst, got)
                    if now == got and not poller.poll(max(0.0, deadline - time.monotonic()) * 1000):
                        return None  # nothing more within the grace period: the broken pipe stands
                    got = now
            except LinkBroken:
                return None
            except TransportError as err:
                return err
        return link.abort_notice(_GRACE)

    def _link(self, peer: int) -> Link:
        """The link to ``peer`` while the group stands; the group's failure (or its closing) otherwise."""
        link = self.links.get(peer)
        if link is None or self.failure is not None:
            self._check()
            raise TransportError(f"no link to rank {peer} (the group is closed)", peer=peer)
        return link

    def _await(self, poller: select.poll, tx: Link | None, rx: Link | None) -> None:
        """Wait until ``tx``'s socket takes bytes or ``rx``'s has some, at most the group's timeout."""
        self._check()  # an abort closes the links: their sockets' descriptors are gone
        masks: dict[int, int] = {}
        if tx is not None:
            masks[tx.sock.fileno()] = select.POLLOUT
        if rx is not None:
            fd = rx.sock.fileno()
            masks[fd] = masks.get(fd, 0) | select.POLLIN
        for fd, mask in masks.items():
            poller.register(fd, mask)
        try:
            ready = poller.poll(self.timeout * 1000)
        finally:
            for fd in masks:
                poller.unregister(fd)
        self._check()
        if not ready:
            peer = rx.peer if rx is not None else tx.peer if tx is not None else None
            raise TransportError(f"timed out waiting for rank {peer}", peer=peer)

    def send_async(self, peer: int, parts: Sequence[memoryview], done: Callable[[TransportError | None], None]) -> None:
        """Queue point-to-point records to ``peer``; ``done`` is called from the sender thread."""
        self._check()
        job = _Job([Send(peer, p) for p in parts], on_done=done)
        self._last_job = job
        self._sender.jobs.put(job)

    def chunks_of(self, buf: memoryview) -> list[memoryview]:
        """How a point-to-point message is cut into records (both sides cut alike)."""
        return _chunks(buf, 1, 1, self.chunk)[0][0]

    def _check(self) -> None:
        if self.failure is not None:
            raise TransportError(f"the ringfence group is aborted: {self.failure.message}", peer=self.failure.peer)

    def abort(self, exc: TransportError) -> None:
        """Fail closed: remember the first failure, tell every peer why, close every link."""
        with self._fail_lock:
            if self.failure is not None:
                return
            self.failure = exc
            self.failed.set()
        reason = f"rank {self.rank}: {exc.message}"
        for link in self.links.values():
            link.notify_abort(reason)
        for link in self.links.values():
            link.close()
        self.config.record(
            KeyEvent(time.time(), "abort", self.rank, -1 if exc.peer is None else exc.peer, "both", 0, exc.message)
        )

    def close(self) -> None:
        """Close the links and stop the sender thread (key material goes with the link objects)."""
        _LIVE.discard(self)
        if not _LIVE and "interval" in _SAVED_SWITCH:
            sys.setswitchinterval(_SAVED_SWITCH.pop("interval"))
        self._sender.jobs.put(None)
        for link in self.links.values():
            link.close()
        # Joined, not left to die at interpreter exit: a daemon thread woken during finalization is
        # torn down by forced unwinding, which aborts the process when it meets native frames.
        if threading.current_thread() is not self._sender:
            self._sender.join(5.0)
        for peer in self.links:
            self.config.record(KeyEvent(time.time(), "close", self.rank, peer, "both", 0, ""))
        self.links = {}
        if self.failure is None:
            self.failure = TransportError("the ringfence group was closed")
            self.failed.set()


def _internal(rank: int, exc: BaseException) -> TransportError:
    return TransportError(f"rank {rank}: the transport stopped on an internal error: {exc!r}")


_LIVE: weakref.WeakSet[Group] = weakref.WeakSet()
_SAVED_SWITCH: dict[str, float] = {}  # the interpreter's switch interval before the first group lowered it


@atexit.register
def _close_live_groups() -> None:
    """Groups the program never destroyed are closed before the interpreter goes away."""
    for group in list(_LIVE):
        group.close()


def _tune(sock: socket.socket, timeout: float) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    # Kernel-side timeouts on a blocking socket: Python's own timeout mode would poll() before every
    # recv/send, doubling the system calls of the data path.
    sock.settimeout(None)
    tv = struct.pack("ll", int(timeout), int((timeout % 1) * 1e6))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)


__all__ = [
    "Group",
    "Recv",
    "Reducer",
    "Send",
    "Store",
    "chain_broadcast",
    "ring_allgather",
    "ring_allreduce",
    "ring_reduce_scatter",
]
