"""Management node: the job and monitoring REST API (the node's sshd is started separately).

``POST /jobs`` (users submit), ``POST /report`` (ranks report progress), ``POST /metrics`` (telemetry),
``GET /jobs``, ``GET /progress``, ``GET /healthz``. Everything is kept in memory, bounded.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from ringfence.lab.agents.common import Handler, serve_until_stopped, server_parser


@dataclass
class Registry:
    """Submitted jobs, latest progress per rank, recent metrics."""

    jobs: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=1000))
    progress: dict[str, dict[str, Any]] = field(default_factory=dict)
    metrics: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=1000))
    lock: threading.Lock = field(default_factory=threading.Lock)
    next_id: int = 1


class MgmtHandler(Handler):
    """Routes of the job API."""

    def _json_body(self) -> dict[str, Any] | None:
        try:
            obj = json.loads(self.body() or b"{}")
        except (ValueError, UnicodeDecodeError):
            self.reply_json(400, {"error": "body is not JSON"})
            return None
        if not isinstance(obj, dict):
            self.reply_json(400, {"error": "body is not a JSON object"})
            return None
        return obj

    def do_POST(self) -> None:
        """Job submission, rank reports, telemetry."""
        reg: Registry = self.server.state
        obj = self._json_body()
        if obj is None:
            return
        if self.path == "/jobs":
            with reg.lock:
                job_id = reg.next_id
                reg.next_id += 1
                reg.jobs.append({"id": job_id, **obj})
            self.server.status.count("jobs_submitted")
            self.reply_json(201, {"id": job_id})
        elif self.path == "/report":
            key = f"{obj.get('job')}/{obj.get('rank')}"
            with reg.lock:
                reg.progress[key] = obj
            self.server.status.count("reports")
            self.reply(204)
        elif self.path == "/metrics":
            with reg.lock:
                reg.metrics.append(obj)
            self.server.status.count("metrics")
            self.reply(204)
        else:
            self.reply_json(404, {"error": "not found"})

    def do_GET(self) -> None:
        """Read-only views."""
        reg: Registry = self.server.state
        with reg.lock:
            views: dict[str, Any] = {
                "/healthz": {"ok": True},
                "/jobs": list(reg.jobs),
                "/progress": dict(reg.progress),
            }
        if self.path in views:
            self.reply_json(200, views[self.path])
        else:
            self.reply_json(404, {"error": "not found"})


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGTERM."""
    args = server_parser(__doc__ or "", 8000).parse_args(argv)
    return serve_until_stopped(args, "mgmt", MgmtHandler, Registry())


if __name__ == "__main__":
    raise SystemExit(main())
