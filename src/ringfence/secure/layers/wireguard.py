"""WireGuard on the collective path: what it is (scope), what it renders for real hosts, its strict-mode ruleset.

Pure: nothing here runs anything on a host (key generation aside, on the controller). How the layer
runs on a site's hosts — daemons, keys through pipes, routes, strict mode — is
:mod:`ringfence.secure.layers.wireguard_run`, over executors only.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from ringfence.policy.model import Layer
from ringfence.secure.layers.interface import (
    Endpoint,
    LayerScope,
    Reach,
    Rendered,
    RenderedFile,
    RenderOptions,
    Support,
    Transport,
)
from ringfence.secure.layers.runtime import run_local
from ringfence.targets.interface import Executor, TargetError

LISTEN_PORT = 51820
FWMARK = 0x5247
TABLE = 5247
NFT_TABLE = "rf_wg"

SCOPE = LayerScope(
    layer=Layer.WIREGUARD,
    reach=Reach.HOST,
    transports=frozenset({Transport.TCP, Transport.UDP}),
    crosses_routers=True,
    rotates_live=True,
    key_model="Curve25519 static key per host, session keys renegotiated every 2 minutes; static keys rotated "
    "by re-keying peers",
    wire_protocols=("wireguard",),
    notes="host IP stack only: RDMA (InfiniBand verbs, RoCE) bypasses it and is not covered",
)


def genkey(directory: Path, name: str = "private.key") -> tuple[Path, str]:
    """A new private key file (0600) in ``directory`` and its public key."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    priv = run_local(["wg", "genkey"], what="generating a WireGuard key").strip()
    path = directory / name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(priv + "\n")
    pub = subprocess.run(["wg", "pubkey"], input=priv.encode(), capture_output=True, check=True).stdout.decode().strip()
    return path, pub


def strict_ruleset(ifname: str, peers: list[str]) -> str:
    addrs = ", ".join(peers)
    ports = f"{LISTEN_PORT}-{LISTEN_PORT + 1}"  # the tunnel, and the old-key probe of rotation checks
    return (
        f"table inet {NFT_TABLE} {{}}\ndelete table inet {NFT_TABLE}\n"
        f"table inet {NFT_TABLE} {{\n"
        f"  chain out {{ type filter hook output priority 0; policy accept;\n"
        f"    ip daddr {{ {addrs} }} meta mark {FWMARK:#x} udp sport {ports} udp dport {ports} accept\n"
        f'    ip daddr {{ {addrs} }} oifname != "{ifname}" counter name plaintext_out drop\n  }}\n'
        f"  chain in {{ type filter hook input priority 0; policy accept;\n"
        f"    ip saddr {{ {addrs} }} udp sport {ports} udp dport {ports} accept\n"
        f'    ip saddr {{ {addrs} }} iifname != "{ifname}" counter name plaintext_in drop\n  }}\n'
        f"  counter plaintext_out {{}}\n  counter plaintext_in {{}}\n}}\n"
    )


class WireguardLayer:
    """Renderer and support probe for WireGuard on real hosts."""

    name = Layer.WIREGUARD
    scope = SCOPE

    def render(self, pairs: tuple[tuple[Endpoint, Endpoint], ...], options: RenderOptions) -> tuple[Rendered, ...]:
        """A ``wg setconf`` file per node (private key inside, 0600) and the commands for strict mode."""
        peers: dict[str, dict[str, Endpoint]] = {}
        ends: dict[str, Endpoint] = {}
        for a, b in pairs:
            ends[a.node], ends[b.node] = a, b
            peers.setdefault(a.node, {})[b.node] = b
            peers.setdefault(b.node, {})[a.node] = a
        key_dir = options.extra.get("key_dir")
        keys = {n: genkey(Path(key_dir) / n) for n in ends} if key_dir else {}
        out = []
        for node in sorted(ends):
            me = ends[node]
            priv = keys[node][0].read_text().strip() if node in keys else "<run: wg genkey>"
            lines = ["[Interface]", f"PrivateKey = {priv}", f"ListenPort = {LISTEN_PORT}", f"FwMark = {FWMARK:#x}", ""]
            for peer in sorted(peers[node].values(), key=lambda e: e.node):
                pub = keys[peer.node][1] if peer.node in keys else f"<public key of {peer.node}>"
                lines += [
                    "[Peer]",
                    f"PublicKey = {pub}",
                    f"AllowedIPs = {peer.address}/32",
                    f"Endpoint = {peer.address}:{LISTEN_PORT}",
                    "",
                ]
            addrs = [p.address for p in peers[node].values()]
            apply = (
                "ip link add wg0 type wireguard || wireguard-go wg0",
                "wg setconf wg0 wireguard/wg0.conf",
                "ip link set wg0 mtu 1420 up",
                *(f"ip route replace {a}/32 dev wg0 table {TABLE} src {me.address}" for a in addrs),
                f"ip rule add not fwmark {FWMARK:#x} table {TABLE} priority 100",
                "nft -f wireguard/strict.nft",
            )
            out.append(
                Rendered(
                    Layer.WIREGUARD,
                    node,
                    (
                        RenderedFile("wireguard/wg0.conf", "\n".join(lines), secret=True),
                        RenderedFile("wireguard/strict.nft", strict_ruleset("wg0", addrs)),
                    ),
                    apply,
                    ("strict mode drops any packet to a peer that does not use the tunnel",),
                )
            )
        return tuple(out)

    def support(self, executor: Executor) -> Support:
        """The kernel module, else ``wireguard-go`` with ``/dev/net/tun``."""
        argv = (
            "sh",
            "-c",
            "command -v wg >/dev/null || { echo 'wg (wireguard-tools) missing'; exit 1; }; "
            "NS=rfprobe$$; ip netns add $NS || exit 1; trap 'ip netns del $NS' EXIT; "
            "ip -n $NS link add rfwg type wireguard 2>/dev/null && { echo kernel; exit 0; }; "
            "command -v wireguard-go >/dev/null && [ -c /dev/net/tun ] && { echo userspace; exit 0; }; "
            "echo 'neither the wireguard module nor wireguard-go with /dev/net/tun'; exit 1",
        )
        try:
            res = executor.run(list(argv), timeout=20.0)
        except TargetError as exc:
            return Support(Layer.WIREGUARD, executor.name, False, f"could not run the probe: {exc.message}", argv)
        text = res.stdout.decode(errors="replace").strip()
        if res.returncode == 0 and text == "kernel":
            return Support(Layer.WIREGUARD, executor.name, True, "the kernel has WireGuard", argv)
        if res.returncode == 0:
            return Support(
                Layer.WIREGUARD,
                executor.name,
                True,
                "no kernel module; userspace wireguard-go with /dev/net/tun (slower: ~0.4 Gbit/s a core)",
                argv,
            )
        return Support(Layer.WIREGUARD, executor.name, False, text or "probe failed", argv)


LAYER = WireguardLayer()


__all__ = [
    "FWMARK",
    "LAYER",
    "LISTEN_PORT",
    "NFT_TABLE",
    "SCOPE",
    "TABLE",
    "WireguardLayer",
    "genkey",
    "strict_ruleset",
]
