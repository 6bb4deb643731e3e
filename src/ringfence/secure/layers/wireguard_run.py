"""WireGuard on the collective path between chosen workers, with a strict mode that leaves no plaintext path.

Userspace ``wireguard-go`` (the kernel here has no WireGuard module). Its control socket lives at the
fixed path ``/run/wireguard/<if>.sock``, shared by every namespace, so each node's daemon runs in its
own private mount namespace with a per-node directory bind-mounted over ``/run``; every later ``wg``
call enters that daemon's mount and network namespaces (``nsenter -t PID -m -n``).

The tunnel carries the workers' *own lab addresses*: policy routing sends every packet to a peer's
address through the tunnel (``ip rule not fwmark M table T``, ``T`` routing each peer /32 into the
WireGuard interface), while the encrypted UDP itself carries mark ``M`` and leaves by the NIC. Gloo
therefore needs no change — it keeps binding the node's address — and connections that were open
before the tunnel came up move into it.

**Strict mode** (nftables, per worker): a packet to a peer leaves only through the tunnel interface
or as marked WireGuard UDP; a packet from a peer is accepted only from the tunnel or as WireGuard
UDP. Everything else is dropped and counted. If the tunnel breaks (daemon gone, route gone, keys
wrong), collective traffic stops; it never falls back to plaintext.

Everything on a node runs through that node's executor (:class:`~ringfence.secure.layers.runtime.Runtime`):
the lab's namespaces and SSH hosts are driven by the same code. Keys are generated on the controller
and reach a daemon only through a pipe (``wg set … private-key /dev/stdin``), never a command line.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ringfence.enforce import nftables, nftrun
from ringfence.enforce.interface import EnforceError
from ringfence.evidence import EvidenceStore, RecordKind
from ringfence.policy.model import Layer
from ringfence.secure.layers.interface import (
    LayerError,
)
from ringfence.secure.layers.runtime import NftTable, Runtime, StateStore
from ringfence.secure.layers.wireguard import FWMARK, LISTEN_PORT, NFT_TABLE, SCOPE, TABLE, genkey, strict_ruleset
from ringfence.targets import ops
from ringfence.targets.interface import Site, TargetError

#: how long ``enable`` waits for every tunnel's first handshake (seconds; a prompted one takes one round trip)
HANDSHAKE_TIMEOUT_S = 20.0


def interface_name(site: Site) -> str:
    """The tunnel interface of a site (``<name>-wg``, within Linux's 15 characters)."""
    return f"{site.name}-wg"


@dataclass(frozen=True)
class WgPeerState:
    """One peer as ``wg show dump`` reports it."""

    public_key: str
    endpoint: str
    allowed_ips: str
    latest_handshake: int  # epoch seconds, 0 = never
    rx_bytes: int
    tx_bytes: int


@dataclass(frozen=True)
class WgEnabled:
    """What :func:`enable_wireguard` did: the nodes, their public keys, and each tunnel's first handshake."""

    nodes: tuple[str, ...]
    interface: str
    public_keys: dict[str, str]
    # "a<->b" → seconds from the prompt until both ends saw the handshake, None if they did not within the bound
    handshakes: dict[str, float | None] = field(default_factory=dict)

    def silent(self) -> list[str]:
        """The tunnels without a handshake: configured, but (strict mode) carrying nothing."""
        return sorted(t for t, s in self.handshakes.items() if s is None)


def _node_dir(store: StateStore, node: str) -> Path:
    return store.directory / "wg" / node


class Node:
    """One worker's daemon: start it, and run ``wg``/``ip`` inside its namespaces."""

    def __init__(self, rt: Runtime, node: str, *, label: str = "", ifname: str = "") -> None:
        self.rt, self.store, self.node = rt, rt.store, node
        self.ifname = ifname or interface_name(rt.site)
        self.label = label or f"wg-{node}"
        self.directory = _node_dir(self.store, node) if not label else self.store.directory / "wg" / label
        self.address = rt.site.address(node)

    def start(self, timeout: float = 10.0) -> int:
        """Start ``wireguard-go`` in a private mount namespace with this node's directory over ``/run``."""
        run_dir = self.directory / "run"
        self.rt.run(self.node, ["sh", "-c", 'umask 077; mkdir -p "$0"', str(run_dir)],
                    what=f"preparing WireGuard on {self.node}")
        # sh stays the parent (no exec) so its command line, which names our directory, identifies the group.
        script = 'mount --bind "$0/run" /run && wireguard-go -f "$1"'
        pid = self.rt.spawn(
            self.node,
            self.label,
            Layer.WIREGUARD.value,
            ["unshare", "-m", "--propagation", "private", "sh", "-c", script, str(self.directory), self.ifname],
        )
        sock = str(run_dir / "wireguard" / f"{self.ifname}.sock")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                waiting = ops.wait_for_files(self.rt.executor(self.node), [sock], seconds=0.5)
            except TargetError as exc:
                raise LayerError(f"cannot watch wireguard-go on {self.node}: {exc.message}") from exc
            if not waiting:
                return pid
            if self.rt.alive(self.label) is None:
                raise LayerError(f"wireguard-go in {self.node} exited: {self.rt.log_tail(self.node, self.label, 500)}")
        raise LayerError(f"wireguard-go in {self.node} did not create its control socket within {timeout:.0f}s")

    def pid(self) -> int:
        """The daemon's pid (its mount namespace is where ``wg`` must run)."""
        pid = self.rt.alive(self.label)
        if pid is None:
            raise LayerError(f"the WireGuard daemon of {self.node} is not running")
        return pid

    def wg(self, *args: str, stdin: bytes | None = None) -> str:
        """``wg ARGS`` against this node's daemon (inside its mount namespace, where our files are hidden by the
        bind mount over ``/run``: pass key material on ``stdin`` as ``/dev/stdin``)."""
        return self.rt.run(self.node, ["nsenter", "-t", str(self.pid()), "-m", "-n", "wg", *args],
                           what=f"wg on {self.node}", stdin=stdin)

    def set_private_key(self, path: Path) -> None:
        """Load the private key in ``path`` (0600) into the daemon through a pipe, never a command line."""
        self.wg("set", self.ifname, "private-key", "/dev/stdin", stdin=path.read_bytes())

    def ip(self, *args: str) -> str:
        """``ip ARGS`` on this node."""
        return self.rt.run(self.node, ["ip", *args], what=f"ip on {self.node}")

    def peers(self) -> list[WgPeerState]:
        """The peers of this node's interface (``wg show IF dump``)."""
        lines = self.wg("show", self.ifname, "dump").strip().splitlines()[1:]
        out = []
        for line in lines:
            f = line.split("\t")
            out.append(WgPeerState(f[0], f[2], f[3], int(f[4]), int(f[5]), int(f[6])))
        return out


def tunnel_name(a: str, b: str) -> str:
    """The name of the tunnel between two nodes, the same whichever end is named first."""
    x, y = sorted((a, b))
    return f"{x}<->{y}"


def await_handshakes(wnodes: dict[str, Node], public_keys: dict[str, str], timeout: float) -> dict[str, float | None]:
    """Prompt every tunnel's first handshake and wait, bounded, until both ends have seen it.

    WireGuard handshakes only when a packet is to be sent, so a tunnel just configured has proven nothing
    (and a probe sent at once waits out WireGuard's 5 s retry). A persistent keepalive makes each end send
    at once; it is switched off again afterwards, whatever happened.
    """
    names = sorted(wnodes)
    pairs = {tunnel_name(a, b): (a, b) for i, a in enumerate(names) for b in names[i + 1:]}
    node_of = {k: n for n, k in public_keys.items()}
    start = time.monotonic()
    got: dict[str, float | None] = dict.fromkeys(pairs)
    def keepalive(seconds: str) -> None:
        for n, w in wnodes.items():
            for m in names:
                if m != n:
                    w.wg("set", w.ifname, "peer", public_keys[m], "persistent-keepalive", seconds)

    try:
        keepalive("1")
        while time.monotonic() - start < timeout:
            seen = {(n, node_of.get(p.public_key, "")) for n, w in wnodes.items() for p in w.peers()
                    if p.latest_handshake > 0}  # fmt: skip
            for t, (a, b) in pairs.items():
                if got[t] is None and (a, b) in seen and (b, a) in seen:
                    got[t] = round(time.monotonic() - start, 3)
            if all(v is not None for v in got.values()):
                break
            time.sleep(0.2)
    finally:
        keepalive("0")
    return got


def _enforcement_blocks_tunnel(site: Site, node: str) -> bool:
    """True when ringfence's own enforcement table is loaded on ``node`` and does not admit the tunnel's
    UDP port outbound: enabling WireGuard then would black-hole the collective."""
    try:
        doc = nftrun.list_ruleset(site.executor(node), family="inet", table=nftables.TABLE)
    except EnforceError as exc:
        raise LayerError(f"{node}: cannot read the enforcement ruleset: {exc.message}") from exc
    return nftables.admits_outbound(doc, "udp", LISTEN_PORT) is False


def enable_wireguard(
    site: Site, nodes: Iterable[str], *, strict: bool = True, evidence: EvidenceStore | None = None,
    handshake_timeout: float = HANDSHAKE_TIMEOUT_S,
) -> WgEnabled:
    """Tunnel all traffic between ``nodes`` (workers) through WireGuard; with ``strict``, drop any that is not.

    Returns once every tunnel has handshaked, or ``handshake_timeout`` has passed: :meth:`WgEnabled.silent`
    names the tunnels that did not (the layer stays enabled, and strict mode keeps them closed).
    """
    chosen = sorted(set(nodes))
    if len(chosen) < 2:
        raise LayerError("WireGuard needs at least two nodes", hint="--nodes worker-0,worker-1")
    store = StateStore(site.name)
    rt = Runtime(site, store)
    if store.read().nodes.get(Layer.WIREGUARD.value):
        raise LayerError(f"WireGuard is already enabled on {site.name}", hint="disable it first")
    blocked = [n for n in chosen if _enforcement_blocks_tunnel(site, n)]
    if blocked:
        raise LayerError(
            f"ringfence enforcement on {', '.join(blocked)} does not approve the tunnel itself "
            f"(udp/{LISTEN_PORT} between the nodes): WireGuard would carry nothing and the job would stall",
            hint=f"approve it first, e.g. {{id: <job>-wireguard, from: {{job: <job>}}, to: {{job: <job>}}, "
            f"proto: udp, ports: '{LISTEN_PORT}-{LISTEN_PORT + 1}', class: collective}}, then `ringfence apply`",
        )
    wnodes = {n: Node(rt, n) for n in chosen}
    keys = {n: genkey(w.directory) for n, w in wnodes.items()}
    try:
        for w in wnodes.values():
            w.start()
        for n, w in wnodes.items():
            w.set_private_key(keys[n][0])
            w.wg("set", w.ifname, "listen-port", str(LISTEN_PORT), "fwmark", hex(FWMARK))
            for m, peer in wnodes.items():
                if m != n:
                    w.wg(
                        "set",
                        w.ifname,
                        "peer",
                        keys[m][1],
                        "allowed-ips",
                        f"{peer.address}/32",
                        "endpoint",
                        f"{peer.address}:{LISTEN_PORT}",
                    )
            w.ip("link", "set", w.ifname, "mtu", "1420", "up")
        for n, w in wnodes.items():
            for m, peer in wnodes.items():
                if m != n:
                    w.ip(
                        "route", "replace", f"{peer.address}/32", "dev", w.ifname, "table", str(TABLE), "src", w.address
                    )
            w.ip("rule", "add", "not", "fwmark", hex(FWMARK), "table", str(TABLE), "priority", "100")
        if strict:
            for n, w in wnodes.items():
                rt.add_table(
                    NftTable(n, "inet", NFT_TABLE, Layer.WIREGUARD.value),
                    strict_ruleset(w.ifname, [p.address for m, p in wnodes.items() if m != n]),
                )
    except BaseException:
        disable_wireguard(site)
        raise
    pubs = {n: k[1] for n, k in keys.items()}
    handshakes = await_handshakes(wnodes, pubs, handshake_timeout)
    st = store.read()
    store.update(
        nodes={**st.nodes, Layer.WIREGUARD.value: chosen},
        info={
            **st.info,
            "wireguard": {
                "interface": interface_name(site),
                "public_keys": pubs,
                "strict": strict,
                "listen_port": LISTEN_PORT,
            },
        },
    )
    if evidence is not None:
        for n, pub in pubs.items():
            evidence.append(
                RecordKind.KEY_EVENT,
                source="secure:wireguard",
                subject=f"node {n}",
                data={"event": "issued", "public_key": pub},
            )
        evidence.append(
            RecordKind.ACTION,
            source="secure:wireguard",
            subject=f"{site.kind} {site.name}",
            data={"event": "enabled", "nodes": chosen, "strict": strict, "handshakes": handshakes},
        )
    return WgEnabled(tuple(chosen), interface_name(site), pubs, handshakes)


def set_collective_class(site: Site, classes: Iterable[str]) -> None:
    """Record that WireGuard protects ``classes`` (the collective) in the site's layer state."""
    store = StateStore(site.name)
    st = store.read()
    store.update(classes={**st.classes, **dict.fromkeys(classes, Layer.WIREGUARD.value)})


def disable_wireguard(site: Site) -> None:
    """Remove rules, routes, strict tables and daemons (the interfaces vanish with their daemons)."""
    store = StateStore(site.name)
    rt = Runtime(site, store)
    st = store.read()
    layer = Layer.WIREGUARD.value
    nodes = st.nodes.get(layer, []) or [p.node for p in st.processes if p.layer == layer]
    for node in sorted(set(nodes)):
        ex = site.executor(node)
        try:
            # either may already be gone (a half-enabled tunnel): their exit status is not the point
            ex.run(["ip", "rule", "del", "not", "fwmark", hex(FWMARK), "table", str(TABLE)], timeout=20)
            ex.run(["ip", "route", "flush", "table", str(TABLE)], timeout=20)
        except TargetError as exc:
            raise LayerError(f"cannot remove WireGuard routing on {node}: {exc.message}") from exc
    rt.drop_tables(layer=Layer.WIREGUARD.value)
    rt.stop(layer=Layer.WIREGUARD.value)
    for node in sorted(set(nodes)):
        try:
            ops.remove_tree(site.executor(node), str(store.directory / "wg"))
        except TargetError as exc:
            raise LayerError(f"cannot remove the WireGuard files on {node}: {exc.message}") from exc
    shutil.rmtree(store.directory / "wg", ignore_errors=True)
    st = store.read()
    store.update(
        classes={c: v for c, v in st.classes.items() if v != Layer.WIREGUARD.value},
        nodes={k: v for k, v in st.nodes.items() if k != Layer.WIREGUARD.value},
        info={k: v for k, v in st.info.items() if k != "wireguard"},
    )


def strict_counters(site: Site, node: str) -> dict[str, int]:
    """Packets the strict mode dropped at ``node`` (``plaintext_out``, ``plaintext_in``)."""
    rt = Runtime(site)
    out: dict[str, int] = {}
    for name in ("plaintext_out", "plaintext_in"):
        text = rt.run(
            node,
            ["nft", "list", "counter", "inet", NFT_TABLE, name],
            what=f"reading strict-mode counters on {node}",
        )
        words = text.split()
        out[name] = int(words[words.index("packets") + 1]) if "packets" in words else 0
    return out


def node_handle(site: Site, node: str) -> Node:
    """The running daemon of ``node``."""
    return Node(Runtime(site), node)


def random_public_key() -> str:
    """A valid-looking public key nobody holds the private key of (for the mismatch drill)."""
    priv = subprocess.run(["wg", "genkey"], capture_output=True, check=True).stdout
    return subprocess.run(["wg", "pubkey"], input=priv, capture_output=True, check=True).stdout.decode().strip()


@dataclass(frozen=True)
class WgRotated:
    """One static-key rotation: the node, its old and new public keys, the retired private key (0600)."""

    node: str
    old_public: str
    new_public: str
    retired_key: Path


def rotate_wireguard(site: Site, *, evidence: EvidenceStore | None = None,
                     nodes: Iterable[str] | None = None) -> tuple[WgRotated, ...]:
    """Give every tunnelled node (or those of ``nodes``) a new static key while traffic runs (make-before-break
    where WireGuard allows).

    Per node: a new key; every peer learns the new public key (which takes over the allowed IPs at
    once), the node switches to it, the peers forget the old key. The old private key is moved to
    ``retired/`` for the refusal proof (:func:`probe_old_key`) and deleted by ``forget_retired``.
    """
    store = StateStore(site.name)
    rt = Runtime(site, store)
    st = store.read()
    info = st.info.get("wireguard")
    if not info:
        raise LayerError(f"WireGuard is not enabled on {site.name}")
    pubs: dict[str, str] = dict(info["public_keys"])
    handles = {n: Node(rt, n) for n in pubs}
    chosen = set(nodes) if nodes is not None else set(pubs)
    unknown = sorted(chosen - set(pubs))
    if unknown:
        raise LayerError(f"{', '.join(unknown)} is not in the WireGuard tunnel on {site.name}",
                         hint=f"tunnelled: {', '.join(sorted(pubs))}")
    out: list[WgRotated] = []
    for node, w in handles.items():
        if node not in chosen:
            continue
        retired = store.directory / "retired" / f"wg-{node}"
        retired.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.replace(w.directory / "private.key", retired / "private.key")  # moved, never copied
        new_path, new_pub = genkey(w.directory)
        for other, peer in handles.items():
            if other != node:
                peer.wg(
                    "set",
                    peer.ifname,
                    "peer",
                    new_pub,
                    "allowed-ips",
                    f"{w.address}/32",
                    "endpoint",
                    f"{w.address}:{LISTEN_PORT}",
                )
        w.set_private_key(new_path)
        for other, peer in handles.items():
            if other != node:
                peer.wg("set", peer.ifname, "peer", pubs[node], "remove")
        out.append(WgRotated(node, pubs[node], new_pub, retired / "private.key"))
        pubs[node] = new_pub
        if evidence is not None:
            evidence.append(
                RecordKind.KEY_EVENT,
                source="secure:wireguard",
                subject=f"node {node}",
                data={"event": "rotated", "old_public_key": out[-1].old_public, "new_public_key": new_pub},
            )
    store.update(info={**st.info, "wireguard": {**info, "public_keys": pubs}})
    return tuple(out)


def probe_old_key(site: Site, node: str, retired_key: Path, peer: str, *, seconds: float = 3.0) -> bool:
    """Whether ``peer`` completes a handshake with ``node``'s *retired* key (it must not).

    A second, throwaway WireGuard interface in ``node`` holding the old key initiates to ``peer``
    (persistent keepalive forces the handshake); after ``seconds`` its latest handshake is read.
    """
    rt = Runtime(site)
    probe = Node(rt, node, label=f"wgprobe-{node}", ifname=f"{site.name}-wgp")
    target = Node(rt, peer)
    target_pub = target.wg("show", target.ifname, "public-key").strip()
    probe.start()
    try:
        probe.set_private_key(retired_key)
        probe.wg(
            "set",
            probe.ifname,
            "listen-port",
            str(LISTEN_PORT + 1),
            "fwmark",
            hex(FWMARK),
            "peer",
            target_pub,
            "allowed-ips",
            "10.255.255.2/32",
            "endpoint",
            f"{target.address}:{LISTEN_PORT}",
            "persistent-keepalive",
            "1",
        )
        probe.ip("link", "set", probe.ifname, "up")
        time.sleep(seconds)
        return any(p.latest_handshake > 0 for p in probe.peers())
    finally:
        rt.stop(labels={probe.label})


__all__ = [
    "HANDSHAKE_TIMEOUT_S",
    "SCOPE",
    "Node",
    "WgEnabled",
    "WgPeerState",
    "WgRotated",
    "await_handshakes",
    "disable_wireguard",
    "enable_wireguard",
    "interface_name",
    "node_handle",
    "probe_old_key",
    "random_public_key",
    "rotate_wireguard",
    "set_collective_class",
    "strict_counters",
    "tunnel_name",
]
