"""The telemetry readers by name: one explicit table, no registration on import."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from ringfence.observe.flows.events.conntrack import ConntrackReader
from ringfence.observe.flows.events.dnsmasq import DnsmasqReader
from ringfence.observe.flows.events.interface import EventReader, TelemetryError
from ringfence.observe.flows.events.objects import ObjectLogReader
from ringfence.observe.flows.events.tinyproxy import TinyproxyReader
from ringfence.observe.flows.events.tls_sidecar import TlsSidecarReader
from ringfence.observe.flows.events.ulogd import UlogdReader

#: name → factory of its reader; the names are also the file stems the collectors write (``ulogd.json``…).
READERS: Final[dict[str, Callable[[], EventReader]]] = {
    "ulogd": UlogdReader,
    "conntrack": ConntrackReader,
    "dnsmasq": DnsmasqReader,
    "tinyproxy": TinyproxyReader,  # an egress gateway's log: only where one runs (not in every host's FILES)
    "objects": ObjectLogReader,  # an object server's access log: only on hosts that serve datasets
    "tls": TlsSidecarReader,  # a TLS sidecar's connection log: kept with the TLS layer's state, not in FILES
}


def reader(name: str) -> EventReader:
    """The reader called ``name``; :class:`TelemetryError` listing the known ones otherwise."""
    try:
        return READERS[name]()
    except KeyError:
        raise TelemetryError(name, f"no telemetry reader of that name (known: {', '.join(READERS)})") from None


__all__ = ["READERS", "reader"]
