"""IPsec on the collective path between chosen nodes: strongSwan's userspace ESP (kernel-libipsec), strict mode.

The lab's kernel has no ESP (``CONFIG_INET_ESP`` unset), so each node runs its own ``charon-systemd``
with the ``kernel-libipsec`` plugin: ESP is done in the daemon and the cleartext side is a TUN device
(``ipsec0``, MTU 1400). One daemon per node, each with its own ``strongswan.conf`` (``STRONGSWAN_CONF``),
vici socket, log and swanctl directory under the site's layer directory on that host; charon-systemd
writes no PID file, so daemons in several namespaces of one machine never collide. Every daemon is
started and recorded through :class:`~ringfence.secure.layers.runtime.Runtime` (its ``sh`` parent's
command line names the site's directory), so ``encrypt disable`` and ``lab down`` end it by pid, also
after a crash.

Each pair of nodes is a host-to-host tunnel (traffic selectors: the two addresses, ``allow_peer_ts``),
IKEv2 authenticated with certificates of the cluster CA (identity ``spiffe://<cluster>/node/<name>``;
revocation checked strictly against the CA's CRL), AES-256-GCM for IKE and ESP. strongSwan 5.9.8's
libipsec always encapsulates ESP in UDP (ESP-in-UDP on 4500), so that is what the wire shows. charon
routes each peer's address into the TUN device (table 220, skipped by packets carrying mark 0x42, which
its own IKE/ESP sockets set), so gloo keeps its addresses and connections open before the tunnel move
into it.

**Strict mode** (nftables table ``rf_ipsec`` per node): to or from a peer only through the TUN device
or as IKE/ESP-in-UDP; everything else is dropped and counted. No SA (wrong or revoked certificate,
daemon gone) therefore means no collective traffic, never plaintext.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from ringfence.enforce import nftables, nftrun
from ringfence.enforce.interface import EnforceError
from ringfence.evidence import EvidenceStore, RecordKind
from ringfence.policy.model import Layer
from ringfence.secure import pki
from ringfence.secure.layers.interface import Endpoint, LayerError, RenderOptions
from ringfence.secure.layers.ipsec import (
    FWMARK,
    NFT_TABLE,
    TABLE,
    charon_conf,
    libipsec_swanctl_conf,
    strict_ruleset,
)
from ringfence.secure.layers.ipsec_certs import Listing, parse_certs
from ringfence.secure.layers.ipsec_sas import IkeSa, parse_sas
from ringfence.secure.layers.runtime import NftTable, Runtime, StateStore
from ringfence.targets import ops
from ringfence.targets.interface import RunResult, Site, TargetError

LAYER = Layer.IPSEC.value
_SWANCTL_DIRS = ("x509", "x509ca", "x509crl", "private", "x509ocsp", "x509aa", "x509ac", "pubkey", "rsa", "ecdsa",
                 "bliss", "pkcs8", "pkcs12")
# charon-systemd ignores its arguments: the directory it is given makes its own command line name ours, so the
# recorded pid is the daemon itself and SIGTERM reaches it directly (not only through its process group).
_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


def conn_name(a: str, b: str) -> str:
    """The swanctl connection (and CHILD SA) name of the tunnel between ``a`` and ``b``."""
    x, y = sorted((a, b))
    return f"rf-{x}-{y}"


def pki_dir(store: StateStore) -> Path:
    """The site's cluster CA on the controller (the same directory the TLS layer uses)."""
    return store.directory / "pki"


def cred_dir(store: StateStore, node: str) -> Path:
    """The controller's copy of ``node``'s IPsec certificate and key (its own credential, not TLS's)."""
    return pki_dir(store) / "ipsec" / node


@dataclass(frozen=True)
class IpsecEnabled:
    """What :func:`enable_ipsec` did: the nodes, their certificate fingerprints, the tunnels."""

    nodes: tuple[str, ...]
    fingerprints: dict[str, str]
    tunnels: tuple[str, ...]


class Node:
    """One node's charon: its files on the host, and ``swanctl`` against its own vici socket."""

    def __init__(self, rt: Runtime, node: str) -> None:
        self.rt, self.node = rt, node
        self.directory = f"{rt.host_dir(node)}/ipsec"
        self.label = f"charon-{node}"
        self.address = rt.site.address(node)

    def swanctl(self, *args: str, timeout: float = 30.0) -> str:
        """``swanctl ARGS`` through this node's vici socket (``STRONGSWAN_CONF``/``SWANCTL_DIR`` its own)."""
        d = self.directory
        return self.rt.run(self.node, ["env", f"STRONGSWAN_CONF={d}/strongswan.conf", f"SWANCTL_DIR={d}/swanctl",
                                       f"PATH={_PATH}", "swanctl", *args,
                                       "--uri", f"unix://{d}/charon.vici"],
                           what=f"swanctl {args[0] if args else ''} on {self.node}", timeout=timeout)

    def attempt(self, *args: str, timeout: float = 30.0) -> RunResult:
        """``swanctl ARGS`` whose failure is an expected outcome (an initiation a drill wants refused)."""
        d = self.directory
        try:
            return self.rt.executor(self.node).run(
                ["swanctl", *args, "--uri", f"unix://{d}/charon.vici"], timeout=timeout,
                env={"STRONGSWAN_CONF": f"{d}/strongswan.conf", "SWANCTL_DIR": f"{d}/swanctl", "LC_ALL": "C",
                     "PATH": _PATH})
        except TargetError as exc:
            raise LayerError(f"swanctl on {self.node}: {exc.message}") from exc

    def sas(self) -> tuple[IkeSa, ...]:
        """The IKE SAs (with their CHILD SAs) of this node's charon."""
        return parse_sas(self.swanctl("--list-sas"))

    def certs(self) -> Listing:
        """The end-entity certificates and the CRLs this node's charon holds now."""
        return parse_certs(self.swanctl("--list-certs"))

    def put_credential(self, cdir: Path, crl: bytes) -> None:
        """Write certificate, CA, CRL and the key (0600) into this node's swanctl directory."""
        base = f"{self.directory}/swanctl"
        self.rt.put(self.node, f"{base}/x509ca/ca.pem", (cdir / "ca.pem").read_bytes(), mode=0o644)
        self.rt.put(self.node, f"{base}/x509crl/ca.crl", crl, mode=0o644)
        self.rt.put(self.node, f"{base}/private/node.pem", (cdir / "key.pem").read_bytes(), mode=0o600)
        self.rt.put(self.node, f"{base}/x509/node.pem", (cdir / "cert.pem").read_bytes(), mode=0o644)

    def prepare(self, conf: str) -> None:
        """The daemon's configuration and the swanctl directory skeleton."""
        dirs = [f"{self.directory}/swanctl/{d}" for d in _SWANCTL_DIRS]
        self.rt.run(self.node, ["sh", "-c", 'umask 077; mkdir -p "$@"', "sh", *dirs],
                    what=f"preparing IPsec on {self.node}")
        self.rt.put(self.node, f"{self.directory}/strongswan.conf", charon_conf(self.directory).encode(), mode=0o644)
        self.rt.put(self.node, f"{self.directory}/swanctl/swanctl.conf", conf.encode(), mode=0o644)

    def start(self, timeout: float = 20.0) -> int:
        """Start charon-systemd and wait for its vici socket (observed, not slept on)."""
        pid = self.rt.spawn(self.node, self.label, LAYER, ["charon-systemd", self.directory],
                            env={"STRONGSWAN_CONF": f"{self.directory}/strongswan.conf", "PATH": _PATH})
        sock = f"{self.directory}/charon.vici"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                waiting = ops.wait_for_files(self.rt.executor(self.node), [sock], seconds=0.5)
            except TargetError as exc:
                raise LayerError(f"cannot watch charon on {self.node}: {exc.message}") from exc
            if not waiting:
                return pid
            if self.rt.alive(self.label) is None:
                raise LayerError(f"charon-systemd in {self.node} exited: {self.rt.log_tail(self.node, self.label)}")
        raise LayerError(f"charon-systemd in {self.node} did not open its vici socket within {timeout:.0f}s")

    def log_tail(self, size: int = 1500) -> str:
        """The end of charon's own log (IKE decisions: authentication, revocation, rekeying)."""
        data = self.rt.get(self.node, f"{self.directory}/charon.log")
        return "(no log)" if data is None else data.decode(errors="replace")[-size:]


def node_handle(site: Site, node: str) -> Node:
    """The IPsec daemon of ``node``."""
    return Node(Runtime(site), node)


def _blocked_by_enforcement(site: Site, node: str) -> bool:
    """True when ringfence's enforcement table on ``node`` does not admit ESP-in-UDP out (the tunnel would stall)."""
    try:
        doc = nftrun.list_ruleset(site.executor(node), family="inet", table=nftables.TABLE)
    except EnforceError as exc:
        raise LayerError(f"{node}: cannot read the enforcement ruleset: {exc.message}") from exc
    return nftables.admits_outbound(doc, "udp", 4500) is False


def _pairs(nodes: list[str]) -> list[tuple[str, str]]:
    return [(a, b) for i, a in enumerate(nodes) for b in nodes[i + 1:]]


def _endpoint(site: Site, cluster: str, node: str) -> Endpoint:
    return Endpoint(node, site.address(node), identity=f"spiffe://{cluster}/node/{node}")


def wait_established(site: Site, nodes: Iterable[str], *, timeout: float = 30.0,
                     exclude: Mapping[str, set[int]] | None = None) -> dict[str, tuple[IkeSa, ...]]:
    """Poll every tunnel's initiator until it has an established IKE SA with an installed CHILD SA.

    ``exclude`` (tunnel → IKE SA ids) ignores SAs that existed before (a reauthentication must make new
    ones). Returns each node's SAs; :class:`LayerError` with charon's log when the deadline passes.
    """
    chosen = sorted(set(nodes))
    rt = Runtime(site)
    handles = {n: Node(rt, n) for n in chosen}
    deadline = time.monotonic() + timeout
    while True:
        state = {n: h.sas() for n, h in handles.items()}
        missing = []
        for a, b in _pairs(chosen):
            name, skip = conn_name(a, b), (exclude or {}).get(conn_name(a, b), set())
            if not any(s.name == name and s.state == "ESTABLISHED" and s.uniqueid not in skip and s.installed()
                       for s in state[a]):
                missing.append(name)
        if not missing:
            return state
        if time.monotonic() > deadline:
            first = missing[0].removeprefix("rf-")
            node = next(n for n in chosen if first.startswith(n))
            raise LayerError(f"IPsec tunnels {', '.join(missing)} not established within {timeout:.0f}s; "
                             f"charon on {node}: {handles[node].log_tail(800)}")
        time.sleep(0.2)


def enable_ipsec(
    site: Site,
    nodes: Iterable[str],
    *,
    cluster: str,
    strict: bool = True,
    lifetime: timedelta = timedelta(hours=24),
    options: RenderOptions | None = None,
    evidence: EvidenceStore | None = None,
    timeout: float = 40.0,
) -> IpsecEnabled:
    """Tunnel all traffic between ``nodes`` through userspace IPsec; with ``strict``, drop any that is not."""
    chosen = sorted(set(nodes))
    if len(chosen) < 2:
        raise LayerError("IPsec needs at least two nodes", hint="--nodes worker-0,worker-1")
    store = StateStore(site.name)
    rt = Runtime(site, store)
    st = store.read()
    if st.nodes.get(LAYER):
        raise LayerError(f"IPsec is already enabled on {site.name}", hint="disable it first")
    overlap = sorted(set(st.nodes.get(Layer.WIREGUARD.value, [])) & set(chosen))
    if overlap:
        raise LayerError(f"WireGuard already tunnels {', '.join(overlap)}: two host tunnels cannot both route the "
                         "same peers", hint="ringfence encrypt disable --layer wireguard")
    blocked = [n for n in chosen if _blocked_by_enforcement(site, n)]
    if blocked:
        raise LayerError(
            f"ringfence enforcement on {', '.join(blocked)} does not approve IKE and ESP-in-UDP (udp/500, udp/4500) "
            "between the nodes: IPsec would carry nothing and the job would stall",
            hint="approve {from: {job: <job>}, to: {job: <job>}, proto: udp, ports: '500,4500', class: collective}, "
            "then `ringfence apply`",
        )
    opts = options or RenderOptions()
    pdir = pki_dir(store)
    pki.ensure_ca(pdir, cluster)
    fps: dict[str, str] = {}
    for n in chosen:
        fps[n] = pki.issue(pdir, f"spiffe://{cluster}/node/{n}", lifetime=lifetime, out_dir=cred_dir(store, n)).info \
            .fingerprint
    crl = pki.crl(pdir)
    handles = {n: Node(rt, n) for n in chosen}
    ends = {n: _endpoint(site, cluster, n) for n in chosen}
    store.update(nodes={**st.nodes, LAYER: chosen})  # recorded first: a failed enable is undone from the record
    try:
        if strict:
            for n in chosen:
                rt.add_table(NftTable(n, "inet", NFT_TABLE, LAYER),
                             strict_ruleset([site.address(m) for m in chosen if m != n]))
        for n, h in handles.items():
            h.prepare(libipsec_swanctl_conf(ends[n], tuple(e for m, e in ends.items() if m != n), opts))
            h.put_credential(cred_dir(store, n), crl)
            h.start()
        # responders first, so an initiator's first IKE_SA_INIT finds its peer's connection loaded
        for n in sorted(chosen, reverse=True):
            handles[n].swanctl("--load-all")
        wait_established(site, chosen, timeout=timeout)
    except BaseException:
        disable_ipsec(site)
        raise
    st = store.read()
    tunnels = tuple(conn_name(a, b) for a, b in _pairs(chosen))
    store.update(info={**st.info, "ipsec": {"cluster": cluster, "fingerprints": fps, "strict": strict,
                                             "tunnels": list(tunnels), "pki": str(pdir),
                                             "lifetime_s": int(lifetime.total_seconds()),
                                             "encapsulation": "esp-in-udp/4500 (kernel-libipsec 5.9.8)"}})
    if evidence is not None:
        for n, fp in fps.items():
            evidence.append(RecordKind.KEY_EVENT, source="secure:ipsec", subject=f"node {n}",
                            data={"event": "issued", "fingerprint": fp, "identity": ends[n].identity})
        evidence.append(RecordKind.ACTION, source="secure:ipsec", subject=f"{site.kind} {site.name}",
                        data={"event": "enabled", "nodes": chosen, "strict": strict, "tunnels": list(tunnels)})
    return IpsecEnabled(tuple(chosen), fps, tunnels)


def set_collective_class(site: Site, classes: Iterable[str]) -> None:
    """Record that IPsec protects ``classes`` (the collective) in the site's layer state."""
    store = StateStore(site.name)
    st = store.read()
    store.update(classes={**st.classes, **dict.fromkeys(classes, LAYER)})


def disable_ipsec(site: Site) -> None:
    """Stop the daemons (charon removes its routes and TUN device), then strict tables, leftovers and files."""
    store = StateStore(site.name)
    rt = Runtime(site, store)
    st = store.read()
    nodes = sorted(set(st.nodes.get(LAYER, []) or [p.node for p in st.processes if p.layer == LAYER]))
    rt.stop(layer=LAYER)
    for node in nodes:
        ex = site.executor(node)
        try:
            # a charon killed with -9 leaves its rule and routes: their exit status is not the point
            ex.run(["ip", "rule", "del", "not", "fwmark", hex(FWMARK), "table", str(TABLE)], timeout=20)
            ex.run(["ip", "route", "flush", "table", str(TABLE)], timeout=20)
        except TargetError as exc:
            raise LayerError(f"cannot remove IPsec routing on {node}: {exc.message}") from exc
    rt.drop_tables(layer=LAYER)
    for node in nodes:
        try:
            ops.remove_tree(site.executor(node), f"{rt.host_dir(node)}/ipsec")
        except TargetError as exc:
            raise LayerError(f"cannot remove the IPsec files on {node}: {exc.message}") from exc
    shutil.rmtree(pki_dir(store) / "ipsec", ignore_errors=True)
    shutil.rmtree(store.directory / "retired-ipsec", ignore_errors=True)
    st = store.read()
    store.update(
        classes={c: v for c, v in st.classes.items() if v != LAYER},
        nodes={k: v for k, v in st.nodes.items() if k != LAYER},
        info={k: v for k, v in st.info.items() if k != "ipsec"},
    )


def strict_counters(site: Site, node: str) -> dict[str, int]:
    """Packets the strict mode dropped at ``node`` (``plaintext_out``, ``plaintext_in``)."""
    rt = Runtime(site)
    out: dict[str, int] = {}
    for name in ("plaintext_out", "plaintext_in"):
        words = rt.run(node, ["nft", "list", "counter", "inet", NFT_TABLE, name],
                       what=f"reading IPsec strict-mode counters on {node}").split()
        out[name] = int(words[words.index("packets") + 1]) if "packets" in words else 0
    return out


def enabled_info(site: Site) -> dict[str, object]:
    """The layer's public record (``LayerError`` when IPsec is not enabled on ``site``)."""
    info = StateStore(site.name).read().info.get("ipsec")
    if not info:
        raise LayerError(f"IPsec is not enabled on {site.name}", hint="ringfence encrypt enable --layer ipsec")
    return dict(info)


def initiators(site: Site) -> dict[str, str]:
    """Tunnel name → the node that initiates it (the lower-named end)."""
    nodes = sorted(StateStore(site.name).read().nodes.get(LAYER, []))
    return {conn_name(a, b): a for a, b in _pairs(nodes)}


def rekey(site: Site, tunnel: str, *, ike: bool) -> None:
    """Rekey one tunnel's IKE SA (``ike``) or its CHILD SA now, from its initiator (``swanctl --rekey``)."""
    node = initiators(site)[tunnel]
    node_handle(site, node).swanctl("--rekey", "--ike" if ike else "--child", tunnel)


@dataclass(frozen=True)
class IpsecRotated:
    """One node's certificate rotation: fingerprints, and where the retired credential waits (0700)."""

    node: str
    old_fingerprint: str
    new_fingerprint: str
    retired: Path
    old_serial: int
    new_serial: int


def rotate_ipsec(site: Site, *, lifetime: timedelta | None = None, evidence: EvidenceStore | None = None,
                 timeout: float = 40.0, nodes: Iterable[str] | None = None) -> tuple[IpsecRotated, ...]:
    """Re-issue every node's certificate (or those of ``nodes``), revoke the old ones and reauthenticate every
    tunnel they are an end of, make-before-break.

    Per node a new key and certificate from the cluster CA; the old certificate is revoked and the new CRL
    goes to every node. Each tunnel's initiator then establishes a *new* IKE SA (authenticated with the
    new certificates on both ends) before its old one is terminated, so traffic always has an SA. The
    retired credentials stay in ``retired-ipsec/`` for the refusal proof until :func:`forget_retired`.
    """
    store = StateStore(site.name)
    rt = Runtime(site, store)
    info = enabled_info(site)
    tunnelled = sorted(store.read().nodes.get(LAYER, []))
    chosen = set(tunnelled) if nodes is None else set(nodes)
    unknown = sorted(chosen - set(tunnelled))
    if unknown:
        raise LayerError(f"{', '.join(unknown)} is not in the IPsec mesh on {site.name}",
                         hint=f"tunnelled: {', '.join(tunnelled)}")
    life = lifetime or timedelta(seconds=int(str(info.get("lifetime_s", 86400))))
    pdir = pki_dir(store)
    out: list[IpsecRotated] = []
    for n in sorted(chosen):
        cdir = cred_dir(store, n)
        retired = store.directory / "retired-ipsec" / n
        retired.mkdir(parents=True, exist_ok=True, mode=0o700)
        shutil.copy2(cdir / "cert.pem", retired / "cert.pem")  # public
        shutil.copy2(cdir / "ca.pem", retired / "ca.pem")
        os.replace(cdir / "key.pem", retired / "key.pem")  # the old key is moved, never copied
        old = pki.show(retired / "cert.pem")
        new = pki.issue(pdir, str(old.identity), lifetime=life, out_dir=cdir).info
        pki.revoke(pdir, retired / "cert.pem")
        out.append(IpsecRotated(n, old.fingerprint, new.fingerprint, retired, old.serial, new.serial))
    crl = pki.crl(pdir)
    handles = {n: Node(rt, n) for n in tunnelled}
    before = {n: h.sas() for n, h in handles.items()}
    for n, h in handles.items():
        h.put_credential(cred_dir(store, n), crl)  # every node: the CRL; a rotated node also its new credential
        h.swanctl("--load-creds", "--clear")  # else the old certificate stays loaded beside the new
        h.swanctl("--load-conns")  # the connections hold the certificate they were loaded with
    # every tunnel with a rotated end is reauthenticated; the others keep their SA (their certificates stand)
    tunnels = {conn_name(a, b): a for a, b in _pairs(tunnelled) if a in chosen or b in chosen}
    old_ids = {t: {s.uniqueid for s in before[a] if s.name == t} for t, a in tunnels.items()}
    for tunnel, node in tunnels.items():
        handles[node].swanctl("--initiate", "--child", tunnel, timeout=timeout)
    wait_established(site, tunnelled, timeout=timeout, exclude=old_ids)
    for tunnel, node in tunnels.items():
        for uid in sorted(old_ids[tunnel]):
            # the peer may have closed it already (a new IKE SA of the same identities replaces it): then it is gone
            res = handles[node].attempt("--terminate", "--ike-id", str(uid), timeout=timeout)
            if res.returncode != 0 and b"no matching SAs" not in res.stdout + res.stderr:
                why = res.stderr.decode(errors="replace")
                raise LayerError(f"cannot close the old IKE SA {uid} of {tunnel}: {why}")
    left = {t: {s.uniqueid for s in handles[n].sas() if s.name == t} & old_ids[t] for t, n in tunnels.items()}
    if any(left.values()):
        raise LayerError(f"old IKE SAs still up after the rotation: {left}")
    for h in handles.values():  # nor any peer's old certificate, cached from the IKE SAs just closed
        h.swanctl("--flush-certs")
    prior = info.get("fingerprints")
    fps = {**(prior if isinstance(prior, dict) else {}), **{r.node: r.new_fingerprint for r in out}}
    st = store.read()
    store.update(info={**st.info, "ipsec": {**info, "fingerprints": fps}})
    if evidence is not None:
        for r in out:
            evidence.append(RecordKind.KEY_EVENT, source="secure:ipsec", subject=f"node {r.node}",
                            data={"event": "rotated", "old_fingerprint": r.old_fingerprint,
                                  "new_fingerprint": r.new_fingerprint, "old_revoked": True})
    return tuple(out)


def forget_retired(site: Site) -> None:
    """Delete the retired credentials of the last rotation (after the refusal proof)."""
    shutil.rmtree(StateStore(site.name).directory / "retired-ipsec", ignore_errors=True)


__all__ = [
    "LAYER",
    "IpsecEnabled",
    "IpsecRotated",
    "Node",
    "conn_name",
    "cred_dir",
    "disable_ipsec",
    "enable_ipsec",
    "enabled_info",
    "forget_retired",
    "initiators",
    "node_handle",
    "pki_dir",
    "rekey",
    "rotate_ipsec",
    "set_collective_class",
    "strict_counters",
    "wait_established",
]
