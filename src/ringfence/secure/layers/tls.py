"""TLS 1.3 with mutual authentication for storage, management and replication — and authorisation by identity.

In the lab, TLS is a sidecar per node (:mod:`ringfence.secure.layers._tls_mesh`), the way a service
mesh adds it to services that speak plain HTTP: nftables in each node redirects connections to a
protected service port into the sidecars, which speak TLS 1.3 between nodes with certificates of the
cluster CA (:mod:`ringfence.secure.pki`), one SPIFFE identity per workload:

* a worker holds its job rank's identity ``spiffe://<cluster>/job/<job>/rank/<n>``;
* the user node holds the policy's user identity (``spiffe://lab/user/alice``);
* every other node holds its node identity (``spiffe://<cluster>/node/<name>``).

The inbound gate decides by that identity, never by address (:data:`LAB_RULES`): the object store
serves ``/datasets/<job>/…`` and accepts ``/checkpoints/<job>/…`` only from ranks of ``<job>``; the
job API accepts ``POST /jobs`` only from user identities; the replica sink accepts replicas only
from the storage node. Certificates rotate in place (:func:`rotate_lab_tls`): the sidecars pick the
new files up on their next connection, and the old certificates are revoked at once.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from ringfence.evidence import EvidenceStore, RecordKind
from ringfence.lab import Lab
from ringfence.marks import LOCAL_PROXY_BYPASS
from ringfence.policy import Policy, TrafficClass, parse_policy
from ringfence.policy.model import Layer
from ringfence.secure import pki
from ringfence.secure.layers._state import NftTable, StateStore
from ringfence.secure.layers.interface import LayerError, LayerScope, Reach, Transport

#: Firewall mark of the sidecars' own sockets, so their connections are not redirected to themselves.
MESH_MARK = LOCAL_PROXY_BYPASS
#: Where a node's plaintext clients are redirected to (loopback only).
OUTBOUND_PORT = 15001
_TABLE = "rf_tls"

SCOPE = LayerScope(
    layer=Layer.TLS,
    reach=Reach.CONNECTION,
    transports=frozenset({Transport.TCP}),
    crosses_routers=True,
    rotates_live=True,
    key_model="X.509 workload certificates of the cluster CA (SPIFFE identities), rotated in place and the old revoked",
    wire_protocols=("tls1.3", "tls1.2", "tls"),
    notes="per connection of the services that use it; says nothing about other traffic of the same hosts",
)

#: The lab services' authorisation table: service → (method, path pattern, who). ``{job}`` is the job in the path.
LAB_RULES: Mapping[str, tuple[tuple[str, str, str], ...]] = {
    "storage-http": (
        ("GET", r"^/datasets/(?P<job>[a-z0-9._-]+)/", "job:{job}"),
        ("PUT", r"^/checkpoints/(?P<job>[a-z0-9._-]+)/", "job:{job}"),
        ("GET", r"^/healthz$", "any"),
    ),
    "mgmt-api": (
        ("POST", r"^/jobs$", "kind:user"),
        ("POST", r"^/report$", "kind:job-rank"),
        ("POST", r"^/metrics$", "kind:node"),
        ("GET", r"^/(healthz|jobs|progress)$", "any"),
    ),
    "replica-sink": (
        ("PUT", r"^/replica/", "id:{storage}"),
        ("GET", r"^/(healthz|catalog)$", "any"),
    ),
}


def gate_port(port: int) -> int:
    """The sidecar port a protected service port is redirected to (stays clear of the lab's ports)."""
    return 20000 + port % 10000


@dataclass(frozen=True)
class TlsNode:
    """One node's part: its identity, certificate directory and what its sidecar does."""

    node: str
    identity: str
    cert_dir: Path
    fingerprint: str
    serves: tuple[str, ...]  # protected services on this node
    client_of: tuple[str, ...]  # protected services it reaches


@dataclass(frozen=True)
class TlsEnabled:
    """What :func:`enable_lab_tls` did."""

    classes: tuple[str, ...]
    services: tuple[str, ...]
    nodes: tuple[TlsNode, ...]
    pki_dir: Path
    ca_fingerprint: str


def lab_policy(lab: Lab) -> Policy:
    """The running lab's policy."""
    return parse_policy(lab.policy_yaml(), source=f"lab {lab.name}")


def identity_of(policy: Policy, node: str) -> str:
    """The workload identity a lab node's sidecar presents (a worker: its job rank's)."""
    for job in policy.jobs:
        if node in job.members:
            return pki.job_rank_identity(policy.cluster, job.name, job.members.index(node))
    spec = next((n for n in policy.nodes if n.name == node), None)
    if spec is not None and spec.identity:
        return spec.identity
    return f"spiffe://{policy.cluster}/node/{node}"


def pki_dir(lab: Lab, store: StateStore | None = None) -> Path:
    """The lab's CA directory (created by :func:`enable_lab_tls`)."""
    return (store or StateStore(lab.name)).directory / "pki"


def _ensure_ca(directory: Path, cluster: str) -> pki.CertInfo:
    if (directory / "ca" / "ca.pem").exists():
        return pki.show(directory / "ca" / "ca.pem")
    return pki.init_ca(directory, cluster, lifetime=timedelta(days=30))


def _rules(service: str, policy: Policy) -> list[dict[str, str]]:
    storage = identity_of(policy, "storage")
    return [
        {"method": m, "path": p, "allow": a.replace("{storage}", storage)} for m, p, a in LAB_RULES.get(service, ())
    ]


def _ruleset(serves: Iterable[tuple[str, int]], reaches: Iterable[tuple[str, int]]) -> str:
    pre = "".join(f'    iifname != "lo" tcp dport {port} redirect to :{gate_port(port)}\n' for _, port in serves)
    out = "".join(
        f"    meta mark != {MESH_MARK:#x} ip daddr {addr} tcp dport {port} redirect to :{OUTBOUND_PORT}\n"
        for addr, port in reaches
    )
    return (
        f"table ip {_TABLE} {{}}\ndelete table ip {_TABLE}\n"
        f"table ip {_TABLE} {{\n"
        f"  chain pre {{ type nat hook prerouting priority dstnat; policy accept;\n{pre}  }}\n"
        f"  chain out {{ type nat hook output priority -100; policy accept;\n{out}  }}\n}}\n"
    )


def enable_lab_tls(
    lab: Lab,
    classes: Iterable[str],
    *,
    lifetime: timedelta | None = None,
    evidence: EvidenceStore | None = None,
    timeout: float = 20.0,
) -> TlsEnabled:
    """Protect every HTTP service of ``classes`` in ``lab`` with mutual TLS 1.3 and identity authorisation.

    Issues the certificates (recording their fingerprints, never keys, in ``evidence``), starts one
    sidecar per involved node and redirects the services' traffic through them. Calling it again with
    more classes widens the protection (the sidecars are restarted with the new configuration).
    """
    policy = lab_policy(lab)
    wanted = {TrafficClass(c).value for c in classes}
    store = StateStore(lab.name)
    state = store.read()
    chosen = sorted(wanted | {c for c, layer in state.classes.items() if layer == Layer.TLS.value})
    services = [s for s in policy.services if s.traffic_class.value in chosen and s.application == "http"]
    if not services:
        raise LayerError(f"no HTTP service of class {', '.join(chosen)} in lab {lab.name}")
    life = lifetime or pki.parse_duration(policy.keys.cert_lifetime, where="policy keys.cert_lifetime")
    pdir = pki_dir(lab, store)
    ca = _ensure_ca(pdir, policy.cluster)
    addr = {n.name: n.addresses[0] for n in policy.nodes}
    ports = {s.name: int(s.port) for s in services}
    servers = {s.name: s.node for s in services}
    clients = {n.name for n in policy.nodes if n.name not in ("jump",)}  # every node that speaks HTTP
    plan: list[TlsNode] = []
    for node in sorted(clients | set(servers.values())):
        serves = tuple(sorted(name for name, host in servers.items() if host == node))
        client_of = tuple(sorted(name for name, host in servers.items() if host != node))
        ident = identity_of(policy, node)
        cert_dir = pdir / "nodes" / node
        if (cert_dir / "cert.pem").exists() and pki.cert_identity(pki.load_certificate(cert_dir / "cert.pem")) == ident:
            info = pki.show(cert_dir)
        else:
            info = pki.issue(pdir, ident, lifetime=life, out_dir=cert_dir).info
            if evidence is not None:
                evidence.append(
                    RecordKind.KEY_EVENT,
                    source="secure:tls",
                    subject=ident,
                    data={"event": "issued", **info.as_dict(), "node": node},
                )
        plan.append(TlsNode(node, ident, cert_dir, info.fingerprint, serves, client_of))
    store.stop(layer=Layer.TLS.value)
    for item in plan:
        _start_sidecar(lab, store, policy, item, addr, ports, servers)
    _wait_ready(store, [p.node for p in plan], timeout)
    for item in plan:
        inbound = [(s, ports[s]) for s in item.serves]
        reaches = [(addr[servers[s]], ports[s]) for s in item.client_of]
        store.add_table(
            NftTable(lab.topology.namespace(item.node), "ip", _TABLE, Layer.TLS.value), _ruleset(inbound, reaches)
        )
    state = store.read()
    store.update(
        classes={**state.classes, **dict.fromkeys(chosen, Layer.TLS.value)},
        nodes={**state.nodes, Layer.TLS.value: [p.node for p in plan]},
        info={
            **state.info,
            "tls": {
                "pki": str(pdir),
                "ca_fingerprint": ca.fingerprint,
                "services": [s.name for s in services],
                "nodes": {p.node: {"identity": p.identity, "fingerprint": p.fingerprint} for p in plan},
            },
        },
    )
    if evidence is not None:
        evidence.append(
            RecordKind.ACTION,
            source="secure:tls",
            subject=f"lab {lab.name}",
            data={
                "event": "enabled",
                "classes": chosen,
                "services": [s.name for s in services],
                "ca_fingerprint": ca.fingerprint,
                "nodes": {p.node: p.fingerprint for p in plan},
            },
        )
    return TlsEnabled(tuple(chosen), tuple(s.name for s in services), tuple(plan), pdir, ca.fingerprint)


def _start_sidecar(
    lab: Lab,
    store: StateStore,
    policy: Policy,
    item: TlsNode,
    addr: Mapping[str, str],
    ports: Mapping[str, int],
    servers: Mapping[str, str],
) -> None:
    conf_dir = store.directory / "tls"
    conf_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    ready = conf_dir / f"{item.node}.ready"
    ready.unlink(missing_ok=True)
    config = {
        "node": item.node,
        "mark": MESH_MARK,
        "cert_dir": str(item.cert_dir),
        "revoked": str(pki_dir(lab, store) / "ca" / "revoked.txt"),
        "events": str(conf_dir / f"{item.node}.events.jsonl"),
        "ready": str(ready),
        "inbound": [
            {"listen": gate_port(ports[s]), "upstream": ports[s], "service": s, "rules": _rules(s, policy)}
            for s in item.serves
        ],
        "outbound": OUTBOUND_PORT if item.client_of else None,
        "peers": {f"{addr[servers[s]]}:{ports[s]}": identity_of(policy, servers[s]) for s in item.client_of},
    }
    path = conf_dir / f"{item.node}.json"
    path.write_text(json.dumps(config, indent=1))
    store.spawn(
        lab.topology.namespace(item.node),
        item.node,
        f"tls-{item.node}",
        Layer.TLS.value,
        [sys.executable, "-m", "ringfence.secure.layers._tls_mesh", "run", "--config", str(path)],
        env={"PYTHONPATH": str(Path(pki.__file__).resolve().parents[2])},
    )


def _wait_ready(store: StateStore, nodes: list[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    missing = list(nodes)
    while missing and time.monotonic() < deadline:
        missing = [n for n in missing if not (store.directory / "tls" / f"{n}.ready").exists()]
        dead = [n for n in missing if store.alive(f"tls-{n}") is None]
        if dead:
            log = store.directory / "logs" / f"tls-{dead[0]}.log"
            tail = log.read_text(errors="replace")[-800:] if log.exists() else "(no log)"
            raise LayerError(f"the TLS sidecar of {dead[0]} exited during start-up:\n{tail}")
        if missing:
            time.sleep(0.05)
    if missing:
        raise LayerError(f"TLS sidecars of {', '.join(missing)} did not become ready within {timeout:.0f}s")


def disable_lab_tls(lab: Lab) -> None:
    """Remove the redirects and stop the sidecars (the services are plaintext again)."""
    store = StateStore(lab.name)
    store.drop_tables(layer=Layer.TLS.value)
    store.stop(layer=Layer.TLS.value)
    st = store.read()
    store.update(
        classes={c: v for c, v in st.classes.items() if v != Layer.TLS.value},
        nodes={k: v for k, v in st.nodes.items() if k != Layer.TLS.value},
    )


@dataclass(frozen=True)
class Rotated:
    """One certificate rotation: the old and the new fingerprint of a node's identity."""

    node: str
    identity: str
    old_fingerprint: str
    new_fingerprint: str
    retired: Path  # directory keeping the old cert and (0600) key, for the refusal proof only


def rotate_lab_tls(
    lab: Lab,
    *,
    lifetime: timedelta | None = None,
    evidence: EvidenceStore | None = None,
    nodes: Iterable[str] | None = None,
) -> tuple[Rotated, ...]:
    """Re-issue every sidecar certificate with a new key, then revoke the old ones; the sidecars reload live.

    The old certificate and key are moved to ``<lab layer dir>/retired/<node>`` (key 0600) so that
    ``verify`` can prove the old credential is refused; :func:`forget_retired` deletes them.
    """
    store = StateStore(lab.name)
    info = store.read().info.get("tls")
    if not info:
        raise LayerError(f"TLS is not enabled in lab {lab.name}", hint="ringfence encrypt enable --layer tls ...")
    pdir = Path(info["pki"])
    policy = lab_policy(lab)
    life = lifetime or pki.parse_duration(policy.keys.cert_lifetime, where="policy keys.cert_lifetime")
    out: list[Rotated] = []
    for node in sorted(nodes or info["nodes"]):
        cert_dir = pdir / "nodes" / node
        retired = store.directory / "retired" / node
        retired.mkdir(parents=True, exist_ok=True, mode=0o700)
        shutil.copy2(cert_dir / "cert.pem", retired / "cert.pem")
        # the old key is moved, never copied: it exists once, 0600, until forget_retired() deletes it
        os.replace(cert_dir / "key.pem", retired / "key.pem")
        shutil.copy2(cert_dir / "ca.pem", retired / "ca.pem")
        old, new = pki.rotate(pdir, cert_dir, lifetime=life)
        out.append(Rotated(node, new.info.identity or "", old.fingerprint, new.info.fingerprint, retired))
    for r in out:  # revoked only once every replacement is in place: no moment without a valid credential
        pki.revoke(pdir, r.retired / "cert.pem")
        if evidence is not None:
            evidence.append(
                RecordKind.KEY_EVENT,
                source="secure:tls",
                subject=r.identity,
                data={
                    "event": "rotated",
                    "node": r.node,
                    "old_fingerprint": r.old_fingerprint,
                    "new_fingerprint": r.new_fingerprint,
                    "old_revoked": True,
                },
            )
    st = store.read()
    nodes_info = dict(st.info["tls"]["nodes"])
    for r in out:
        nodes_info[r.node] = {"identity": r.identity, "fingerprint": r.new_fingerprint}
    store.update(info={**st.info, "tls": {**st.info["tls"], "nodes": nodes_info}})
    return tuple(out)


def forget_retired(lab: Lab) -> None:
    """Delete the retired credentials kept for the refusal proof."""
    shutil.rmtree(StateStore(lab.name).directory / "retired", ignore_errors=True)


def probe_request(
    lab: Lab, node: str, cert_dir: Path, url: str, *, method: str = "GET", body: str = "", timeout: float = 5.0
) -> dict[str, Any]:
    """One HTTPS request from ``node``'s address with the credential in ``cert_dir`` (not the node's sidecar).

    Returns the outcome as a dict: ``outcome`` (``response`` | ``refused`` | ``closed`` | ``error``),
    ``status``, ``body``, ``server_fingerprint``, ``own_fingerprint``, ``error``.
    """
    store = StateStore(lab.name)
    revoked = pki_dir(lab, store) / "ca" / "revoked.txt"
    argv = [
        sys.executable,
        "-m",
        "ringfence.secure.layers._tls_mesh",
        "probe",
        "--cert-dir",
        str(cert_dir),
        "--revoked",
        str(revoked),
        "--url",
        url,
        "--method",
        method,
        "--body",
        body,
        "--mark",
        str(MESH_MARK),
        "--timeout",
        str(timeout),
    ]
    res = lab.executor(node).run(
        argv, timeout=timeout + 15, env={"PYTHONPATH": str(Path(pki.__file__).resolve().parents[2])}
    )
    try:
        out: dict[str, Any] = json.loads(res.stdout.decode())
    except ValueError as exc:
        raise LayerError(f"TLS probe from {node} failed: {res.stderr.decode(errors='replace')[-500:]}") from exc
    return out


def read_events(lab: Lab, since: float = 0.0) -> list[dict[str, Any]]:
    """Every sidecar's connection events (newest last) at or after ``since`` (epoch seconds)."""
    out: list[dict[str, Any]] = []
    for f in sorted((StateStore(lab.name).directory / "tls").glob("*.events.jsonl")):
        for line in f.read_text(errors="replace").splitlines():
            try:
                ev = json.loads(line)
            except ValueError:
                continue  # a line being written right now
            if ev.get("t", 0) >= since:
                out.append(ev)
    return sorted(out, key=lambda e: float(e.get("t", 0)))


def issue_foreign(directory: Path, identity: str) -> Path:
    """A credential for ``identity`` from a *different* CA (same trust-domain name) — for fail-closed proofs."""
    cluster = pki.parse_identity(identity).cluster
    pki.init_ca(directory / "foreign", cluster, lifetime=timedelta(days=1), force=True)
    return pki.issue(
        directory / "foreign", identity, lifetime=timedelta(hours=1), out_dir=directory / "foreign-cert"
    ).directory


def issue_expired(pki_directory: Path, identity: str, out_dir: Path) -> Path:
    """A credential of the lab's own CA for ``identity`` that expired an hour ago."""
    then = datetime.now().astimezone() - timedelta(hours=3)
    return pki.issue(pki_directory, identity, lifetime=timedelta(hours=1), out_dir=out_dir, now=then).directory


__all__ = [
    "LAB_RULES",
    "MESH_MARK",
    "OUTBOUND_PORT",
    "SCOPE",
    "Rotated",
    "TlsEnabled",
    "TlsNode",
    "disable_lab_tls",
    "enable_lab_tls",
    "forget_retired",
    "gate_port",
    "identity_of",
    "issue_expired",
    "issue_foreign",
    "lab_policy",
    "pki_dir",
    "probe_request",
    "read_events",
    "rotate_lab_tls",
]
