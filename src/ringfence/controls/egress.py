"""Control point ``egress``: traffic leaves the trust boundary only along approved paths."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ringfence.controls._common import who
from ringfence.controls._drills import drill_failures
from ringfence.controls._flows import judge_paths, path_requirements
from ringfence.controls.interface import ControlMeta, Facts, Finding, Requirement, Side, Verdict
from ringfence.policy import Policy
from ringfence.policy.egress import ROLE, Gateway, GatewayError, find_gateway

#: the requirement a gateway's own records prove (asked only when the policy routes egress through a gateway)
GATEWAY = "gateway-records"
GATEWAY_GATHER = "ringfence assess lab.yaml --captures after.pcap --gateway-log tinyproxy.log"

meta = ControlMeta(
    id="egress",
    title="Egress across the trust boundary",
    objective="Only approved flows (checkpoint replication to the off-site replica) leave the cluster; "
    "workloads cannot reach external or unknown destinations.",
    acceptance="Permitted: storage replicates a checkpoint to the external replica. Denied: a workload "
    "connecting to an external address times out or is reset by policy.",
    facts=("flows", "probes", "drills", "gateway"),
    remediation={
        "nftables": "default-drop egress; accept only approved destination sets and ports, log the rest",
        "networkpolicy": "egress policies per namespace: only the approved external CIDRs and ports",
        "cilium": "CiliumNetworkPolicy egress with toCIDRSet/toFQDNs for the approved destinations only",
        "process": "route egress through an inspected gateway; approve each destination with an owner",
    },
    requirements=(*path_requirements(
        'storage replicates a checkpoint to the external replica along an approved egress flow',
        'a workload connecting to an external address times out or is reset by policy',
        'destinations outside the trust boundary',
    ), Requirement(
        GATEWAY, Side.PERMITTED,
        "sampled egress through the policy's egress gateway (a node with role egress-gateway) has the gateway's "
        "own record — destination, client identity, decision — and its transferred volume in the capture",
        ("gateway", "flows"), GATEWAY_GATHER, needed=lambda p: any(ROLE in n.roles for n in p.nodes))),
)


def _message(row: Mapping[str, Any]) -> str:
    if row.get("dst_node"):
        target = f"external zone {row.get('dst_zone')} ({who(row, 'dst')})"
    else:
        target = f"{who(row, 'dst')}"
    return f"{who(row, 'src')} sent traffic to {target} without an approved egress flow"


def _volume(facts: Facts, src: str, dst: str, port: int) -> int:
    """Bytes of the captured flows from the gateway to one destination port (the log has no byte counts)."""
    if facts.flows is None or not facts.flows.num_rows:
        return 0
    cols = facts.flows.select(["src", "dst", "dport", "bytes"]).to_pydict()
    return sum(int(b or 0) for s, d, p, b in zip(cols["src"], cols["dst"], cols["dport"], cols["bytes"], strict=True)
               if s == src and d == dst and p == port)


def _gateway(policy: Policy, facts: Facts) -> list[Finding]:
    """The gateway's records: an allowed request the policy does not approve fails; each approved client →
    destination it forwarded passes when the capture shows the volume it carried; refusals are reported."""
    try:
        gw: Gateway | None = find_gateway(policy)
    except GatewayError as exc:
        return [Finding(meta.id, Verdict.UNKNOWN, "the policy's egress gateway", exc.message, requirement=GATEWAY)]
    if gw is None or facts.gateway is None:
        return []
    names = {a: n.name for n in policy.nodes for a in n.addresses}
    dests = {a: n for n, a in gw.destinations}
    clients = {a: n for n, a in gw.clients}
    seen: dict[tuple[str, str, int], list[Mapping[str, Any]]] = {}
    out: list[Finding] = []
    for r in facts.gateway:
        if not isinstance(r, Mapping):
            continue
        client, host, port = str(r.get("client") or "?"), str(r.get("host") or "?"), r.get("port")
        who_ = f"{names.get(client, 'an address outside the inventory')} ({client})"
        if r.get("decision") == "allow":
            if client not in clients or host not in dests or port not in gw.ports:
                out.append(Finding(meta.id, Verdict.FAIL, f"{who_} → {host}:{port} via {gw.node}",
                                   f"the egress gateway {gw.node} forwarded a request no approved egress flow allows "
                                   f"(line {r.get('line')} of {r.get('source')})", requirement=GATEWAY))
            elif isinstance(port, int):
                seen.setdefault((client, host, port), []).append(r)
        elif r.get("decision") == "deny":
            out.append(Finding(meta.id, Verdict.PASS, f"{who_} → {host}:{port} via {gw.node}",
                               f"refused at the egress gateway ({r.get('reason')}) at {r.get('time')}, logged with "
                               "the client's address"))
    for (client, host, port), recs in sorted(seen.items()):
        subject = f"{clients[client]} ({client}) → {dests[host]} ({host}:{port}) via {gw.node}"
        volume = _volume(facts, gw.address, host, port)
        when = f"{len(recs)} forwarded request(s), {recs[0].get('time')} – {recs[-1].get('time')}"
        if volume > 0:
            out.append(Finding(meta.id, Verdict.PASS, subject, f"logged by the gateway: {when}; {volume} bytes carried "
                               "from the gateway to the destination in the capture", requirement=GATEWAY))
        else:
            out.append(Finding(meta.id, Verdict.UNKNOWN, subject,
                               f"logged by the gateway ({when}) but the capture holds no bytes from the gateway to "
                               "the destination: the volume is not shown (tinyproxy logs none) — capture while it "
                               "replicates", requirement=GATEWAY))
    return out


def evaluate(policy: Policy, facts: Facts) -> list[Finding]:
    """Unapproved traffic to external zones or unknown addresses fails; approved egress passes; an
    exfiltration drill that got data out fails, naming the node."""
    found = judge_paths(meta, policy, facts, "destinations outside the trust boundary", _message)
    return found + _gateway(policy, facts) + drill_failures(meta, facts)
