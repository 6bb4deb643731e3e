"""External node: the off-site replication sink. ``PUT /replica/<job>/<name>`` keeps a digest, not the data."""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, field

from ringfence.lab.agents.common import Handler, serve_until_stopped, server_parser


@dataclass
class Catalog:
    """SHA-256 of every replicated object, by path (bounded: the newest 1000)."""

    digests: dict[str, str] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


class ReplicaHandler(Handler):
    """Routes of the sink."""

    def do_PUT(self) -> None:
        """Accept one replicated object."""
        parts = self.path.strip("/").split("/")
        if len(parts) < 3 or parts[0] != "replica":
            self.reply_json(404, {"error": "not found"})
            return
        data = self.body()
        cat: Catalog = self.server.state
        digest = hashlib.sha256(data).hexdigest()
        with cat.lock:
            cat.digests["/".join(parts[1:])] = digest
            while len(cat.digests) > 1000:
                cat.digests.pop(next(iter(cat.digests)))
        self.server.status.count("objects_received")
        self.server.status.count("bytes_received", len(data))
        self.reply_json(201, {"sha256": digest})

    def do_GET(self) -> None:
        """Health and catalogue."""
        cat: Catalog = self.server.state
        if self.path == "/healthz":
            self.reply_json(200, {"ok": True})
        elif self.path == "/catalog":
            with cat.lock:
                self.reply_json(200, dict(cat.digests))
        else:
            self.reply_json(404, {"error": "not found"})


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGTERM."""
    args = server_parser(__doc__ or "", 9000).parse_args(argv)
    return serve_until_stopped(args, "replica", ReplicaHandler, Catalog())


if __name__ == "__main__":
    raise SystemExit(main())
