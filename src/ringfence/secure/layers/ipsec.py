"""IPsec (ESP, IKEv2) per host pair: render strongSwan ``swanctl.conf`` authenticated by the workload PKI.

ESP in transport mode between two hosts encrypts every IP packet between them (TCP and UDP alike),
across any number of routers; it does not touch RDMA verbs traffic, which bypasses the host IP
stack. IKEv2 authenticates each host with its ringfence workload certificate (SPIFFE identity as the
IKE identity) and rekeys the child SAs on a timer without interrupting traffic. ``start_action =
trap`` installs the policy first, so a packet for the peer waits for the SA instead of leaving in
plaintext — the fail-closed property; ``close_action = trap`` keeps it after a failure.

Recognised on the wire as IP protocol 50 (``protocol`` ``esp``) or UDP 4500 (NAT traversal).
"""

from __future__ import annotations

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

# ESP AEAD proposals strongSwan accepts, keyed by the cipher names renderers share.
_ESP = {
    "gcm-aes-256": "aes256gcm16-x25519",
    "gcm-aes-128": "aes128gcm16-x25519",
    "chacha20-poly1305": "chacha20poly1305-x25519",
}
_IKE = {
    "gcm-aes-256": "aes256gcm16-prfsha384-x25519",
    "gcm-aes-128": "aes128gcm16-prfsha256-x25519",
    "chacha20-poly1305": "chacha20poly1305-prfsha256-x25519",
}

SCOPE = LayerScope(
    layer=Layer.IPSEC,
    reach=Reach.HOST,
    transports=frozenset({Transport.TCP, Transport.UDP}),
    crosses_routers=True,
    rotates_live=True,
    key_model="IKEv2 with the workload certificates; child SAs rekeyed on a timer (make-before-break)",
    wire_protocols=("esp", "ipsec"),
    notes="host IP stack only: RDMA (InfiniBand verbs, RoCE) bypasses it and is not covered",
)


def _conn_name(a: str, b: str) -> str:
    return f"rf-{a}-{b}"


class IpsecLayer:
    """Renderer and support probe for IPsec (strongSwan)."""

    name = Layer.IPSEC
    scope = SCOPE

    def render(self, pairs: tuple[tuple[Endpoint, Endpoint], ...], options: RenderOptions) -> tuple[Rendered, ...]:
        """One ``swanctl.conf`` per node with one transport-mode connection per peer."""
        if options.cipher not in _ESP:
            raise LayerError(f"IPsec cipher {options.cipher!r} is not one of {', '.join(_ESP)}")
        conns: dict[str, list[str]] = {}
        nodes: dict[str, Endpoint] = {}
        for a, b in pairs:
            for me, peer in ((a, b), (b, a)):
                if me.identity is None or peer.identity is None:
                    raise LayerError(
                        f"IPsec between {a.node} and {b.node} needs both workload identities "
                        "(the IKE identities are the SPIFFE URIs of their certificates)"
                    )
                nodes[me.node] = me
                name = _conn_name(*sorted((me.node, peer.node)))
                conns.setdefault(me.node, []).append(f"""  {name} {{
    version = 2
    local_addrs = {me.address}
    remote_addrs = {peer.address}
    proposals = {_IKE[options.cipher]}
    rekey_time = {options.rekey}
    local {{
      auth = pubkey
      certs = {me.node}.pem
      id = "{me.identity}"
    }}
    remote {{
      auth = pubkey
      id = "{peer.identity}"
      cacerts = ca.pem
    }}
    children {{
      {name} {{
        mode = transport
        local_ts = {me.address}/32
        remote_ts = {peer.address}/32
        esp_proposals = {_ESP[options.cipher]}
        rekey_time = {options.rekey}
        start_action = trap
        close_action = trap
        dpd_action = trap
      }}
    }}
  }}""")
        out: list[Rendered] = []
        for node in sorted(nodes):
            text = (
                f"# strongSwan swanctl.conf for {node}: ESP transport mode to every peer\n"
                "connections {\n" + "\n".join(conns[node]) + "\n}\n"
            )
            out.append(
                Rendered(
                    layer=Layer.IPSEC,
                    node=node,
                    files=(RenderedFile("swanctl/swanctl.conf", text),),
                    apply=(
                        f"install -m 0644 {node}.pem /etc/swanctl/x509/{node}.pem",
                        f"install -m 0600 {node}.key /etc/swanctl/private/{node}.key",
                        "install -m 0644 ca.pem /etc/swanctl/x509ca/ca.pem",
                        "install -m 0644 swanctl/swanctl.conf /etc/swanctl/swanctl.conf",
                        "swanctl --load-all",
                    ),
                    notes=(
                        "certificates: `ringfence pki issue --node NAME` for each host; keys stay 0600",
                        "needs the kernel's xfrm with ESP AEAD (rfc4106(gcm(aes))); see `ringfence encrypt support`",
                    ),
                )
            )
        return tuple(out)

    def support(self, executor: Executor) -> Support:
        """Try to install an ESP AEAD state in a throwaway namespace."""
        key = "0x" + "11" * 36  # 32-byte AES key + 4-byte salt; a probe key, never used for traffic
        return probe_kernel(
            executor,
            Layer.IPSEC,
            (
                f'ip -n "$NS" xfrm state add src 10.255.0.1 dst 10.255.0.2 proto esp spi 0x100 mode transport '
                f"aead 'rfc4106(gcm(aes))' {key} 128",
            ),
            what="IPsec ESP with AES-GCM (xfrm + esp4 + the gcm AEAD)",
        )


LAYER = IpsecLayer()

__all__ = ["LAYER", "SCOPE", "IpsecLayer"]
