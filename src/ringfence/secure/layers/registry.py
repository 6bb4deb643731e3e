"""The encryption layers ringfence knows, registered explicitly in one place."""

from __future__ import annotations

from collections.abc import Mapping

from ringfence.policy.model import Layer
from ringfence.secure.layers import ipsec, macsec, nccl_tls, tls, wireguard
from ringfence.secure.layers.interface import EncryptionLayer, LayerError, LayerScope, Reach, Transport

#: Layers with a renderer and a support probe.
LAYERS: Mapping[Layer, EncryptionLayer] = {
    Layer.MACSEC: macsec.LAYER,
    Layer.IPSEC: ipsec.LAYER,
    Layer.NCCL_TLS: nccl_tls.LAYER,
    Layer.WIREGUARD: wireguard.LAYER,
}

#: Layers ringfence can switch on in the lab (``ringfence encrypt enable --target lab``).
LAB_LAYERS: frozenset[Layer] = frozenset({Layer.TLS, Layer.WIREGUARD, Layer.IPSEC})

# ringfence's own encrypted collective transport (secure/transport) is described here by its scope only;
# it is enabled by selecting the backend in the job, not by this family.
_TRANSPORT_SCOPE = LayerScope(
    layer=Layer.RINGFENCE,
    reach=Reach.SOCKET,
    transports=frozenset({Transport.TCP}),
    crosses_routers=True,
    rotates_live=True,
    key_model="per-job session keys negotiated with the workload certificates",
    wire_protocols=("ringfence-transport",),
    notes="the torch.distributed backend's own sockets only",
)

SCOPES: Mapping[Layer, LayerScope] = {
    Layer.TLS: tls.SCOPE,
    Layer.WIREGUARD: wireguard.SCOPE,
    Layer.MACSEC: macsec.SCOPE,
    Layer.IPSEC: ipsec.SCOPE,
    Layer.NCCL_TLS: nccl_tls.SCOPE,
    Layer.RINGFENCE: _TRANSPORT_SCOPE,
}


def layer(name: str) -> Layer:
    """The :class:`Layer` called ``name``; :class:`LayerError` listing the known ones otherwise."""
    try:
        return Layer(name)
    except ValueError as exc:
        raise LayerError(f"unknown layer {name!r}; known: {', '.join(x.value for x in Layer)}") from exc


def scope_of(name: str | Layer) -> LayerScope:
    """The documented scope of a layer."""
    return SCOPES[layer(name) if isinstance(name, str) else name]


def renderer(name: str | Layer) -> EncryptionLayer:
    """The renderer of a layer (not TLS, which ringfence runs as sidecars in the lab only)."""
    lay = layer(name) if isinstance(name, str) else name
    if lay not in LAYERS:
        raise LayerError(
            f"layer {lay.value} has no configuration renderer",
            hint=f"render one of: {', '.join(x.value for x in LAYERS)}",
        )
    return LAYERS[lay]


__all__ = ["LAB_LAYERS", "LAYERS", "SCOPES", "layer", "renderer", "scope_of"]
