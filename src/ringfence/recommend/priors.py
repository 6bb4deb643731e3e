"""The cost table of the seed documents, as priors: what each way of protecting a link costs the job.

Used until a canary on this cluster measured the layer (measured beats prior; the recommendation
says which it used). Throughput loss in % of bus bandwidth, added latency in µs.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PRIORS", "Cost", "Option"]


@dataclass(frozen=True)
class Cost:
    """A cost range and where it comes from (``prior``: the seed table; ``measured``: a canary here)."""

    loss_pct: tuple[float, float]
    latency_us: tuple[float, float] | None
    source: str
    basis: str

    def text(self) -> str:
        """``40–60 % busbw, +5–15 µs (prior: …)``."""
        lo, hi = self.loss_pct
        loss = f"{lo:g} % busbw" if lo == hi else f"{lo:g}–{hi:g} % busbw"
        lat = ""
        if self.latency_us is not None:
            a, b = self.latency_us
            lat = f", +{b:g} µs" if a == b else f", +{a:g}–{b:g} µs"
        return f"{loss}{lat} ({self.source}: {self.basis})"


@dataclass(frozen=True)
class Option:
    """One way to protect a link: the policy layer it is (None: no encryption layer), the NIC offload it
    needs (None: none), and its prior cost (None: no prior — only a canary can say)."""

    name: str
    layer: str | None
    needs: str | None
    prior: Cost | None


def _prior(lo: float, hi: float, lat: tuple[float, float] | None, basis: str) -> Cost:
    return Cost((lo, hi), lat, "prior", basis)


#: option name → option. Ordered cheapest first among equals.
PRIORS: dict[str, Option] = {
    "dedicated-fabric": Option("dedicated-fabric", None, None,
                               _prior(0, 0, (0, 0), "dedicated fabric: physical isolation, nothing on the path")),
    "macsec": Option("macsec", "macsec", "macsec", _prior(0, 2, (0, 0.1), "switch/NIC MACsec: < 2 %, < 100 ns")),
    "ipsec-offload": Option("ipsec-offload", "ipsec", "ipsec",
                            _prior(0, 0, (0, 1.5), "DPU IPsec offload: line rate, < 1.5 µs")),
    "tls-offload": Option("tls-offload", "tls", "tls", _prior(0, 0, (0, 1.5), "DPU TLS offload: line rate, < 1.5 µs")),
    "tls": Option("tls", "tls", None, _prior(0, 5, None, "host TLS: per-byte CPU off the critical path of these "
                                                          "classes")),
    "wireguard": Option("wireguard", "wireguard", None,
                        _prior(40, 60, (5, 15), "host software WireGuard/IPsec: 40–60 % drop, 5–15 µs")),
    "ipsec": Option("ipsec", "ipsec", None,
                    _prior(40, 60, (5, 15), "host software WireGuard/IPsec: 40–60 % drop, 5–15 µs")),
    "ringfence-transport": Option("ringfence-transport", "ringfence-transport", None, None),
}
