"""Encryption layers by traffic class: TLS, WireGuard, MACsec, IPsec, NCCL's TLS (see interface.py)."""

from ringfence.secure.layers.interface import (
    EncryptionLayer,
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

__all__ = [
    "EncryptionLayer",
    "Endpoint",
    "LayerError",
    "LayerScope",
    "Reach",
    "RenderOptions",
    "Rendered",
    "RenderedFile",
    "Support",
    "Transport",
]
