"""Fixtures of the secure-transport tests: a PKI with good and bad certificates, ranks as threads, a MITM proxy.

``pki_home`` — a session-scoped PKI: CA of cluster ``lab``, certificates for ranks 0-2 of job
``train-a``, and the bad ones: rank 1 of another job, rank 1 signed by a foreign CA, an expired
rank 1 and a revoked rank 1 (with its revocation list).

``ranks`` — runs ``fn(rank, group)`` for each rank in its own thread over real loopback sockets
(the protocol is torch-free, so no process start-up cost) and returns each rank's result or exception.

``tamper`` — a proxy that sits on the link into rank 0 and rewrites the records rank 1 sends to it.
"""

from __future__ import annotations

import dataclasses
import socket
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from ringfence.secure import pki
from ringfence.secure.transport import Group, KeyEvent, TransportConfig
from ringfence.secure.transport.wire import HEADER, HEADER_SIZE, RecordType

JOB = "spiffe://lab/job/train-a"


@dataclasses.dataclass(frozen=True)
class PkiHome:
    """Paths of the test PKI."""

    root: Path
    ca: Path
    rank_dirs: tuple[Path, ...]
    other_job: Path
    foreign: Path
    expired: Path
    revoked: Path
    revocations: Path

    def config(self, rank: int, **changes: Any) -> TransportConfig:
        """A config for ``rank`` with its own certificate (``cert_dir`` swaps in another)."""
        d = changes.pop("cert_dir", self.rank_dirs[rank])
        base = TransportConfig(cert=d / "cert.pem", key=d / "key.pem", ca=self.ca, timeout=10.0, chunk_bytes=64 << 10)
        return dataclasses.replace(base, **changes)


@pytest.fixture(scope="session")
def pki_home(tmp_path_factory: pytest.TempPathFactory) -> PkiHome:
    """The session's PKI (see module docstring)."""
    root = tmp_path_factory.mktemp("pki")
    pki.init_ca(root, "lab")
    life = timedelta(hours=1)
    ranks = tuple(pki.issue(root, f"{JOB}/rank/{r}", lifetime=life).directory for r in range(3))
    other = pki.issue(root, "spiffe://lab/job/other/rank/1", lifetime=life, out_dir=root / "other").directory
    expired = pki.issue(
        root,
        f"{JOB}/rank/1",
        lifetime=timedelta(minutes=1),
        out_dir=root / "expired",
        now=datetime.now(UTC) - timedelta(hours=2),
    ).directory
    revoked = pki.issue(root, f"{JOB}/rank/1", lifetime=life, out_dir=root / "revoked").directory
    pki.revoke(root, revoked / "cert.pem")
    foreign_root = tmp_path_factory.mktemp("foreign-pki")
    pki.init_ca(foreign_root, "lab")
    foreign = pki.issue(foreign_root, f"{JOB}/rank/1", lifetime=life).directory
    return PkiHome(root, root / "ca" / "ca.pem", ranks, other, foreign, expired, revoked, root / "ca" / "revoked.txt")


class MemStore:
    """An in-memory rendezvous store with torch's blocking ``get``."""

    def __init__(self) -> None:
        self._data: dict[str, bytes] = {}
        self._cond = threading.Condition()
        self.on_set: Callable[[str, bytes], bytes] | None = None

    def set(self, key: str, value: str) -> None:
        raw = value.encode()
        if self.on_set is not None:
            raw = self.on_set(key, raw)
        with self._cond:
            self._data[key] = raw
            self._cond.notify_all()

    def get(self, key: str) -> bytes:
        with self._cond:
            if not self._cond.wait_for(lambda: key in self._data, timeout=10):
                raise TimeoutError(key)
            return self._data[key]


RankFn = Callable[[int, Group], object]


def run_ranks(
    configs: list[TransportConfig], fn: RankFn, store: MemStore | None = None, timeout: float = 30.0
) -> list[object]:
    """Connect ``len(configs)`` ranks (threads) and run ``fn``; each slot holds a result or an exception."""
    st = store or MemStore()
    out: list[object] = [None] * len(configs)

    def body(rank: int) -> None:
        group = None
        try:
            group = Group.connect(st, rank, len(configs), configs[rank], timeout=10)
            out[rank] = fn(rank, group)
        except Exception as exc:  # collected for the test to assert on
            out[rank] = exc
        finally:
            if group is not None:
                group.close()

    threads = [threading.Thread(target=body, args=(r,), daemon=True) for r in range(len(configs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
        assert not t.is_alive(), "a rank hung"
    return out


@pytest.fixture()
def store() -> MemStore:
    """A fresh in-memory rendezvous store."""
    return MemStore()


@pytest.fixture()
def ranks() -> Callable[..., list[object]]:
    """:func:`run_ranks`."""
    return run_ranks


@pytest.fixture()
def events() -> list[KeyEvent]:
    """A list key events can be collected into (``on_event=events.append``)."""
    return []


Mutator = Callable[[int, bytes, bytes], list[bytes] | None]


class TamperProxy:
    """Relays the connections into rank 0; the records from the dialling ranks go through ``mutate``.

    ``mutate(index, header, body)`` gets each DATA record (index counts DATA records from 0) and
    returns the byte strings to forward instead; None, or an empty piece after the ones to forward,
    cuts the connection there.
    """

    def __init__(self, target: tuple[str, int], mutate: Mutator) -> None:
        self.target = target
        self.mutate = mutate
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = self.listener.getsockname()[:2]
        self._threads: list[threading.Thread] = []
        self._socks: list[socket.socket] = []
        t = threading.Thread(target=self._serve, daemon=True)
        t.start()
        self._threads.append(t)

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            self._socks += [client, upstream]
            for args in ((client, upstream, True), (upstream, client, False)):
                t = threading.Thread(target=self._pump, args=args, daemon=True)
                t.start()
                self._threads.append(t)

    @staticmethod
    def _read(sock: socket.socket, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                raise EOFError
            buf += chunk
        return buf

    def _pump(self, src: socket.socket, dst: socket.socket, rewrite: bool) -> None:
        index = 0
        try:
            while True:
                header = self._read(src, HEADER_SIZE)
                length = HEADER.unpack(header)[6]
                body = self._read(src, length)
                if rewrite and header[4] == RecordType.DATA:
                    out = self.mutate(index, header, body)
                    index += 1
                    if out is None:
                        break
                    cut = b"" in out  # an empty piece: forward what comes before it, then cut
                    for piece in out[: out.index(b"")] if cut else out:
                        dst.sendall(piece)
                    if cut:
                        break
                else:
                    dst.sendall(header + body)
        except (EOFError, OSError):
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        self.listener.close()
        for s in self._socks:
            s.close()


@pytest.fixture()
def tamper() -> Iterator[Callable[[MemStore, Mutator], None]]:
    """``tamper(store, mutate)``: put a :class:`TamperProxy` in front of every link into rank 0."""
    proxies: list[TamperProxy] = []

    def install(store: MemStore, mutate: Mutator) -> None:
        def on_set(key: str, value: bytes) -> bytes:
            if key != "ringfence/addr/0":
                return value
            host, _, port = value.decode().rpartition(":")
            proxy = TamperProxy((host, int(port)), mutate)
            proxies.append(proxy)
            return f"{proxy.address[0]}:{proxy.address[1]}".encode()

        store.on_set = on_set

    yield install
    for p in proxies:
        p.close()
