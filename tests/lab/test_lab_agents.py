"""The lab's agents as real processes on loopback: HTTP routes, replication, TLS 1.3 with mutual auth.

No root needed: servers bind 127.0.0.1 on a free port, which they report in their status file.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import http.client
import ipaddress
import json
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ringfence.lab.agents.aux import classify
from ringfence.lab.agents.storage import make_shard

Agent = Callable[..., tuple[int, Path]]


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[Agent]:
    """Start an agent on loopback; returns (port, log path). All are stopped at the end."""
    started: list[subprocess.Popen[bytes]] = []

    def start(name: str, *args: str) -> tuple[int, Path]:
        status = tmp_path / f"{name}-{len(started)}.json"
        log = tmp_path / f"{name}-{len(started)}.log"
        with open(log, "wb") as out:
            p = subprocess.Popen([sys.executable, "-m", f"ringfence.lab.agents.{name}", "--status-file", str(status),
                                  "--bind", "127.0.0.1", "--port", "0", *args], stdout=out, stderr=subprocess.STDOUT)
        started.append(p)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if status.exists():
                data = json.loads(status.read_text())
                if data.get("ready"):
                    return int(data["port"]), log
            assert p.poll() is None, log.read_text()
            time.sleep(0.05)
        raise AssertionError(f"{name} did not become ready: {log.read_text()}")

    try:
        yield start
    finally:
        for p in started:
            p.terminate()
        for p in started:
            p.wait(10)


def _status(tmp_path: Path, name: str) -> dict[str, Any]:
    return dict(json.loads(next(tmp_path.glob(f"{name}-*.json")).read_text()))


def _req(port: int, method: str, path: str, body: bytes | None = None,
         ctx: ssl.SSLContext | None = None) -> tuple[int, bytes]:
    conn = (http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=5) if ctx
            else http.client.HTTPConnection("127.0.0.1", port, timeout=5))
    try:
        conn.request(method, path, body=body)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def test_storage_serves_shards_and_replicates_checkpoints(agent: Agent, tmp_path: Path) -> None:
    rport, _ = agent("replica")
    sport, log = agent("storage", "--replica-url", f"http://127.0.0.1:{rport}")
    code, body = _req(sport, "GET", "/datasets/train-a/shard-3")
    assert code == 200 and body == make_shard("train-a", 3) and body.startswith(b'{"id": "train-a-3-0"')
    assert _req(sport, "GET", "/datasets/train-a/shard-x")[0] == 400
    assert _req(sport, "GET", "/elsewhere")[0] == 404
    code, body = _req(sport, "PUT", "/checkpoints/train-a/rank-0/step-1", b"\x00" * 4096)
    assert code == 201 and json.loads(body)["bytes"] == 4096
    deadline = time.monotonic() + 10
    while _status(tmp_path, "replica")["counters"].get("objects_received", 0) < 1:
        assert time.monotonic() < deadline, "checkpoint was not replicated"
        time.sleep(0.1)
    code, body = _req(rport, "GET", "/catalog")
    assert json.loads(body) == {"train-a/rank-0/step-1": hashlib.sha256(b"\x00" * 4096).hexdigest()}
    assert "PUT /checkpoints/train-a/rank-0/step-1" in log.read_text()


def test_mgmt_accepts_jobs_reports_and_metrics(agent: Agent) -> None:
    port, _ = agent("mgmt")
    code, body = _req(port, "POST", "/jobs", json.dumps({"name": "finetune-1"}).encode())
    assert code == 201 and json.loads(body) == {"id": 1}
    assert _req(port, "POST", "/report", json.dumps({"job": "train-a", "rank": 0, "step": 5}).encode())[0] == 204
    assert _req(port, "POST", "/metrics", b"{}")[0] == 204
    assert _req(port, "POST", "/jobs", b"not json")[0] == 400
    assert _req(port, "POST", "/jobs", b"[1]")[0] == 400
    assert json.loads(_req(port, "GET", "/progress")[1]) == {"train-a/0": {"job": "train-a", "rank": 0, "step": 5}}
    assert [j["name"] for j in json.loads(_req(port, "GET", "/jobs")[1])] == ["finetune-1"]


# ------------------------------------------------------------------ TLS 1.3, mutual authentication

def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _cert(subject: str, key: ec.EllipticCurvePrivateKey, issuer: x509.Certificate | None,
          issuer_key: ec.EllipticCurvePrivateKey, *, ca: bool = False, uri: str | None = None) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    b = (x509.CertificateBuilder().subject_name(name).issuer_name(issuer.subject if issuer else name)
         .public_key(key.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(now - dt.timedelta(minutes=1)).not_valid_after(now + dt.timedelta(hours=1))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if not ca:
        sans: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        if uri:
            sans.append(x509.UniformResourceIdentifier(uri))
        b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False).add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    return b.sign(issuer_key, hashes.SHA256())


@pytest.fixture
def pki(tmp_path: Path) -> dict[str, Path]:
    ca_key = _key()
    ca = _cert("lab-ca", ca_key, None, ca_key, ca=True)
    files = {"ca": tmp_path / "ca.pem"}
    files["ca"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    for who in ("storage", "worker-0"):
        key = _key()
        cert = _cert(who, key, ca, ca_key, uri=f"spiffe://lab/node/{who}")
        files[f"{who}.crt"] = tmp_path / f"{who}.crt"
        files[f"{who}.key"] = tmp_path / f"{who}.key"
        files[f"{who}.crt"].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        files[f"{who}.key"].write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                          serialization.PrivateFormat.PKCS8,
                                                          serialization.NoEncryption()))
    return files


def _client(pki: dict[str, Path], *, with_cert: bool,
            version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_3) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(pki["ca"])
    ctx.maximum_version = version
    if with_cert:
        ctx.load_cert_chain(pki["worker-0.crt"], pki["worker-0.key"])
    return ctx


def test_tls_server_requires_a_client_certificate_and_tls13(agent: Agent, pki: dict[str, Path]) -> None:
    port, log = agent("storage", "--tls-cert", str(pki["storage.crt"]), "--tls-key", str(pki["storage.key"]),
                      "--tls-ca", str(pki["ca"]))
    code, _ = _req(port, "GET", "/datasets/train-a/shard-0", ctx=_client(pki, with_cert=True))
    assert code == 200
    assert "id=spiffe://lab/node/worker-0" in log.read_text()
    with pytest.raises((ssl.SSLError, ConnectionError)):  # no client certificate: mutual auth refuses
        _req(port, "GET", "/datasets/train-a/shard-0", ctx=_client(pki, with_cert=False))
    with pytest.raises((ssl.SSLError, ConnectionError)):
        _req(port, "GET", "/healthz", ctx=_client(pki, with_cert=True, version=ssl.TLSVersion.TLSv1_2))
    with pytest.raises((http.client.HTTPException, ConnectionError)):  # plaintext to a TLS port
        _req(port, "GET", "/healthz")


def test_tls_clients_replicate_over_tls(agent: Agent, pki: dict[str, Path], tmp_path: Path) -> None:
    tls = ["--tls-cert", str(pki["storage.crt"]), "--tls-key", str(pki["storage.key"]), "--tls-ca", str(pki["ca"])]
    rport, rlog = agent("replica", *tls)
    sport, _ = agent("storage", *tls, "--replica-url", f"https://127.0.0.1:{rport}")
    assert _req(sport, "PUT", "/checkpoints/j/c", b"x" * 10, ctx=_client(pki, with_cert=True))[0] == 201
    deadline = time.monotonic() + 10
    while "PUT /replica/j/c" not in rlog.read_text():
        assert time.monotonic() < deadline, rlog.read_text()
        time.sleep(0.1)
    assert "id=spiffe://lab/node/storage" in rlog.read_text()


def test_failed_connections_are_told_apart() -> None:
    assert classify(TimeoutError()) == "timeout"
    assert classify(ConnectionRefusedError()) == "refused"
    assert classify(ConnectionResetError()) == "reset"
    assert classify(OSError("no route")) == "error"
