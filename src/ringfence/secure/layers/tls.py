"""Mutual TLS for storage, management and replication: scope, the lab services' authorisation table, the
identities, and the nftables redirect ruleset — what the layer *is*, with nothing run anywhere.

How it runs on a site's hosts (CA, certificates pushed to each host, sidecars, rotation, probes) is
:mod:`ringfence.secure.layers.tls_run`, over executors only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ringfence.marks import LOCAL_PROXY_BYPASS
from ringfence.policy import Policy
from ringfence.policy.model import Layer
from ringfence.secure import pki
from ringfence.secure.layers.interface import LayerScope, Reach, Transport

#: Firewall mark of the sidecars' own sockets, so their connections are not redirected to themselves.
MESH_MARK = LOCAL_PROXY_BYPASS
#: Where a node's plaintext clients are redirected to (loopback only).
OUTBOUND_PORT = 15001
TABLE = "rf_tls"

SCOPE = LayerScope(
    layer=Layer.TLS,
    reach=Reach.CONNECTION,
    transports=frozenset({Transport.TCP}),
    crosses_routers=True,
    rotates_live=True,
    key_model="X.509 workload certificates of the cluster CA (SPIFFE identities), rotated in place and the old revoked",
    wire_protocols=("tls1.3", "tls1.2", "tls"),
    notes="per connection of the services that use it; says nothing about other traffic of the same hosts",
)

#: The lab services' authorisation table: service → (method, path pattern, who). ``{job}`` is the job in the path.
LAB_RULES: Mapping[str, tuple[tuple[str, str, str], ...]] = {
    "storage-http": (
        ("GET", r"^/datasets/(?P<job>[a-z0-9._-]+)/", "job:{job}"),
        ("PUT", r"^/checkpoints/(?P<job>[a-z0-9._-]+)/", "job:{job}"),
        ("GET", r"^/healthz$", "any"),
    ),
    "mgmt-api": (
        ("POST", r"^/jobs$", "kind:user"),
        ("POST", r"^/report$", "kind:job-rank"),
        ("POST", r"^/metrics$", "kind:node"),
        ("GET", r"^/(healthz|jobs|progress)$", "any"),
    ),
    "replica-sink": (
        ("PUT", r"^/replica/", "id:{storage}"),
        ("GET", r"^/(healthz|catalog)$", "any"),
    ),
}


def gate_port(port: int) -> int:
    """The sidecar port a protected service port is redirected to (stays clear of the lab's ports)."""
    return 20000 + port % 10000


def identity_of(policy: Policy, node: str) -> str:
    """The workload identity a lab node's sidecar presents (a worker: its job rank's)."""
    for job in policy.jobs:
        if node in job.members:
            return pki.job_rank_identity(policy.cluster, job.name, job.members.index(node))
    spec = next((n for n in policy.nodes if n.name == node), None)
    if spec is not None and spec.identity:
        return spec.identity
    return f"spiffe://{policy.cluster}/node/{node}"


def bindings(policy: Policy) -> dict[str, list[str]]:
    """Identity → the source addresses it may be presented from: the addresses of the nodes that carry it.

    A workload certificate proves who holds the key, not where it is used: a copied certificate and key
    are the same identity anywhere. The gates therefore also check that an identity arrives from an
    address of a node the policy gives it (a rank's identity from its rank's node) — what the policy
    binds to beyond the certificate.
    """
    out: dict[str, list[str]] = {}
    for node in policy.nodes:
        addrs = out.setdefault(identity_of(policy, node.name), [])
        addrs += [a for a in node.addresses if a not in addrs]
    return out


def rules_for(service: str, policy: Policy) -> list[dict[str, str]]:
    storage = identity_of(policy, "storage")
    return [
        {"method": m, "path": p, "allow": a.replace("{storage}", storage)} for m, p, a in LAB_RULES.get(service, ())
    ]


def ruleset(serves: Iterable[tuple[str, int]], reaches: Iterable[tuple[str, int]]) -> str:
    pre = "".join(f'    iifname != "lo" tcp dport {port} redirect to :{gate_port(port)}\n' for _, port in serves)
    out = "".join(
        f"    meta mark != {MESH_MARK:#x} ip daddr {addr} tcp dport {port} redirect to :{OUTBOUND_PORT}\n"
        for addr, port in reaches
    )
    return (
        f"table ip {TABLE} {{}}\ndelete table ip {TABLE}\n"
        f"table ip {TABLE} {{\n"
        f"  chain pre {{ type nat hook prerouting priority dstnat; policy accept;\n{pre}  }}\n"
        f"  chain out {{ type nat hook output priority -100; policy accept;\n{out}  }}\n}}\n"
    )


__all__ = [
    "LAB_RULES",
    "MESH_MARK",
    "OUTBOUND_PORT",
    "SCOPE",
    "TABLE",
    "bindings",
    "gate_port",
    "identity_of",
    "rules_for",
    "ruleset",
]
