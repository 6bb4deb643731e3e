"""The TLS sidecar of one lab node: mutual TLS 1.3 on the wire, authorisation by identity, live key reload.

Run inside a node's namespace as ``python -m ringfence.secure.layers._tls_mesh --config FILE``. It
does two jobs, both driven by nftables rules the TLS driver installs in the node:

* **inbound gate** — connections from other nodes to a protected service port are redirected to the
  gate. It requires TLS 1.3 with a client certificate of the cluster CA, verifies it (expiry,
  revocation list, trust domain), reads the HTTP request line and decides by the *identity* in the
  certificate, never by address (rules: ``job:{job}`` = a rank identity of the job named in the
  path, ``kind:user``, ``kind:node``, ``kind:job-rank``, ``id:<uri>``, ``any``). An authorised
  identity must then also arrive from an address the policy binds it to (``bindings``: the addresses
  of the nodes that carry it), so a certificate and key copied to another node are refused there.
  Allowed requests go on to the service over loopback; denied ones get ``403`` with the reason.
* **outbound** — the node's plaintext clients' connections to protected services are redirected
  here; the sidecar finds the original destination (``SO_ORIGINAL_DST``), opens TLS 1.3 with the
  node's certificate and checks the server's identity. Its own sockets carry a firewall mark so they
  are not redirected again. If TLS fails, the client gets ``502`` with the reason and *nothing* is
  sent in plaintext: there is no fallback.

Certificates, key, CA and revocation list are re-read when their files change, so rotation needs no
restart. One JSON line per connection goes to the event log (peer address, identity, certificate
fingerprints, decision), which is what ``ringfence verify keys`` reads.

The lab's HTTP services speak HTTP/1.0, one request per connection: the sidecar forwards the
request (head and ``Content-Length`` body), then the response until the server closes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import ssl
import struct
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509

from ringfence.errors import InputError
from ringfence.secure import pki

SO_ORIGINAL_DST = 80  # linux/netfilter_ipv4.h
_HEAD_LIMIT = 64 << 10
_TIMEOUT = 15.0


@dataclass(frozen=True)
class Rule:
    """Who may do what on a protected service: first match of (method, path pattern) decides."""

    method: str  # "GET", "PUT", … or "*"
    path: re.Pattern[str]
    allow: str  # job:{job} | kind:user | kind:node | kind:job-rank | id:<uri> | any


class Material:
    """The node's certificate, key, CA and revocation list, reloaded when a file changes."""

    def __init__(self, cert_dir: Path, revoked: Path) -> None:
        self.cert_dir = cert_dir
        self.revoked_path = revoked
        self._stamp: tuple[float, ...] = ()
        self._lock = threading.Lock()
        self.server: ssl.SSLContext | None = None
        self.client: ssl.SSLContext | None = None
        self.ca: x509.Certificate | None = None
        self.revoked: frozenset[str] = frozenset()
        self.fingerprint = ""
        self.error: str | None = None

    def _files(self) -> tuple[Path, ...]:
        return (self.cert_dir / "cert.pem", self.cert_dir / "key.pem", self.cert_dir / "ca.pem", self.revoked_path)

    def current(self) -> Material:
        """Reload if any file changed; a half-rotated pair (new key, old cert) keeps the previous contexts."""
        stamp = tuple(p.stat().st_mtime_ns if p.exists() else 0.0 for p in self._files())
        with self._lock:
            if stamp != self._stamp:
                try:
                    self._load()
                    self._stamp = stamp
                    self.error = None
                except (OSError, ssl.SSLError, ValueError, pki.PkiError) as exc:
                    self.error = f"cannot load {self.cert_dir}: {exc}"  # retried on the next connection
        return self

    def _load(self) -> None:
        cert, key, ca, _ = self._files()
        server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        for ctx in (server, client):
            ctx.minimum_version = ssl.TLSVersion.TLSv1_3
            ctx.load_cert_chain(cert, key)
            ctx.load_verify_locations(ca)
            ctx.verify_mode = ssl.CERT_REQUIRED
        client.check_hostname = False  # the peer is checked by SPIFFE identity after the handshake
        self.server, self.client = server, client
        self.ca = pki.load_certificate(ca)
        self.revoked = pki.load_revocations(self.revoked_path)
        self.fingerprint = pki.fingerprint(pki.load_certificate(cert))

    def check_peer(self, sock: ssl.SSLSocket, expected: str | None = None) -> pki.CertInfo:
        """Verify the peer certificate (expiry, revocation, trust domain, identity); raises CertificateRejected."""
        der = sock.getpeercert(binary_form=True)
        if not der or self.ca is None:
            raise pki.CertificateRejected("the peer presented no certificate")
        return pki.verify_certificate(
            x509.load_der_x509_certificate(der), self.ca, revoked=self.revoked, expected_identity=expected
        )


class Events:
    """Append-only JSON lines, one per connection."""

    def __init__(self, path: Path) -> None:
        self._fh = open(path, "a", buffering=1)  # noqa: SIM115 - lives as long as the process
        self._lock = threading.Lock()

    def write(self, **event: Any) -> None:
        """Log one connection's outcome."""
        with self._lock:
            self._fh.write(json.dumps({"t": time.time(), **event}) + "\n")


def authorise(rules: tuple[Rule, ...], identity: pki.Identity, method: str, path: str) -> tuple[bool, str]:
    """The gate's decision for ``identity`` doing ``method path``; default deny."""
    for rule in rules:
        if rule.method not in ("*", method):
            continue
        m = rule.path.match(path)
        if not m:
            continue
        kind, _, arg = rule.allow.partition(":")
        if kind == "any":
            return True, "any authenticated identity"
        if kind == "id":
            return identity.uri == arg, f"only {arg}"
        if kind == "kind":
            return identity.kind == arg, f"only {arg} identities"
        if kind == "job":
            job = arg.format(**m.groupdict())
            ok = identity.kind == "job-rank" and identity.name == job
            return ok, f"only ranks of job {job}"
        return False, f"unknown rule {rule.allow!r}"
    return False, "no rule allows it"


def bound_to(bindings: dict[str, frozenset[str]] | None, identity: pki.Identity, peer: str) -> tuple[bool, str]:
    """Whether ``identity`` may be presented from address ``peer`` (``(True, "")`` without bindings).

    Checked after the identity was authorised, so a refusal here says only this: the right identity
    from the wrong place — a copied certificate and key. An identity the bindings do not know is refused.
    """
    if bindings is None:
        return True, ""
    allowed = bindings.get(identity.uri)
    if allowed is None:
        return False, f"address binding: {identity.uri} is bound to no node of the policy"
    if peer not in allowed:
        return False, (f"address binding: {identity.uri} is bound to {', '.join(sorted(allowed))}, "
                       f"not {peer}")
    return True, ""


def read_request(sock: socket.socket) -> bytes:
    """The whole HTTP/1.x request: head plus a ``Content-Length`` body."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("the client closed before sending a whole request head")
        data += chunk
        if len(data) > _HEAD_LIMIT:
            raise ConnectionError("request head too large")
    head, _, body = data.partition(b"\r\n\r\n")
    m = re.search(rb"(?im)^content-length:\s*(\d+)\s*$", head)
    want = int(m.group(1)) if m else 0
    while len(body) < want:
        chunk = sock.recv(min(1 << 20, want - len(body)))
        if not chunk:
            raise ConnectionError("the client closed in the middle of the request body")
        body += chunk
    return head + b"\r\n\r\n" + body


def pump(src: socket.socket, dst: socket.socket) -> int:
    """Copy ``src`` to ``dst`` until ``src`` closes; bytes copied."""
    n = 0
    while True:
        try:
            chunk = src.recv(65536)
        except ssl.SSLZeroReturnError:
            break
        if not chunk:
            break
        dst.sendall(chunk)
        n += len(chunk)
    return n


def _reply(sock: socket.socket, code: int, reason: str, detail: str) -> None:
    body = json.dumps({"error": detail, "by": "ringfence-tls"}).encode()
    sock.sendall(
        f"HTTP/1.0 {code} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        + body
    )


class Mesh:
    """The sidecar: inbound gates and the outbound TLS originator of one node."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.node = str(config["node"])
        self.mark = int(config["mark"])
        self.material = Material(Path(config["cert_dir"]), Path(config["revoked"]))
        self.events = Events(Path(config["events"]))
        self.peers: dict[str, str] = dict(config.get("peers", {}))  # "ip:port" -> expected server identity
        raw = config.get("bindings")
        # identity -> addresses it may come from (None: a config from before bindings; identity alone decides)
        self.bindings: dict[str, frozenset[str]] | None = (
            {str(k): frozenset(str(a) for a in v) for k, v in raw.items()} if isinstance(raw, dict) else None
        )
        self.gates = [
            (
                int(g["listen"]),
                int(g["upstream"]),
                str(g["service"]),
                tuple(Rule(r["method"], re.compile(r["path"]), r["allow"]) for r in g["rules"]),
            )
            for g in config.get("inbound", [])
        ]
        self.outbound = int(config["outbound"]) if config.get("outbound") else None

    def serve(self) -> list[socket.socket]:
        """Bind every listener and start its accept thread."""
        listeners = []
        for listen, upstream, service, rules in self.gates:
            s = socket.create_server(("0.0.0.0", listen), backlog=128, reuse_port=False)
            listeners.append(s)
            threading.Thread(
                target=self._accept, args=(s, self._inbound, (upstream, service, rules)), daemon=True
            ).start()
        if self.outbound is not None:
            s = socket.create_server(("127.0.0.1", self.outbound), backlog=128)
            listeners.append(s)
            threading.Thread(target=self._accept, args=(s, self._outbound, ()), daemon=True).start()
        return listeners

    @staticmethod
    def _accept(listener: socket.socket, handle: Any, extra: tuple[Any, ...]) -> None:
        while True:
            try:
                conn, addr = listener.accept()
            except OSError:
                return
            threading.Thread(target=handle, args=(conn, addr, *extra), daemon=True).start()

    def _inbound(
        self, conn: socket.socket, addr: tuple[str, int], upstream: int, service: str, rules: tuple[Rule, ...]
    ) -> None:
        conn.settimeout(_TIMEOUT)
        mat = self.material.current()
        ev: dict[str, Any] = {
            "dir": "in",
            "node": self.node,
            "service": service,
            "peer": addr[0],
            "peer_port": addr[1],  # the client's port: the gate's record joins its flow by 5-tuple, not by time
            "own_fingerprint": mat.fingerprint,
        }
        try:
            if mat.server is None:
                raise ssl.SSLError(mat.error or "no certificate loaded")
            tls = mat.server.wrap_socket(conn, server_side=True)
        except (ssl.SSLError, OSError) as exc:
            conn.close()
            self.events.write(**ev, result="refused", reason=f"TLS handshake failed: {exc}")
            return
        with tls:
            try:
                der = tls.getpeercert(binary_form=True)
                ev["peer_fingerprint"] = pki.fingerprint(x509.load_der_x509_certificate(der)) if der else None
                ev["tls_version"] = tls.version()
                info = mat.check_peer(tls)
                ident = pki.parse_identity(info.identity or "")
                ev["peer_identity"] = ident.uri
            except (pki.CertificateRejected, InputError) as exc:
                self.events.write(**ev, result="refused", reason=str(exc))
                return  # closing without a word: a rejected certificate learns nothing more
            try:
                request = read_request(tls)
                line = request.split(b"\r\n", 1)[0].decode("latin-1")
                method, path = (line.split(" ") + ["", ""])[:2]
                ev.update(method=method, path=path)
                ok, why = authorise(rules, ident, method, path)
                if ok:
                    ok, bound = bound_to(self.bindings, ident, addr[0])
                    why = bound or why
                if not ok:
                    _reply(tls, 403, "Forbidden", f"{ident.uri} may not {method} {path}: {why}")
                    self.events.write(**ev, result="denied", reason=why)
                    return
                with socket.create_connection(("127.0.0.1", upstream), timeout=_TIMEOUT) as up:
                    up.sendall(request)
                    up.shutdown(socket.SHUT_WR)
                    n = pump(up, tls)
                self.events.write(**ev, result="allowed", reason=why, response_bytes=n)
            except (OSError, ConnectionError) as exc:
                self.events.write(**ev, result="error", reason=str(exc))

    def _outbound(self, conn: socket.socket, addr: tuple[str, int]) -> None:
        conn.settimeout(_TIMEOUT)
        with conn:
            raw = conn.getsockopt(socket.SOL_IP, SO_ORIGINAL_DST, 16)
            port, packed = struct.unpack_from("!2xH4s", raw)
            dst = f"{socket.inet_ntoa(packed)}:{port}"
            expected = self.peers.get(dst)
            mat = self.material.current()
            ev: dict[str, Any] = {
                "dir": "out",
                "node": self.node,
                "peer": dst,
                "expected_identity": expected,
                "own_fingerprint": mat.fingerprint,
            }
            try:
                request = read_request(conn)
            except (OSError, ConnectionError) as exc:
                self.events.write(**ev, result="error", reason=f"reading the local request: {exc}")
                return
            ev["method"], ev["path"] = (request.split(b"\r\n", 1)[0].decode("latin-1").split(" ") + ["", ""])[:2]
            if expected is None:
                why = f"{dst} is not a protected service this node knows; refusing rather than sending plaintext"
                _reply(conn, 502, "Bad Gateway", why)
                self.events.write(**ev, result="refused", reason=why)
                return
            try:
                if mat.client is None:
                    raise ssl.SSLError(mat.error or "no certificate loaded")
                raw_sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                raw_sock.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, self.mark)  # not redirected again
                raw_sock.settimeout(_TIMEOUT)
                host, port_s = dst.rsplit(":", 1)
                raw_sock.connect((host, int(port_s)))
                tls = mat.client.wrap_socket(raw_sock, server_hostname=None)
            except (ssl.SSLError, OSError) as exc:
                why = f"TLS to {dst} failed: {exc}"
                _reply(conn, 502, "Bad Gateway", why)
                self.events.write(**ev, result="refused", reason=why)
                return
            with tls:
                try:
                    der = tls.getpeercert(binary_form=True)
                    ev["peer_fingerprint"] = pki.fingerprint(x509.load_der_x509_certificate(der)) if der else None
                    ev["tls_version"] = tls.version()
                    info = mat.check_peer(tls, expected)
                    ev["peer_identity"] = info.identity
                except pki.CertificateRejected as exc:
                    why = f"server {dst} rejected: {exc}"
                    _reply(conn, 502, "Bad Gateway", why)
                    self.events.write(**ev, result="refused", reason=why)
                    return
                try:
                    tls.sendall(request)
                    n = pump(tls, conn)
                    self.events.write(**ev, result="allowed", response_bytes=n)
                except (OSError, ConnectionError) as exc:
                    self.events.write(**ev, result="error", reason=str(exc))


def probe(args: argparse.Namespace) -> int:
    """One request with a given certificate, bypassing the node's redirect; prints a JSON outcome."""
    out: dict[str, Any] = {"url": args.url, "cert_dir": args.cert_dir}
    mat = Material(Path(args.cert_dir), Path(args.revoked) if args.revoked else Path("/nonexistent")).current()
    host, port = args.url.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)
    path = "/" + args.url.split("//", 1)[1].split("/", 1)[1]
    if mat.client is None:
        out.update(outcome="error", error=mat.error)
        print(json.dumps(out))
        return 0
    out["own_fingerprint"] = mat.fingerprint
    try:
        raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, args.mark)
        raw.bind(("0.0.0.0", 0))
        out["sport"] = raw.getsockname()[1]  # so a drop counter can be matched to exactly this connection
        raw.settimeout(args.timeout)
        raw.connect((host, int(port)))
        with mat.client.wrap_socket(raw, server_hostname=None) as tls:
            der = tls.getpeercert(binary_form=True)
            out["server_fingerprint"] = pki.fingerprint(x509.load_der_x509_certificate(der)) if der else None
            body = args.body.encode()
            tls.sendall(
                f"{args.method} {path} HTTP/1.0\r\nHost: {host}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body
            )
            data = b""
            while True:
                try:
                    chunk = tls.recv(65536)
                except ssl.SSLZeroReturnError:
                    break
                if not chunk:
                    break
                data += chunk
        if not data:
            out.update(outcome="closed", error="the server closed the connection without a response")
        else:
            status = int(data.split(b" ", 2)[1])
            out.update(outcome="response", status=status, body=data.partition(b"\r\n\r\n")[2][:300].decode("latin-1"))
    except (ssl.SSLError, OSError, ValueError, IndexError) as exc:
        out.update(outcome="refused", error=f"{type(exc).__name__}: {exc}")
    print(json.dumps(out))
    return 0


def main(argv: list[str] | None = None) -> int:
    """``--config FILE`` runs the sidecar until SIGTERM; ``probe ...`` makes one request."""
    p = argparse.ArgumentParser(description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run")
    run.add_argument("--config", type=Path, required=True)
    pr = sub.add_parser("probe")
    pr.add_argument("--cert-dir", required=True)
    pr.add_argument("--revoked")
    pr.add_argument("--url", required=True)
    pr.add_argument("--method", default="GET")
    pr.add_argument("--body", default="")
    pr.add_argument("--mark", type=int, required=True)
    pr.add_argument("--timeout", type=float, default=5.0)
    args = p.parse_args(argv)
    if args.cmd == "probe":
        return probe(args)
    config = json.loads(args.config.read_text())
    mesh = Mesh(config)
    mesh.material.current()
    if mesh.material.error:
        print(mesh.material.error, file=sys.stderr)
        return 1
    mesh.serve()
    Path(config["ready"]).write_text(json.dumps({"pid": os.getpid(), "fingerprint": mesh.material.fingerprint}))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
