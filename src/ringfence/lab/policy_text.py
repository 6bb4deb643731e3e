"""The as-found policy of a lab, as YAML text in the shape of ``examples/lab-policy.yaml``.

Written line by line rather than through ``yaml.dump`` so the output reads like the hand-written
example (one flow mapping per node, service and approved flow) and diffs cleanly against it. Every
string is emitted JSON-quoted, which YAML reads as a double-quoted scalar, so no name can change type.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from ringfence.lab.slurm import CTLD_PORT, SLURMD_PORT, SRUN_PORTS
from ringfence.lab.topology import Topology

_STANDARDS = (
    ("NIST SP 800-207 Zero Trust Architecture", "2020-08", "2026-10-01"),
    ("NIST SP 800-53 SC-7/SC-8", "rev5", "2026-10-01"),
)

_CONTROLS = (
    ("zones", "netsec@lab", "nftables drop counters + captures", "EXC ticket, 30-day expiry"),
    ("workload_identity", "platform-identity@lab", "TLS handshake logs", "EXC ticket"),
    ("admin_paths", "sre@lab", "sshd auth log + captures", "break-glass procedure"),
    ("storage_flows", "data-platform@lab", "storage access log + flows", "EXC ticket"),
    ("training_traffic", "ml-platform@lab", "flows + probes", "EXC ticket"),
    ("egress", "netsec@lab", "egress flow log", "EXC ticket, 30-day expiry"),
    ("encryption_keys", "ml-platform-security@lab", "captures + key events", "risk acceptance by CISO"),
    ("telemetry", "secops@lab", "flow telemetry pipeline", "EXC ticket"),
    ("change_control", "change-board@lab", "evidence store", "CAB"),
    ("containment", "secops@lab", "containment drills", "IR plan"),
)


def _q(value: str) -> str:
    return json.dumps(value)


def _list(values: Iterable[str]) -> str:
    return "[" + ", ".join(_q(v) for v in values) + "]"


def _map(pairs: Iterable[tuple[str, str]]) -> str:
    # values arrive already rendered (quoted string, number, list or nested map)
    return "{" + ", ".join(f"{k}: {v}" for k, v in pairs) + "}"


#: where the lab's optional egress gateway runs (the management zone's node: no new namespace, so every lab's
#: topology stays as it is) and the port its tinyproxy listens on
GATEWAY_NODE = "mgmt"
GATEWAY_PORT = 8888
GATEWAY_SERVICE = "egress-gateway"


#: the controller's service name (slurmctld on mgmt); each worker's slurmd is ``<worker>-slurmd``
SLURMCTLD_SERVICE = "slurmctld"


def slurmd_service(node: str) -> str:
    """The service name of ``node``'s slurmd."""
    return f"{node}-slurmd"


def srun_service(node: str) -> str:
    """The service name of the listening ports of an ``srun`` running on ``node``."""
    return f"{node}-srun"


def _slurm_services(topo: Topology) -> list[str]:
    # srun runs where the batch step runs: the first node of each job's allocation (its first member)
    pairs = [[("name", _q(SLURMCTLD_SERVICE)), ("node", _q("mgmt")), ("port", str(CTLD_PORT))]]
    pairs += [[("name", _q(slurmd_service(w))), ("node", _q(w)), ("port", str(SLURMD_PORT))]
              for w in topo.node_names() if w.startswith("worker-")]
    # srun listens only while a step runs: on demand, so a probe stands in for it when nothing of it listens
    pairs += [[("name", _q(srun_service(j.members[0]))), ("node", _q(j.members[0])), ("port", _q(SRUN_PORTS)),
               ("on_demand", "true")] for j in topo.jobs]
    # and an srun on the submit host: the benchmark's (``bench allreduce --launcher srun --submit-host mgmt``)
    pairs.append([("name", _q(srun_service("mgmt"))), ("node", _q("mgmt")), ("port", _q(SRUN_PORTS)),
                  ("on_demand", "true")])
    return [f"  - {_map([*p, ('class', _q('management')), ('application', _q('slurm'))])}" for p in pairs]


def _slurm_flows(topo: Topology) -> list[str]:
    """Exactly the paths the lab's Slurm uses, per job: listed before the jobs' collective flows, so a
    connection to srun's ports between two ranks is attributed to the Slurm flow (first approved flow wins)."""
    out: list[str] = []
    for j in topo.jobs:
        job = _map([("job", _q(j.name))])
        srun = _map([("service", _q(srun_service(j.members[0])))])
        flows = [
            (f"{j.name}-slurm-ctld", '{node: "mgmt"}', job, f'proto: tcp, ports: "{SLURMD_PORT}", ',
             "slurmctld pings the job's slurmd and launches its batch step"),
            (f"{j.name}-slurm-launch", job, job, f'proto: tcp, ports: "{SLURMD_PORT}", ',
             "srun on the batch node launches the job's steps on every member's slurmd"),
            (f"{j.name}-slurm-register", job, _map([("service", _q(SLURMCTLD_SERVICE))]), "",
             "the members' slurmd register with slurmctld; srun asks it for the step"),
            (f"{j.name}-slurm-step-io", job, srun, "",
             "slurmstepd on every member returns launch replies, stdio and exit codes to srun"),
            (f"{j.name}-slurm-ctld-srun", '{node: "mgmt"}', srun, "",
             "slurmctld pings srun and tells it of the job's end"),
            (f"{j.name}-slurm-submit-io", job, _map([("service", _q(srun_service("mgmt")))]), "",
             "slurmstepd on every member returns a step's replies, stdio and exit codes to an srun on the "
             "submit host (mgmt), e.g. a benchmark's ranks"),
        ]
        for fid, src, dst, ports, why in flows:
            out += [f"  - {{id: {_q(fid)}, from: {src}, to: {dst}, {ports}class: management,",
                    f"     description: {_q(why)}}}"]
    return out


def render_policy(topo: Topology, ssh_nodes: Iterable[str] = (), *, egress_gateway: bool = False,
                  slurm: bool = False) -> str:
    """The intended-state policy describing ``topo`` as found: every real flow approved, nothing protected yet.

    The classes still *require* protection: the policy states intent, and the lab starts out violating it.
    ``ssh_nodes`` run an sshd of their own (``ringfence lab hosts``): each is an administrative service
    reached only from the jump host — the path an operator's tools take to every node of a real cluster.
    ``egress_gateway``: the lab runs its egress gateway (tinyproxy on :data:`GATEWAY_NODE`); the node gets the
    role ``egress-gateway``, the proxy is a service, and replication goes storage → gateway → replica sink
    instead of straight out (:mod:`ringfence.enforce.egress_gateway` reads exactly this shape).
    ``slurm``: the lab's jobs run under its Slurm (:mod:`ringfence.lab.slurm`); its daemons are services
    (class management, application ``slurm``) and exactly the paths they use are approved — not from aux,
    user, jump or storage.
    """
    ssh = sorted(h for h in set(ssh_nodes) if h != "mgmt" and h in topo.node_names())
    out: list[str] = [
        f"# The intended state of ringfence lab {topo.prefix} ({topo.workers} workers, {len(topo.jobs)} jobs).",
        "# Addresses live only inside the lab's own network namespaces.",
        "version: 1",
        "cluster: lab",
        "standards:",
    ]
    out += [f"  - {_map([('name', _q(n)), ('version', _q(v)), ('reviewed', d)])}" for n, v, d in _STANDARDS]
    out.append("")
    out.append("zones:")
    for z in topo.zones:
        pairs = [("name", _q(z.name))]
        if z.trust != "internal":
            pairs.append(("trust", _q(z.trust)))
        pairs.append(("description", _q(z.description)))
        out.append(f"  - {_map(pairs)}")
    out.append("")
    out.append("nodes:")
    for n in topo.nodes:
        pairs = [("name", _q(n.name)), ("zone", _q(n.zone)), ("addresses", _list([n.address]))]
        if n.identity:
            pairs.append(("identity", _q(n.identity)))
        roles = (*n.roles, "egress-gateway") if egress_gateway and n.name == GATEWAY_NODE else n.roles
        pairs.append(("roles", _list(roles)))
        out.append(f"  - {_map(pairs)}")
    out.append("")
    out.append("jobs:")
    for j in topo.jobs:
        out += [
            f"  - name: {_q(j.name)}",
            f"    identity: {_q(f'spiffe://lab/job/{j.name}')}",
            f"    members: {_list(j.members)}",
            '    collective_ports: "1024-65535"',
            "    backend: gloo",
        ]
    out.append("")
    out.append("services:")
    for s in topo.services:
        pairs = [("name", _q(s.name)), ("node", _q(s.node)), ("port", str(s.port)), ("class", _q(s.traffic_class)),
                 ("application", _q(s.application))]
        if s.admin:
            pairs.append(("admin", "true"))
        out.append(f"  - {_map(pairs)}")
    if egress_gateway:
        pairs = [("name", _q(GATEWAY_SERVICE)), ("node", _q(GATEWAY_NODE)), ("port", str(GATEWAY_PORT)),
                 ("class", _q("replication")), ("application", _q("http-proxy"))]
        out.append(f"  - {_map(pairs)}")
    for host in ssh:
        pairs = [("name", _q(f"{host}-ssh")), ("node", _q(host)), ("port", "22"), ("class", _q("management")),
                 ("application", _q("ssh")), ("admin", "true")]
        out.append(f"  - {_map(pairs)}")
    if slurm:
        out += _slurm_services(topo)
    out.append("")
    out.append("approved:")
    if slurm:
        out += _slurm_flows(topo)
    for j in topo.jobs:
        job = _map([("job", _q(j.name))])
        out += [
            f"  - {{id: {_q(j.name + '-collective')}, from: {job}, to: {job}, proto: tcp, ports: \"1024-65535\", "
            f"class: collective,",
            '     description: "gloo rendezvous and all-reduce between the job\'s ranks"}',
            f"  - {{id: {_q(j.name + '-storage')}, from: {job}, to: {{service: \"storage-http\"}}, class: storage,",
            '     description: "dataset shard reads and checkpoint writes"}',
            f"  - {{id: {_q(j.name + '-report')}, from: {job}, to: {{service: \"mgmt-api\"}}, class: management,",
            '     description: "ranks report progress to the job API"}',
        ]
    out += [
        '  - {id: "aux-telemetry", from: {node: "aux"}, to: {service: "mgmt-api"}, class: management,',
        '     description: "auxiliary telemetry pod pushes metrics"}',
        '  - {id: "user-submit", from: {zone: "user"}, to: {service: "mgmt-api"}, class: management,',
        '     description: "users submit jobs"}',
        '  - {id: "admin-ssh", from: {node: "jump"}, to: {service: "mgmt-ssh"}, class: management,',
        '     description: "administration only through the jump host"}',
    ]
    for host in ssh:
        out += [
            f'  - {{id: {_q(f"admin-ssh-{host}")}, from: {{node: "jump"}}, to: {{service: {_q(f"{host}-ssh")}}}, '
            "class: management,",
            f'     description: {_q(f"ringfence and operators reach {host} only from the jump host")}}}',
        ]
    if "fabric" in set(ssh_nodes):  # the fabric's management interface: the jump zone's gateway
        gateway = topo.zone(topo.node("jump").zone).gateway()
        out += [
            f'  - {{id: "admin-ssh-fabric", from: {{node: "jump"}}, to: {{cidr: {_q(gateway + "/32")}}}, proto: tcp, '
            'ports: "22", class: management,',
            '     description: "ringfence reaches the fabric\'s management interface only from the jump host"}',
        ]
    if egress_gateway:
        out += [
            f'  - {{id: "checkpoint-replication", from: {{node: "storage"}}, to: {{service: {_q(GATEWAY_SERVICE)}}}, '
            "class: replication,",
            '     description: "checkpoints leave the cluster for the off-site replica, through the egress gateway"}',
            f'  - {{id: "egress-gateway-replication", from: {{node: {_q(GATEWAY_NODE)}}}, '
            'to: {service: "replica-sink"}, class: replication,',
            '     description: "the egress gateway forwards approved replication to the off-site replica"}',
        ]
    else:
        out += [
            '  - {id: "checkpoint-replication", from: {node: "storage"}, to: {service: "replica-sink"}, '
            "class: replication,",
            '     description: "checkpoints leave the cluster for the off-site replica"}',
        ]
    out += [
        "",
        "classes:",
        "  storage: {protection: required, layers: [tls]}",
        "  collective:",
        "    protection: required",
        "    layers: [wireguard, macsec, ipsec, ringfence-transport]",
        "    confidential: true",
        '    decision_owner: "ml-platform-security@lab"',
        '    rationale: "gradients of proprietary models reveal training data; treated as confidential"',
        "  management: {protection: required, layers: [tls]}",
        "  replication: {protection: required, layers: [tls]}",
        "",
        "budget: {busbw_loss_pct: 5, p99_growth_pct: 25, min_repeats: 3}",
        "keys: {cert_lifetime: 24h, rotation: 12h, tunnel_rekey: 2m}",
        "",
        "exceptions: []",
        "",
        "controls:",
    ]
    out += [
        f"  {cid}: {_map([('owner', _q(o)), ('log_source', _q(src)), ('exception_process', _q(p))])}"
        for cid, o, src, p in _CONTROLS
    ]
    return "\n".join(out) + "\n"


__all__ = ["GATEWAY_NODE", "GATEWAY_PORT", "GATEWAY_SERVICE", "SLURMCTLD_SERVICE", "render_policy", "slurmd_service",
           "srun_service"]
