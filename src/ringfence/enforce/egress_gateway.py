"""The egress gateway's rules, rendered from the policy: a tinyproxy forward proxy that admits only approved clients
and forwards only to approved destinations beyond the trust boundary.

*How a policy says "egress goes through gateway G"* is read in :mod:`ringfence.policy.egress` (the node with the
role ``egress-gateway``, its ``http-proxy`` service); rendered here,

* an approved flow *to that service* makes its source nodes **clients** of the gateway (tinyproxy ``Allow``);
* an approved flow *from the gateway node* to a node in an external zone makes that node's addresses and the
  flow's ports **destinations** (tinyproxy ``Filter`` with ``FilterDefaultDeny Yes``, and ``ConnectPort``).

tinyproxy's filter is per destination, not per (client, destination): every admitted client may reach every
approved destination through it. The fabric's own rules (node → gateway, gateway → destination) are rendered
from the same approved flows by the nftables renderer, so the two layers agree.

*Fails closed.* tinyproxy without any ``Allow`` line serves every client, and without any ``ConnectPort`` line
tunnels to every port: a policy that gives the gateway no client or no destination is an error here
(:class:`GatewayError`), never an open proxy.
"""

from __future__ import annotations

import ipaddress
import re

from ringfence.policy.egress import Gateway, GatewayError

#: the tinyproxy log's file name in the gateway's telemetry directory (beside ulogd.json, conntrack.log)
LOG_FILE = "tinyproxy.log"
#: tinyproxy's own binary (Debian ``tinyproxy-bin``)
TINYPROXY = "/usr/bin/tinyproxy"
_SAFE_PATH = re.compile(r"^/[A-Za-z0-9_./-]{1,400}$")


def _path(p: str) -> str:
    if not _SAFE_PATH.match(p):  # a quote or newline in a path would end the directive and start another
        raise GatewayError(f"unsafe path for the gateway's configuration: {p!r}")
    return p


def filter_text(gw: Gateway) -> str:
    """The ``Filter`` file: one anchored extended regex per approved destination address (hosts, not URLs)."""
    return "".join(f"^{re.escape(str(ipaddress.ip_address(a)))}$\n" for _, a in gw.destinations)


def tinyproxy_config(gw: Gateway, *, log: str, pidfile: str, filter_file: str, timeout: int = 30,
                     max_clients: int = 64) -> str:
    """tinyproxy.conf for ``gw`` (1.11 syntax). ``LogLevel Info``: the client address (``Connect``), the request
    (``Request``: method and destination), the decision (``Unauthorized connection``, ``Proxying refused on
    filtered domain``, ``Refused CONNECT method on port``, ``Established connection to host``) and the end are
    all logged; tinyproxy logs no byte counts (the volume comes from the site's capture)."""
    if not gw.clients or not gw.destinations or not gw.ports:
        raise GatewayError(f"egress gateway {gw.node}: no client, destination or port to render (never an open "
                           "proxy)")
    lines = [
        f"# egress gateway {gw.node} ({gw.address}:{gw.port}), rendered by ringfence from the policy: only the",
        "# approved clients (Allow) may ask it, only for the approved destinations (Filter) and ports (ConnectPort).",
        f"Port {gw.port}",
        f"Listen {ipaddress.ip_address(gw.address)}",
        f"Timeout {int(timeout)}",
        f'LogFile "{_path(log)}"',
        "LogLevel Info",
        f'PidFile "{_path(pidfile)}"',
        f"MaxClients {int(max_clients)}",
        "DisableViaHeader Yes",
        f'Filter "{_path(filter_file)}"',
        "FilterType ere",
        "FilterURLs No",
        "FilterDefaultDeny Yes",
    ]
    lines += [f"# client {n}\nAllow {ipaddress.ip_address(a)}" for n, a in gw.clients]
    lines += [f"ConnectPort {int(p)}" for p in gw.ports]
    return "\n".join(lines) + "\n"


def tinyproxy_argv(config: str) -> list[str]:
    """tinyproxy in the foreground (the caller supervises it and holds its pid)."""
    return [TINYPROXY, "-d", "-c", _path(config)]


__all__ = ["LOG_FILE", "TINYPROXY", "filter_text", "tinyproxy_argv", "tinyproxy_config"]
