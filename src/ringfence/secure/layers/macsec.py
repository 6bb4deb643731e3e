"""MACsec (IEEE 802.1AE) per link: render ``ip macsec`` configuration with static SAKs and offload flags.

MACsec encrypts every Ethernet frame on one link, so it suits the collective path between hosts on
one L2 segment (or each host–switch link, where the switch terminates it). Its reach is a *link*:
a frame is decrypted at every port that terminates the secure channel, so a routed path is
protected end to end only if every hop is, which ringfence cannot see — the scope check reports a
routed path as not covered. The rendered configuration uses static keys (``ip macsec``), one
transmit SA per node and one receive channel per peer; keys live in 0600 files and are read by the
apply script, never written into the commands. Production fleets usually derive SAKs with MKA
(``wpa_supplicant`` with ``macsec_policy=1``); the static form is what the kernel needs and what a
hardware offload (``offload phy|mac``) accepts.

Recognised on the wire as EtherType 0x88E5 (``protocol`` ``macsec``).
"""

from __future__ import annotations

import secrets

from ringfence.policy.model import Layer
from ringfence.secure.layers._probe import probe_kernel
from ringfence.secure.layers.interface import (
    Endpoint,
    LayerError,
    LayerScope,
    Reach,
    Rendered,
    RenderedFile,
    RenderOptions,
    Support,
    Transport,
)
from ringfence.targets.interface import Executor

_CIPHERS = {"gcm-aes-128": 32, "gcm-aes-256": 64, "gcm-aes-xpn-128": 32, "gcm-aes-xpn-256": 64}  # hex digits
_OFFLOADS = ("off", "phy", "mac")

SCOPE = LayerScope(
    layer=Layer.MACSEC,
    reach=Reach.LINK,
    transports=frozenset({Transport.TCP, Transport.UDP, Transport.RDMA}),  # RoCE frames are Ethernet frames too
    crosses_routers=False,
    rotates_live=True,  # a new SA (an: 0..3) can be installed and switched to without dropping the link
    key_model="SAK per link direction (static here, MKA-derived in production), rotated by switching the encoding SA",
    wire_protocols=("macsec",),
    notes="every Ethernet frame of the link, RoCE included; decrypted at each port that terminates the channel",
)


def _iface(node: Endpoint) -> str:
    # Linux interface names are at most 15 characters; "ms" + the parent's tail keeps it unique per parent.
    return ("ms" + node.interface)[:15]


class MacsecLayer:
    """Renderer and support probe for MACsec."""

    name = Layer.MACSEC
    scope = SCOPE

    def render(self, pairs: tuple[tuple[Endpoint, Endpoint], ...], options: RenderOptions) -> tuple[Rendered, ...]:
        """One ``ip macsec`` script per node: a secure channel on the node's NIC, a receive channel per peer."""
        if options.cipher not in _CIPHERS:
            raise LayerError(f"MACsec cipher {options.cipher!r} is not one of {', '.join(_CIPHERS)}")
        if options.offload not in _OFFLOADS:
            raise LayerError(f"MACsec offload {options.offload!r} is not one of {', '.join(_OFFLOADS)}")
        peers: dict[str, list[Endpoint]] = {}
        nodes: dict[str, Endpoint] = {}
        for a, b in pairs:
            for x, y in ((a, b), (b, a)):
                if x.mac is None:
                    raise LayerError(
                        f"MACsec needs the MAC address of {x.node}'s {x.interface} (a receive channel "
                        "is keyed by the peer's SCI, which is its MAC and port)"
                    )
                nodes[x.node] = x
                peers.setdefault(x.node, []).append(y)
        width = _CIPHERS[options.cipher]
        keys = {n: secrets.token_hex(width // 2) for n in nodes}  # one transmit SAK per node
        out: list[Rendered] = []
        for name in sorted(nodes):
            me = nodes[name]
            dev = _iface(me)
            files = [RenderedFile(f"macsec/tx-{name}.key", keys[name] + "\n", secret=True)]
            lines = [
                "#!/bin/sh",
                f"# MACsec on {me.interface} of {name}: {options.cipher}, offload {options.offload}",
                "set -eu",
                'KEYS="$(dirname "$0")"',
                f"ip link add link {me.interface} name {dev} type macsec port 1 encrypt on "
                f"cipher {options.cipher} replay on window 0 offload {options.offload}",
                f'ip macsec add {dev} tx sa 0 pn 1 on key 01 "$(cat "$KEYS/tx-{name}.key")"',
            ]
            for i, peer in enumerate(sorted(peers[name], key=lambda e: e.node)):
                files.append(RenderedFile(f"macsec/tx-{peer.node}.key", keys[peer.node] + "\n", secret=True))
                lines += [
                    f"ip macsec add {dev} rx port 1 address {peer.mac}",
                    f"ip macsec add {dev} rx port 1 address {peer.mac} sa 0 pn 1 on key {i + 2:02x} "
                    f'"$(cat "$KEYS/tx-{peer.node}.key")"',
                ]
            lines += [f"ip link set {dev} up", f"ip addr add {me.address}/32 dev {dev}"]
            files.append(RenderedFile("macsec/apply.sh", "\n".join(lines) + "\n"))
            out.append(
                Rendered(
                    layer=Layer.MACSEC,
                    node=name,
                    files=tuple(files),
                    apply=("sh macsec/apply.sh",),
                    notes=(
                        f"offload {options.offload}: 'phy' or 'mac' only where the NIC driver supports MACsec offload; "
                        "check with `ip macsec offload` after applying",
                        "static SAKs: rotate by installing sa 1 with a new key and switching `encodingsa`",
                    ),
                )
            )
        return tuple(out)

    def support(self, executor: Executor) -> Support:
        """Try to create a MACsec link on a veth inside a throwaway namespace."""
        return probe_kernel(
            executor,
            Layer.MACSEC,
            (
                'ip -n "$NS" link add rfpa type veth peer name rfpb',
                'ip -n "$NS" link add link rfpa name rfpm type macsec port 1 encrypt on',
            ),
            what="the macsec link type (kernel module macsec)",
        )


LAYER = MacsecLayer()

__all__ = ["LAYER", "SCOPE", "MacsecLayer"]
