"""TLS 1.3 with mutual authentication for storage, management and replication — and authorisation by identity.

On a site (the lab's namespaces, SSH hosts), TLS is a sidecar per node
(:mod:`ringfence.secure.layers._tls_mesh`), the way a service mesh adds it to services that speak plain
HTTP: nftables in each node redirects connections to a protected service port into the sidecars, which
speak TLS 1.3 between nodes with certificates of the cluster CA (:mod:`ringfence.secure.pki`), one
SPIFFE identity per workload:

* a worker holds its job rank's identity ``spiffe://<cluster>/job/<job>/rank/<n>``;
* the user node holds the policy's user identity (``spiffe://lab/user/alice``);
* every other node holds its node identity (``spiffe://<cluster>/node/<name>``).

The inbound gate decides by that identity (:data:`LAB_RULES`), then checks that it arrives from an
address the policy binds it to (:func:`~ringfence.secure.layers.tls.bindings`: a copied key used on
another node is refused). The object store serves ``/datasets/<job>/…`` and accepts
``/checkpoints/<job>/…`` only from ranks of ``<job>``; the job API accepts ``POST /jobs`` only from
user identities; the replica sink accepts replicas only from the storage node. Certificates rotate in
place (:func:`rotate_tls`): the sidecars pick the new files up on their next connection, and the old
certificates are revoked at once.

How it runs is the site's business: the CA lives with the controller, every file a sidecar reads
(its config, certificate, key, the revocation list) is written to its host through the host's
executor at the same path, and the sidecars are started, watched and stopped through
:class:`~ringfence.secure.layers.runtime.Runtime` — the same code drives the lab and SSH hosts.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from ringfence.evidence import EvidenceStore, RecordKind
from ringfence.policy import Policy, TrafficClass
from ringfence.policy.model import Layer
from ringfence.secure import pki
from ringfence.secure.layers.interface import LayerError
from ringfence.secure.layers.runtime import NftTable, Runtime, StateStore

#: Firewall mark of the sidecars' own sockets, so their connections are not redirected to themselves.
from ringfence.secure.layers.tls import (
    MESH_MARK,
    OUTBOUND_PORT,
    SCOPE,
    TABLE,
    bindings,
    gate_port,
    identity_of,
    rules_for,
    ruleset,
)
from ringfence.targets import ops
from ringfence.targets.interface import Site, TargetError


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
    """What :func:`enable_tls` did."""

    classes: tuple[str, ...]
    services: tuple[str, ...]
    nodes: tuple[TlsNode, ...]
    pki_dir: Path
    ca_fingerprint: str


def pki_dir(site: str, store: StateStore | None = None) -> Path:
    """The site's CA directory on the controller (created by :func:`enable_tls`)."""
    return (store or StateStore(site)).directory / "pki"


_CRED = ("cert.pem", "key.pem", "ca.pem")


def push_credential(rt: Runtime, node: str, cert_dir: Path) -> None:
    """Write ``cert_dir``'s certificate, key (0600) and CA to the same path on ``node``.

    The key goes last and the certificate is rewritten after it: a sidecar that reloads in between
    sees a new mtime again once the pair is complete, so it never keeps a mismatched pair.
    """
    for name in ("ca.pem", "key.pem", "cert.pem"):
        rt.put(node, str(cert_dir / name), (cert_dir / name).read_bytes(), mode=0o600 if name == "key.pem" else 0o644)


def publish_revocations(rt: Runtime, nodes: Iterable[str]) -> None:
    """Write the CA's revocation list to every node's copy (sidecars re-read it on their next connection)."""
    path = pki_dir(rt.site.name, rt.store) / "ca" / "revoked.txt"
    data = path.read_bytes() if path.exists() else b""
    for node in nodes:
        rt.put(node, str(path), data, mode=0o644)


def enable_tls(
    site: Site,
    policy: Policy,
    classes: Iterable[str],
    *,
    lifetime: timedelta | None = None,
    evidence: EvidenceStore | None = None,
    timeout: float = 20.0,
) -> TlsEnabled:
    """Protect every HTTP service of ``classes`` on ``site`` with mutual TLS 1.3 and identity authorisation.

    Issues the certificates (recording their fingerprints, never keys, in ``evidence``), starts one
    sidecar per involved node and redirects the services' traffic through them. Calling it again with
    more classes widens the protection (the sidecars are restarted with the new configuration).
    """
    wanted = {TrafficClass(c).value for c in classes}
    store = StateStore(site.name)
    rt = Runtime(site, store)
    state = store.read()
    chosen = sorted(wanted | {c for c, layer in state.classes.items() if layer == Layer.TLS.value})
    services = [s for s in policy.services if s.traffic_class.value in chosen and s.application == "http"]
    if not services:
        raise LayerError(f"no HTTP service of class {', '.join(chosen)} on {site.kind} site {site.name}")
    life = lifetime or pki.parse_duration(policy.keys.cert_lifetime, where="policy keys.cert_lifetime")
    pdir = pki_dir(site.name, store)
    ca = pki.ensure_ca(pdir, policy.cluster)
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
    rt.stop(layer=Layer.TLS.value)
    publish_revocations(rt, [p.node for p in plan])
    for item in plan:
        push_credential(rt, item.node, item.cert_dir)
        _start_sidecar(rt, policy, item, addr, ports, servers)
    _wait_ready(rt, [p.node for p in plan], timeout)
    for item in plan:
        inbound = [(s, ports[s]) for s in item.serves]
        reaches = [(addr[servers[s]], ports[s]) for s in item.client_of]
        rt.add_table(NftTable(item.node, "ip", TABLE, Layer.TLS.value), ruleset(inbound, reaches))
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
            subject=f"{site.kind} {site.name}",
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
    rt: Runtime,
    policy: Policy,
    item: TlsNode,
    addr: Mapping[str, str],
    ports: Mapping[str, int],
    servers: Mapping[str, str],
) -> None:
    conf_dir = rt.store.directory / "tls"
    ready = conf_dir / f"{item.node}.ready"
    rt.run(item.node, ["rm", "-f", str(ready)], what=f"resetting the TLS sidecar of {item.node}")
    config = {
        "node": item.node,
        "mark": MESH_MARK,
        "cert_dir": str(item.cert_dir),
        "revoked": str(pki_dir(rt.site.name, rt.store) / "ca" / "revoked.txt"),
        "events": str(conf_dir / f"{item.node}.events.jsonl"),
        "ready": str(ready),
        "inbound": [
            {"listen": gate_port(ports[s]), "upstream": ports[s], "service": s, "rules": rules_for(s, policy)}
            for s in item.serves
        ],
        "outbound": OUTBOUND_PORT if item.client_of else None,
        "peers": {f"{addr[servers[s]]}:{ports[s]}": identity_of(policy, servers[s]) for s in item.client_of},
        # identity → the addresses it may come from: a copied certificate used elsewhere is refused
        "bindings": bindings(policy) if item.serves else None,
    }
    path = conf_dir / f"{item.node}.json"
    rt.put(item.node, str(path), json.dumps(config, indent=1).encode())
    argv, env = rt.python(item.node, "ringfence.secure.layers._tls_mesh", "run", "--config", str(path))
    rt.spawn(item.node, f"tls-{item.node}", Layer.TLS.value, argv, env=env)


def _wait_ready(rt: Runtime, nodes: list[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    missing = list(nodes)
    while missing and time.monotonic() < deadline:
        still = []
        for n in missing:
            ready = str(rt.store.directory / "tls" / f"{n}.ready")
            try:
                waiting = ops.wait_for_files(rt.executor(n), [ready], seconds=0.5)
            except TargetError as exc:
                raise LayerError(f"cannot watch the TLS sidecar of {n}: {exc.message}") from exc
            if waiting:
                if rt.alive(f"tls-{n}") is None:
                    raise LayerError(f"the TLS sidecar of {n} exited during start-up:\n{rt.log_tail(n, f'tls-{n}')}")
                still.append(n)
        missing = still
    if missing:
        raise LayerError(f"TLS sidecars of {', '.join(missing)} did not become ready within {timeout:.0f}s")


def disable_tls(site: Site) -> None:
    """Remove the redirects and stop the sidecars (the services are plaintext again)."""
    store = StateStore(site.name)
    rt = Runtime(site, store)
    rt.drop_tables(layer=Layer.TLS.value)
    rt.stop(layer=Layer.TLS.value)
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
    old_serial: int = 0  # the old certificate's serial (the CRL's name for it)
    revoked_at: float | None = None  # epoch seconds the CA revoked the old certificate
    unpushed: str | None = None  # why the new credential could not be written to the node (containment only)


def reissue_tls(
    site: Site,
    policy: Policy,
    *,
    lifetime: timedelta | None = None,
    evidence: EvidenceStore | None = None,
    nodes: Iterable[str] | None = None,
    reason: str = "rotated",
    revoke_unreachable: bool = False,
) -> tuple[Rotated, ...]:
    """Make before break, without publishing: re-issue each node's certificate with a new key, push it to the
    node, then revoke the old ones at the CA (only once every replacement is in place) and record it.

    The revocation list is *not* pushed to the sidecars here (:func:`publish_revocations` does that): a
    caller that must know which node got it (``contain --identity``) pushes it itself, one node at a time.
    ``reason`` is recorded with each key event (``rotated``, ``revoked``). The old certificate and key are
    moved to ``<site layer dir>/retired/<node>`` (key 0600) for the refusal proof; :func:`forget_retired`
    deletes them.

    ``revoke_unreachable`` (containment): a node the new credential cannot be written to does not hold the
    revocation back — the old key is presumed stolen, so waiting on its holder would leave it valid. That node's
    :attr:`Rotated.unpushed` says why; a rotation (the default) stops at the first failed push instead.
    """
    store = StateStore(site.name)
    rt = Runtime(site, store)
    info = store.read().info.get("tls")
    if not info:
        raise LayerError(f"TLS is not enabled on {site.name}", hint="ringfence encrypt enable --layer tls ...")
    pdir = Path(info["pki"])
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
        unpushed: str | None = None
        try:
            push_credential(rt, node, cert_dir)
        except LayerError as exc:
            if not revoke_unreachable:
                raise
            unpushed = exc.message
        out.append(Rotated(node, new.info.identity or "", old.fingerprint, new.info.fingerprint, retired, old.serial,
                           unpushed=unpushed))
    done: list[Rotated] = []
    for r in out:  # revoked only once every replacement is in place: no moment without a valid credential
        pki.revoke(pdir, r.retired / "cert.pem")
        done.append(dataclasses.replace(r, revoked_at=time.time()))
    for r in done:
        if evidence is not None:
            evidence.append(
                RecordKind.KEY_EVENT,
                source="secure:tls",
                subject=r.identity,
                data={
                    "event": reason,
                    "node": r.node,
                    "old_fingerprint": r.old_fingerprint,
                    "old_serial": f"{r.old_serial:x}",
                    "new_fingerprint": r.new_fingerprint,
                    "old_revoked": True,
                    "new_installed": r.unpushed is None,
                },
            )
    st = store.read()
    nodes_info = dict(st.info["tls"]["nodes"])
    for r in done:
        nodes_info[r.node] = {"identity": r.identity, "fingerprint": r.new_fingerprint}
    store.update(info={**st.info, "tls": {**st.info["tls"], "nodes": nodes_info}})
    return tuple(done)


def rotate_tls(
    site: Site,
    policy: Policy,
    *,
    lifetime: timedelta | None = None,
    evidence: EvidenceStore | None = None,
    nodes: Iterable[str] | None = None,
) -> tuple[Rotated, ...]:
    """Re-issue every sidecar certificate with a new key, then revoke the old ones; the sidecars reload live.

    :func:`reissue_tls`, then the revocation list pushed to every sidecar (:func:`publish_revocations`).
    """
    out = reissue_tls(site, policy, lifetime=lifetime, evidence=evidence, nodes=nodes)
    info = StateStore(site.name).read().info["tls"]
    publish_revocations(Runtime(site), info["nodes"])
    return out


def forget_retired(site: str) -> None:
    """Delete the retired credentials kept (on the controller) for the refusal proof."""
    shutil.rmtree(StateStore(site).directory / "retired", ignore_errors=True)


def probe_request(
    site: Site,
    node: str,
    cert_dir: Path,
    url: str,
    *,
    method: str = "GET",
    body: str = "",
    timeout: float = 5.0,
    push: bool = True,
) -> dict[str, Any]:
    """One HTTPS request from ``node``'s address with the credential in ``cert_dir`` (not the node's sidecar).

    The credential (on the controller) is written to the same path on ``node`` first (``push=False``: the
    caller already did, once — probes run at once from one node must not rewrite the same files), then the
    probe runs there through the node's executor.

    Returns the outcome as a dict: ``outcome`` (``response`` | ``refused`` | ``closed`` | ``error``),
    ``status``, ``body``, ``server_fingerprint``, ``own_fingerprint``, ``error``.
    """
    store = StateStore(site.name)
    rt = Runtime(site, store)
    revoked = pki_dir(site.name, store) / "ca" / "revoked.txt"
    if push:
        push_credential(rt, node, cert_dir)
        publish_revocations(rt, [node])
    argv, env = rt.python(
        node,
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
    )
    try:
        res = rt.executor(node).run(argv, timeout=timeout + 15, env=env)
    except TargetError as exc:
        raise LayerError(f"TLS probe from {node}: {exc.message}") from exc
    try:
        out: dict[str, Any] = json.loads(res.stdout.decode())
    except ValueError as exc:
        raise LayerError(f"TLS probe from {node} failed: {res.stderr.decode(errors='replace')[-500:]}") from exc
    return out


def read_events(site: Site, since: float = 0.0) -> list[dict[str, Any]]:
    """Every sidecar's connection events (newest last) at or after ``since`` (epoch seconds), read on each node."""
    store = StateStore(site.name)
    rt = Runtime(site, store)
    out: list[dict[str, Any]] = []
    for node in sorted(store.read().nodes.get(Layer.TLS.value, [])):
        data = rt.get(node, str(store.directory / "tls" / f"{node}.events.jsonl"))
        for line in (data or b"").decode(errors="replace").splitlines():
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
    "SCOPE",
    "Rotated",
    "TlsEnabled",
    "TlsNode",
    "disable_tls",
    "enable_tls",
    "forget_retired",
    "identity_of",
    "issue_expired",
    "issue_foreign",
    "pki_dir",
    "probe_request",
    "publish_revocations",
    "push_credential",
    "read_events",
    "reissue_tls",
    "rotate_tls",
]
