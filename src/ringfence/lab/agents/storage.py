"""Storage node: an HTTP object server (datasets, checkpoints) that replicates checkpoints off-site.

``GET /datasets/<job>/shard-<n>`` returns a deterministic text shard (JSON lines, like a tokenizer's
input); ``PUT /checkpoints/<job>/<name>`` stores a checkpoint in memory (the latest per job) and
queues it for replication to ``--replica-url`` (``PUT <replica-url>/replica/<job>/<name>``).

With ``--owner JOB=ADDR[,ADDR…]`` (the lab passes one per job) a job's prefixes (``/datasets/JOB/``,
``/checkpoints/JOB/``) are served only to that job's ranks, by the peer's address (the address the
fabric delivered the connection from, after its anti-spoofing rules); any other peer gets 403. A
network rule cannot tell one job's objects from another's on a port both jobs may reach; this can.

``--object-log FILE`` (also ``--refusal-log``) is the object server's own telemetry: one JSON line per
object request — time, peer (and its port), the server's own address and port, identity (the TLS peer's,
when it has one), method, path, job, ``result`` (``served`` or ``refused``) and the bytes read or written.
The file is bounded: past :data:`OBJECT_LOG_MAX` bytes it moves to ``FILE.1`` (the one before is dropped)
and starts again.
"""

from __future__ import annotations

import functools
import json
import queue
import random
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ringfence.lab.agents.common import (
    Handler,
    HttpClient,
    Status,
    peer_identity,
    serve_until_stopped,
    server_parser,
)

_WORDS = ("the gradient of a loss flows back through every layer while the optimizer keeps its moments "
          "and a scheduler warms the learning rate before the cosine decay of a long run").split()
SHARD_BYTES = 128 << 10
_LOOPBACK = frozenset({"127.0.0.1", "::1"})


@functools.lru_cache(maxsize=64)
def make_shard(job: str, n: int, size: int = SHARD_BYTES) -> bytes:
    """A reproducible text shard of ``size`` bytes (cached: workers cycle through few shards)."""
    rng = random.Random(f"{job}/{n}")
    lines: list[bytes] = []
    total = 0
    i = 0
    while total < size:
        text = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(12, 40)))
        line = json.dumps({"id": f"{job}-{n}-{i}", "text": text}).encode() + b"\n"
        lines.append(line)
        total += len(line)
        i += 1
    return b"".join(lines)[:size]


@dataclass
class Store:
    """The latest checkpoint per job, the replication queue, and who owns which job's objects."""

    checkpoints: dict[str, bytes] = field(default_factory=dict)
    outbox: queue.Queue[tuple[str, str, bytes]] = field(default_factory=queue.Queue)
    lock: threading.Lock = field(default_factory=threading.Lock)
    owners: dict[str, frozenset[str]] = field(default_factory=dict)  # job → its ranks' addresses
    object_log: Path | None = None

    def record(self, rec: dict[str, object]) -> None:
        """Append one access record to the object log (rotated past :data:`OBJECT_LOG_MAX`); OSError escapes."""
        if self.object_log is None:
            return
        with self.lock:
            try:
                if self.object_log.stat().st_size > OBJECT_LOG_MAX:
                    self.object_log.replace(self.object_log.with_name(self.object_log.name + ".1"))
            except FileNotFoundError:
                pass
            with self.object_log.open("a") as f:
                f.write(json.dumps(rec) + "\n")


#: the object log's size before it is rotated (a lab's ranks read a shard every step)
OBJECT_LOG_MAX = 32 << 20


def parse_owners(values: list[str]) -> dict[str, frozenset[str]]:
    """``["train-a=10.0.0.1,10.0.0.2"]`` → ``{"train-a": {...}}``; ValueError on a malformed entry."""
    out: dict[str, frozenset[str]] = {}
    for v in values:
        job, sep, addrs = v.partition("=")
        if not sep or not job or not addrs:
            raise ValueError(f"--owner wants JOB=ADDR[,ADDR...], not {v!r}")
        out[job] = frozenset(a for a in addrs.split(",") if a)
    return out


class StorageHandler(Handler):
    """Routes of the object server."""

    def _foreign(self, job: str) -> bool:
        """True (and the refusal sent and logged) when ``job``'s objects are not this peer's to touch."""
        store: Store = self.server.state
        owners = store.owners.get(job)
        peer = self.client_address[0]
        # no owners configured: no per-job check (a bare object server, as before). A loopback peer is the
        # node's TLS gate, which has already decided by the certificate's identity (its job:{job} rule)
        if not store.owners or peer in _LOOPBACK or (owners is not None and peer in owners):
            return False
        self.server.status.count("foreign_refused")
        self._log(job, "refused", 0)
        sys.stderr.write(f"refused {self.command} {self.path} from {peer}: not an owner of job {job}\n")
        # logged before the answer: whoever is refused, the refusal is already on the record
        self.reply_json(403, {"error": f"objects of job {job} are not served to {peer}"})
        return True

    def _log(self, job: str, result: str, size: int) -> None:
        """One record of this request in the object log (a failure to write is counted, never fatal)."""
        # the whole 5-tuple (the peer's port, the server's own address and port): telemetry joins the request
        # to the flow it rode on by its Community ID, not by address and time alone
        local = self.connection.getsockname()
        rec: dict[str, object] = {"time": time.time(), "peer": self.client_address[0],
                                  "peer_port": self.client_address[1], "local": local[0], "local_port": local[1],
                                  "identity": peer_identity(self.connection), "method": self.command,
                                  "path": self.path, "job": job, "result": result, "bytes": size}
        try:
            self.server.state.record(rec)
        except OSError as exc:
            self.server.status.error("object_log", exc)

    def do_GET(self) -> None:
        """Dataset shards, and a health check."""
        parts = self.path.strip("/").split("/")
        if parts == ["healthz"]:
            self.reply_json(200, {"ok": True})
            return
        if len(parts) == 3 and parts[0] == "datasets" and parts[2].startswith("shard-"):
            try:
                n = int(parts[2].removeprefix("shard-"))
            except ValueError:
                self.reply_json(400, {"error": "shard number"})
                return
            if self._foreign(parts[1]):
                return
            shard = make_shard(parts[1], n)
            self._log(parts[1], "served", len(shard))  # on the record before the answer, as a refusal is
            self.reply(200, shard, "application/x-ndjson")
            self.server.status.count("shards_served")
            return
        self.reply_json(404, {"error": "not found"})

    def do_PUT(self) -> None:
        """Checkpoint writes, queued for replication."""
        parts = self.path.strip("/").split("/")
        if len(parts) < 3 or parts[0] != "checkpoints":
            self.reply_json(404, {"error": "not found"})
            return
        if self._foreign(parts[1]):
            return
        data = self.body()
        store: Store = self.server.state
        job, name = parts[1], "/".join(parts[2:])
        with store.lock:
            store.checkpoints[job] = data
        store.outbox.put((job, name, data))
        self.server.status.count("checkpoints_stored")
        self.server.status.count("checkpoint_bytes", len(data))
        self._log(job, "served", len(data))
        self.reply_json(201, {"stored": f"{job}/{name}", "bytes": len(data)})


def _replicate(store: Store, client: HttpClient, replica_url: str, status: Status, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            job, name, data = store.outbox.get(timeout=0.5)
        except queue.Empty:
            continue
        url = f"{replica_url.rstrip('/')}/replica/{job}/{name}"
        try:
            code, _ = client.request("PUT", url, data, {"Content-Type": "application/octet-stream"})
            status.count("replicated" if code < 300 else "replicate_rejected")
        except OSError as exc:
            status.error("replicate", exc)


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGTERM."""
    p = server_parser(__doc__ or "", 8080)
    p.add_argument("--replica-url", default="", help="base URL of the off-site replica (empty: no replication)")
    p.add_argument("--replica-proxy", default="", metavar="HOST:PORT",
                   help="replicate through this egress gateway (HTTP CONNECT), not straight out")
    p.add_argument("--owner", action="append", default=[], metavar="JOB=ADDR[,ADDR...]",
                   help="serve JOB's datasets and checkpoints only to these peers (repeatable)")
    p.add_argument("--object-log", "--refusal-log", dest="object_log", type=Path,
                   help="append one JSON line per object request (served or refused) here")
    args = p.parse_args(argv)
    try:
        owners = parse_owners(args.owner)
    except ValueError as exc:
        p.error(str(exc))
    store = Store(owners=owners, object_log=args.object_log)

    def start_replication(status: Status, stop: threading.Event) -> None:
        if args.replica_url:
            client = HttpClient(args, proxy=args.replica_proxy or None)
            threading.Thread(target=_replicate, args=(store, client, args.replica_url, status, stop),
                             daemon=True).start()

    return serve_until_stopped(args, "storage", StorageHandler, store, start_replication)


if __name__ == "__main__":
    raise SystemExit(main())
