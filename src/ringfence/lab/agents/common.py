"""What every lab agent shares: arguments, TLS contexts, an HTTP server and client, a status file.

Every HTTP service and client takes ``--tls-cert --tls-key --tls-ca``: without them it speaks
plaintext (the lab "as found"); with them it speaks TLS 1.3 only, and a server then *requires* a
client certificate signed by the CA (mutual authentication). The peer's certificate identity (a URI
SAN such as ``spiffe://lab/node/worker-0``, else the subject CN) goes into the access log.

Agents report counters in a JSON status file (rewritten atomically), so the lab learns how traffic
is doing without sending any traffic of its own.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit


def base_parser(description: str) -> argparse.ArgumentParser:
    """Arguments every agent takes."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--status-file", type=Path, required=True, help="where to write counters (JSON)")
    p.add_argument("--tls-cert", help="PEM certificate (chain) presented to peers; enables TLS 1.3")
    p.add_argument("--tls-key", help="PEM private key of --tls-cert")
    p.add_argument("--tls-ca", help="PEM CA bundle peers must chain to (servers then require client certs)")
    p.add_argument("--tls-server-name", help="name to verify in servers' certificates instead of the URL host")
    return p


def tls_enabled(args: argparse.Namespace) -> bool:
    """True when the agent was given TLS material."""
    return bool(args.tls_cert or args.tls_ca)


def server_context(args: argparse.Namespace) -> ssl.SSLContext | None:
    """A TLS 1.3 server context (client certificates required when a CA is given), or None for plaintext."""
    if not tls_enabled(args):
        return None
    if not (args.tls_cert and args.tls_key):
        raise SystemExit("a TLS server needs --tls-cert and --tls-key")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.load_cert_chain(args.tls_cert, args.tls_key)
    if args.tls_ca:
        ctx.load_verify_locations(args.tls_ca)
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def client_context(args: argparse.Namespace) -> ssl.SSLContext | None:
    """A TLS 1.3 client context presenting our certificate, or None for plaintext."""
    if not tls_enabled(args):
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    if args.tls_ca:
        ctx.load_verify_locations(args.tls_ca)
    if args.tls_cert and args.tls_key:
        ctx.load_cert_chain(args.tls_cert, args.tls_key)
    return ctx


def peer_identity(sock: socket.socket) -> str:
    """The URI SAN (else CN) of a TLS peer's certificate; ``-`` for plaintext or no certificate."""
    if not isinstance(sock, ssl.SSLSocket):
        return "-"
    cert: dict[str, Any] | None = sock.getpeercert()  # typeshed's union of tuples; the shape is documented
    if not cert:
        return "-"
    for kind, value in cert.get("subjectAltName", ()):
        if kind == "URI":
            return str(value)
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return "-"


#: a status file is rewritten at least this often, also when no counter changed (seconds)
HEARTBEAT_S = 1.0


class Status:
    """Thread-safe counters, flushed to the status file by a background thread at most twice a second.

    The file is rewritten at least every :data:`HEARTBEAT_S` even when nothing changed, so its
    ``updated`` stamp says the agent is alive and a reader can wait for a write made after a moment.
    """

    def __init__(self, path: Path, agent: str, **info: Any) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._data: dict[str, Any] = {"agent": agent, "pid": os.getpid(), "ready": False, "counters": {},
                                      "last_error": None, **info}
        self._dirty = threading.Event()
        threading.Thread(target=self._flusher, name="status", daemon=True).start()

    def _flusher(self) -> None:
        while True:
            if self._dirty.wait(HEARTBEAT_S):
                time.sleep(0.5)  # coalesce a burst of counts into one write
            # rewritten also when nothing counted: a reader waits for a write after a moment it chose
            # (ringfence.secure.progress.settled_counter), and a stalled rank must not look stopped
            self.flush()

    def set(self, key: str, value: Any, *, flush: bool = True) -> None:
        """Set a top-level field; flushed at once unless ``flush=False`` (readiness must show immediately)."""
        with self._lock:
            self._data[key] = value
        if flush:
            self.flush()
        else:
            self._dirty.set()

    def count(self, name: str, n: int = 1) -> None:
        """Add ``n`` to a counter."""
        with self._lock:
            counters = self._data["counters"]
            counters[name] = counters.get(name, 0) + n
        self._dirty.set()

    def error(self, what: str, exc: BaseException) -> None:
        """Count a failure and remember the latest one."""
        with self._lock:
            counters = self._data["counters"]
            counters[what + "_failed"] = counters.get(what + "_failed", 0) + 1
            self._data["last_error"] = f"{what}: {type(exc).__name__}: {exc}"
        self._dirty.set()

    def flush(self) -> None:
        """Rewrite the status file atomically (temp file + rename)."""
        with self._lock:
            self._dirty.clear()
            self._data["updated"] = time.time()
            text = json.dumps(self._data)
            # under the lock: two writers sharing one temp name must not interleave
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
            tmp.write_text(text)
            os.replace(tmp, self.path)


def stop_event() -> threading.Event:
    """An event set by SIGTERM/SIGINT, for agents that finish their current step before exiting."""
    event = threading.Event()

    def _handler(signum: int, frame: object) -> None:
        event.set()

    signal.signal(signal.SIGTERM, _handler)
    signal.signal(signal.SIGINT, _handler)
    return event


class Handler(BaseHTTPRequestHandler):
    """Base request handler: access log with the peer's identity, JSON helpers."""

    server: LabHTTPServer
    protocol_version = "HTTP/1.0"  # one request per connection: every request is its own flow

    def log_message(self, format: str, *args: Any) -> None:
        """Access log to stderr (the agent's log file): who, with which identity, what."""
        ident = peer_identity(self.connection)
        sys.stderr.write(f"{self.log_date_time_string()} {self.client_address[0]} id={ident} {format % args}\n")

    def body(self) -> bytes:
        """The request body (Content-Length bounded to 64 MiB)."""
        length = int(self.headers.get("Content-Length") or 0)
        if length < 0 or length > 64 << 20:
            raise ValueError("bad Content-Length")
        return self.rfile.read(length)

    def reply(self, code: int, payload: bytes = b"", content_type: str = "application/json") -> None:
        """Send a complete response."""
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if payload and self.command != "HEAD":
            self.wfile.write(payload)

    def reply_json(self, code: int, obj: Any) -> None:
        """Send ``obj`` as JSON."""
        self.reply(code, json.dumps(obj).encode())


class LabHTTPServer(ThreadingHTTPServer):
    """A threading HTTP server that does the TLS handshake in the request's own thread.

    Handshaking in ``accept`` would let one silent client (a lateral probe that never speaks TLS)
    stall every other client; here it only costs that client's thread.
    """

    daemon_threads = True
    request_queue_size = 64  # bursts of clients (every rank at once) must not meet a full backlog

    def __init__(self, address: tuple[str, int], handler: type[Handler], ctx: ssl.SSLContext | None,
                 status: Status, state: Any = None) -> None:
        self.tls = ctx
        self.status = status
        self.state = state
        super().__init__(address, handler)

    def finish_request(self, request: Any, client_address: Any) -> None:
        """Handshake (when TLS), then handle; a failed handshake is counted, never fatal."""
        if self.tls is None:
            super().finish_request(request, client_address)
            return
        request.settimeout(10)
        try:
            tls_sock = self.tls.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as exc:
            self.status.error("tls_handshake", exc)
            return
        try:
            super().finish_request(tls_sock, client_address)
        finally:
            tls_sock.close()


def serve(bind: str, port: int, handler: type[Handler], ctx: ssl.SSLContext | None, status: Status,
          state: Any = None) -> LabHTTPServer:
    """Bind, record the bound port in the status file, and serve in a background thread."""
    server = LabHTTPServer((bind, port), handler, ctx, status, state)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, name="http", daemon=True).start()
    status.set("port", server.server_address[1])
    status.set("tls", ctx is not None)
    return server


def server_parser(description: str, port: int) -> argparse.ArgumentParser:
    """Arguments every HTTP service takes: :func:`base_parser`'s plus ``--bind`` and ``--port`` (default ``port``)."""
    p = base_parser(description)
    p.add_argument("--bind", default="0.0.0.0")
    p.add_argument("--port", type=int, default=port)
    return p


def serve_until_stopped(args: argparse.Namespace, agent: str, handler: type[Handler], state: Any,
                        start: Callable[[Status, threading.Event], None] | None = None) -> int:
    """Run an HTTP service on ``--bind``/``--port`` until SIGTERM/SIGINT; the agent's ``main`` returns this.

    ``start(status, stop)``, when given, launches the service's background work once it is serving and
    before it reports ready. ``ready`` is true in the status file exactly while requests are served.
    """
    stop = stop_event()
    status = Status(args.status_file, agent)
    server = serve(args.bind, args.port, handler, server_context(args), status, state)
    if start is not None:
        start(status, stop)
    status.set("ready", True)
    stop.wait()
    server.shutdown()
    server.server_close()
    status.set("ready", False)
    return 0


class HttpClient:
    """One-request-per-connection HTTP(S) client; each request is its own TCP flow, as in the real services."""

    def __init__(self, args: argparse.Namespace, timeout: float = 10.0, *, proxy: str | None = None) -> None:
        self.ctx = client_context(args)
        self.proxy = proxy  # "HOST:PORT" of a forward proxy: each request tunnels through it (CONNECT)
        self.server_name: str | None = args.tls_server_name
        self.timeout = timeout

    def request(self, method: str, url: str, body: bytes | None = None,
                headers: Mapping[str, str] | None = None) -> tuple[int, bytes]:
        """Send one request; (status, body). Raises OSError/http.client errors on failure."""
        parts = urlsplit(url)
        host, port = parts.hostname or "", parts.port
        conn: http.client.HTTPConnection
        # through a proxy: the TCP connection goes to the proxy and the request (TLS too) through its tunnel
        via_host, _, via_port = (self.proxy or "").rpartition(":")
        first = (via_host, int(via_port)) if self.proxy else (host, port)
        if self.ctx is not None:
            conn = _NamedHTTPSConnection(first[0], first[1], self.server_name, context=self.ctx,
                                         timeout=self.timeout)
        else:
            conn = http.client.HTTPConnection(first[0], first[1], timeout=self.timeout)
        if self.proxy:
            conn.set_tunnel(host, port)
        try:
            path = parts.path + (f"?{parts.query}" if parts.query else "")
            conn.request(method, path or "/", body=body, headers=dict(headers or {}))
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def scheme(self) -> str:
        """``https`` when TLS material was given."""
        return "https" if self.ctx is not None else "http"


class _NamedHTTPSConnection(http.client.HTTPSConnection):
    """HTTPS to an address, verifying the certificate against ``server_name`` when one is given."""

    def __init__(self, host: str, port: int | None, server_name: str | None, **kw: Any) -> None:
        super().__init__(host, port, **kw)
        self._server_name = server_name

    def connect(self) -> None:
        """TCP connect (and the proxy's tunnel, when one is set), then TLS with SNI/verification against the
        configured name."""
        http.client.HTTPConnection.connect(self)
        ctx: ssl.SSLContext = self._context  # type: ignore[attr-defined]
        target = self._tunnel_host or self.host  # type: ignore[attr-defined]
        self.sock = ctx.wrap_socket(self.sock, server_hostname=self._server_name or target)


def resolve_endpoint(hostport: str, fallbacks: Mapping[str, str], status: Status) -> str:
    """``host:port`` with a host name resolved once, now, through the node's resolver (one DNS query, logged
    by the lab's dnsmasq); later requests go to that address, so a policy that does not carry DNS does not
    break the running job. Unresolvable: the lab's fallback address, counted as ``dns_fallback``."""
    host, _, port = hostport.rpartition(":")
    try:
        socket.inet_aton(host)
        return hostport  # already an address
    except OSError:
        pass
    try:
        infos = socket.getaddrinfo(host, int(port), socket.AF_INET, socket.SOCK_STREAM)
        return f"{infos[0][4][0]}:{port}"
    except (OSError, ValueError, IndexError) as exc:
        if host not in fallbacks:
            raise
        status.count("dns_fallback")
        status.error("resolve", exc)
        return f"{fallbacks[host]}:{port}"


def run_forever(event: threading.Event, interval: float, step: Any) -> None:
    """Call ``step()`` every ``interval`` seconds until ``event`` is set (first call at once)."""
    while not event.is_set():
        step()
        event.wait(interval)


__all__ = [
    "Handler",
    "HttpClient",
    "LabHTTPServer",
    "Status",
    "base_parser",
    "client_context",
    "peer_identity",
    "run_forever",
    "serve",
    "serve_until_stopped",
    "server_context",
    "server_parser",
    "stop_event",
    "tls_enabled",
]
