"""Packet marks that ringfence's own components agree on (one place, so they cannot drift apart)."""

from typing import Final

#: Sockets carrying this mark bypass ringfence's node-local TLS sidecar redirects: the sidecars' own
#: upstream connections, and deny probes — so a local proxy accepting a connection can never pass for
#: the network path being open.
LOCAL_PROXY_BYPASS: Final = 0x5246

__all__ = ["LOCAL_PROXY_BYPASS"]
