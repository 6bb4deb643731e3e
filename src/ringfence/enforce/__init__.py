"""Least-path enforcement: render the approved matrix for a target, check it is safe, apply it, prove it.

Renderers are registered explicitly in :data:`RENDERERS` (target name → factory); nothing registers
itself on import. ``ringfence compile POLICY --to TARGET -o DIR`` uses :func:`renderer`.
"""

from collections.abc import Callable

from ringfence.enforce.cilium import CiliumRenderer
from ringfence.enforce.interface import (
    EnforceError,
    RenderedFile,
    Renderer,
    RenderOptions,
    RenderResult,
    UnsafePolicy,
    Unsupported,
)
from ringfence.enforce.netpol import NetworkPolicyRenderer
from ringfence.enforce.nftables import NftablesRenderer
from ringfence.enforce.safety import check_policy, policy_problems
from ringfence.policy.matrix import Matrix, ResolvedFlow, Selector, resolve

#: target name → renderer factory. The one place a target is added.
RENDERERS: dict[str, Callable[[], Renderer]] = {
    "nftables": NftablesRenderer,
    "networkpolicy": NetworkPolicyRenderer,
    "cilium": CiliumRenderer,
}


def renderer(target: str) -> Renderer:
    """The renderer for ``target``; :class:`EnforceError` naming the known targets otherwise."""
    try:
        return RENDERERS[target]()
    except KeyError:
        raise EnforceError(f"unknown enforcement target {target!r}",
                           hint=f"one of: {', '.join(sorted(RENDERERS))}") from None


__all__ = [
    "RENDERERS",
    "CiliumRenderer",
    "EnforceError",
    "Matrix",
    "NetworkPolicyRenderer",
    "NftablesRenderer",
    "RenderOptions",
    "RenderResult",
    "RenderedFile",
    "Renderer",
    "ResolvedFlow",
    "Selector",
    "UnsafePolicy",
    "Unsupported",
    "check_policy",
    "policy_problems",
    "renderer",
    "resolve",
]
