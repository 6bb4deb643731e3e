"""IPsec (ESP, IKEv2) per host pair: render strongSwan configuration authenticated by the cluster PKI.

Two flavours, both pure text (nothing here runs anything):

* **kernel IPsec** (:class:`IpsecLayer`, ``encrypt render``) for real hosts: ESP in transport mode
  between two hosts, ``start_action = trap`` so a packet for the peer waits for the SA instead of
  leaving in plaintext, ``close_action = trap`` to keep that after a failure.
* **userspace IPsec** (:func:`charon_conf`, :func:`libipsec_swanctl_conf`, :func:`strict_ruleset`) for
  hosts whose kernel has no ESP (the lab's): strongSwan's ``kernel-libipsec`` plugin does ESP in the
  daemon through a TUN device (``ipsec0``). libipsec has no transport mode, so each pair is a
  host-to-host *tunnel* whose traffic selectors are the two addresses (``allow_peer_ts``); strongSwan
  5.9.8 always encapsulates it in UDP (ESP-in-UDP on 4500; raw ESP needs 5.9.11+). libipsec raises no
  acquire for a trap policy, so SAs are started at load (the lower-named node of a pair initiates) and
  the fail-closed property comes from libipsec dropping packets that match a policy without an SA and
  from the strict nftables ruleset (:func:`strict_ruleset`) dropping anything to a peer that is not in
  the tunnel. :mod:`ringfence.secure.layers.ipsec_run` runs it.

Either way it encrypts every IP packet between the hosts (TCP and UDP alike) across any number of
routers; it does not touch RDMA verbs traffic, which bypasses the host IP stack. IKEv2 authenticates
each host with its certificate from the cluster CA; the IKE identity is the certificate's subject DN
(``CN=<SPIFFE URI>``, which is how ringfence's PKI names a subject: strongSwan reads a bare URI as an
FQDN, which no certificate of ours carries).

Recognised on the wire as IP protocol 50 (``protocol`` ``esp``) or UDP 4500 (NAT traversal, libipsec).
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
from ringfence.targets.interface import Executor, TargetError

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


#: libipsec marks its IKE and ESP-in-UDP sockets with this, and the routes it adds skip marked packets.
FWMARK = 0x42
#: strongSwan's routing table for the routes it installs into the TUN device (its default number).
TABLE = 220
NFT_TABLE = "rf_ipsec"
IKE_PORTS = (500, 4500)
TUN_GLOB = "ipsec*"  # libipsec names its TUN device ``ipsec%d`` (not configurable in 5.9.8)
#: the plugins charon loads for userspace IPsec, nothing else (kernel-libipsec before kernel-netlink, so its
#: IPsec backend is the one registered; kernel-netlink still provides addresses and routes).
CHARON_PLUGINS = (
    "random nonce x509 revocation constraints pubkey pkcs1 pkcs8 pem openssl gcm aes sha2 hmac kdf "
    "kernel-libipsec kernel-netlink socket-default vici"
)
SWANCTL_PLUGINS = "pem pkcs1 pkcs8 x509 openssl revocation constraints pubkey random nonce"


def ike_id(identity: str) -> str:
    """The IKE identity of a ringfence certificate: its subject DN, ``CN=<SPIFFE URI>``."""
    return f"CN={identity}"


def _connection(me: Endpoint, peer: Endpoint, options: RenderOptions, *, mode: str, actions: tuple[str, str, str],
                certs: str, child_rekey: str | None = None) -> str:
    if me.identity is None or peer.identity is None:
        raise LayerError(
            f"IPsec between {me.node} and {peer.node} needs both workload identities "
            "(the IKE identities are the subject DNs of their certificates, CN=<SPIFFE URI>)"
        )
    name = _conn_name(*sorted((me.node, peer.node)))
    start, close, dpd = actions
    # an initiator keeps trying (a peer restarting, a credential restored after a drill); the default gives up
    retry = "\n    keyingtries = 0" if start == "start" else ""
    return f"""  {name} {{
    version = 2
    local_addrs = {me.address}
    remote_addrs = {peer.address}
    proposals = {_IKE[options.cipher]}
    rekey_time = {options.rekey}
    dpd_delay = 10s
    mobike = no{retry}
    local {{
      auth = pubkey
      certs = {certs}
      id = "{ike_id(me.identity)}"
    }}
    remote {{
      auth = pubkey
      id = "{ike_id(peer.identity)}"
      cacerts = ca.pem
      revocation = strict
    }}
    children {{
      {name} {{
        mode = {mode}
        local_ts = {me.address}/32
        remote_ts = {peer.address}/32
        esp_proposals = {_ESP[options.cipher]}
        rekey_time = {child_rekey or options.rekey}
        start_action = {start}
        close_action = {close}
        dpd_action = {dpd}
      }}
    }}
  }}"""


def _check_cipher(options: RenderOptions) -> None:
    if options.cipher not in _ESP:
        raise LayerError(f"IPsec cipher {options.cipher!r} is not one of {', '.join(_ESP)}")


def libipsec_swanctl_conf(me: Endpoint, peers: tuple[Endpoint, ...], options: RenderOptions) -> str:
    """``swanctl.conf`` of ``me`` for userspace IPsec: one host-to-host tunnel per peer.

    The node whose name sorts first in a pair initiates at load and restarts the SA when it closes or
    its peer stops answering; the other only responds (both initiating would make duplicate SAs).
    ``options.extra["child_rekey"]`` sets a CHILD SA rekey time of its own (drills use short ones).
    """
    _check_cipher(options)
    conns = []
    for peer in sorted(peers, key=lambda e: e.node):
        initiator = me.node < peer.node
        actions = ("start", "start", "restart") if initiator else ("none", "none", "clear")
        conns.append(_connection(me, peer, options, mode="tunnel", actions=actions, certs="node.pem",
                                 child_rekey=options.extra.get("child_rekey")))
    return (f"# strongSwan swanctl.conf for {me.node}: userspace ESP (kernel-libipsec) tunnels, host to host\n"
            "connections {\n" + "\n".join(conns) + "\n}\n")


def charon_conf(directory: str) -> str:
    """``strongswan.conf`` for one ``charon-systemd`` with kernel-libipsec whose files all live in ``directory``.

    Its own vici socket and log there (no PID file: charon-systemd writes none), only the plugins it
    needs, the host-to-host settings (``allow_peer_ts``, the fwmark pair that keeps IKE/ESP-in-UDP out
    of the routes into the tunnel) and make-before-break reauthentication (no gap on certificate
    rotation). Read through ``STRONGSWAN_CONF`` by the daemon and by ``swanctl`` alike.
    """
    return f"""# charon-systemd with userspace ESP (kernel-libipsec); written by ringfence
charon-systemd {{
  load = {CHARON_PLUGINS}
  make_before_break = yes
  routing_table = {TABLE}
  filelog {{
    rf {{
      path = {directory}/charon.log
      default = 1
      ike = 2
      flush_line = yes
      time_format = %s
    }}
  }}
  journal {{
    default = -1
  }}
  plugins {{
    vici {{
      socket = unix://{directory}/charon.vici
    }}
    kernel-libipsec {{
      allow_peer_ts = yes
    }}
    kernel-netlink {{
      fwmark = !{FWMARK:#x}
    }}
    socket-default {{
      fwmark = {FWMARK:#x}
    }}
  }}
}}
swanctl {{
  load = {SWANCTL_PLUGINS}
  socket = unix://{directory}/charon.vici
}}
"""


def strict_ruleset(peers: list[str]) -> str:
    """nftables table ``rf_ipsec``: traffic to/from ``peers`` only through the tunnel, else dropped and counted.

    Allowed outside the tunnel: IKE and ESP-in-UDP (UDP 500/4500) — outbound only when charon's socket
    marked it. A failed, missing or deleted SA therefore stops the collective; it never leaves in clear.
    """
    addrs = ", ".join(peers)
    ports = ", ".join(str(p) for p in IKE_PORTS)
    return (
        f"table inet {NFT_TABLE} {{}}\ndelete table inet {NFT_TABLE}\n"
        f"table inet {NFT_TABLE} {{\n"
        f"  chain out {{ type filter hook output priority 0; policy accept;\n"
        f"    ip daddr {{ {addrs} }} meta mark {FWMARK:#x} udp sport {{ {ports} }} udp dport {{ {ports} }} accept\n"
        f'    ip daddr {{ {addrs} }} oifname != "{TUN_GLOB}" counter name plaintext_out drop\n  }}\n'
        f"  chain in {{ type filter hook input priority 0; policy accept;\n"
        f"    ip saddr {{ {addrs} }} udp sport {{ {ports} }} udp dport {{ {ports} }} accept\n"
        f'    ip saddr {{ {addrs} }} iifname != "{TUN_GLOB}" counter name plaintext_in drop\n  }}\n'
        f"  counter plaintext_out {{}}\n  counter plaintext_in {{}}\n}}\n"
    )


class IpsecLayer:
    """Renderer and support probe for IPsec (strongSwan)."""

    name = Layer.IPSEC
    scope = SCOPE

    def render(self, pairs: tuple[tuple[Endpoint, Endpoint], ...], options: RenderOptions) -> tuple[Rendered, ...]:
        """One ``swanctl.conf`` per node with one transport-mode connection per peer (kernel IPsec)."""
        _check_cipher(options)
        conns: dict[str, list[str]] = {}
        nodes: dict[str, Endpoint] = {}
        for a, b in pairs:
            for me, peer in ((a, b), (b, a)):
                nodes[me.node] = me
                conns.setdefault(me.node, []).append(
                    _connection(me, peer, options, mode="transport", actions=("trap", "trap", "trap"),
                                certs=f"{me.node}.pem"))
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
                        "install -m 0644 ca.crl /etc/swanctl/x509crl/ca.crl",
                        "install -m 0644 swanctl/swanctl.conf /etc/swanctl/swanctl.conf",
                        "swanctl --load-all",
                    ),
                    notes=(
                        "certificates: `ringfence pki issue --node NAME` for each host; keys stay 0600",
                        "revocation = strict: install the CA's CRL (ca.crl) or no peer authenticates",
                        "needs the kernel's xfrm with ESP AEAD (rfc4106(gcm(aes))); see `ringfence encrypt support`; "
                        "without it, the lab's userspace flavour (kernel-libipsec) runs the same IKE, slower",
                    ),
                )
            )
        return tuple(out)

    def support(self, executor: Executor) -> Support:
        """Kernel ESP with AES-GCM (tried in a throwaway namespace), else strongSwan's userspace kernel-libipsec."""
        key = "0x" + "11" * 36  # 32-byte AES key + 4-byte salt; a probe key, never used for traffic
        kernel = probe_kernel(
            executor,
            Layer.IPSEC,
            (
                f'ip -n "$NS" xfrm state add src 10.255.0.1 dst 10.255.0.2 proto esp spi 0x100 mode transport '
                f"aead 'rfc4106(gcm(aes))' {key} 128",
            ),
            what="IPsec ESP with AES-GCM (xfrm + esp4 + the gcm AEAD)",
        )
        if kernel.available:
            return kernel
        argv = ("sh", "-c", _USERSPACE_PROBE)
        try:
            res = executor.run(list(argv), timeout=20.0)
        except TargetError as exc:
            return Support(Layer.IPSEC, executor.name, False, f"{kernel.reason}; userspace probe: {exc.message}",
                           kernel.probe)
        if res.returncode == 0 and not res.timed_out:
            return Support(Layer.IPSEC, executor.name, True,
                           f"{kernel.reason}; userspace ESP instead: strongSwan charon-systemd with kernel-libipsec "
                           "and /dev/net/tun (ESP-in-UDP 4500, slower than kernel IPsec)", argv)
        why = (res.stdout or res.stderr).decode(errors="replace").strip() or f"exit status {res.returncode}"
        return Support(Layer.IPSEC, executor.name, False, f"{kernel.reason}; no userspace ESP either: {why}",
                       kernel.probe)


_USERSPACE_PROBE = (
    'PATH="$PATH:/usr/sbin"; command -v charon-systemd >/dev/null || { echo "charon-systemd missing"; exit 1; }; '
    'command -v swanctl >/dev/null || { echo "swanctl missing"; exit 1; }; '
    'for p in kernel-libipsec gcm vici; do ls /usr/lib/ipsec/plugins/libstrongswan-$p.so >/dev/null 2>&1 '
    '|| { echo "strongSwan plugin $p missing"; exit 1; }; done; '
    '[ -c /dev/net/tun ] || { echo "/dev/net/tun missing"; exit 1; }'
)


LAYER = IpsecLayer()

__all__ = [
    "CHARON_PLUGINS",
    "FWMARK",
    "IKE_PORTS",
    "LAYER",
    "NFT_TABLE",
    "SCOPE",
    "TABLE",
    "TUN_GLOB",
    "IpsecLayer",
    "charon_conf",
    "ike_id",
    "libipsec_swanctl_conf",
    "strict_ruleset",
]
