"""The lab's partition per job as nftables: chains keyed by bridge port (L2) and by job mark (routed L3)."""

from __future__ import annotations

from typing import Any

import pytest

from ringfence.enforce.apply import FABRIC, partition_record, render_bundle
from ringfence.enforce.interface import DEFAULT_OPTIONS, EnforceError
from ringfence.enforce.nftrun import check_in_throwaway
from ringfence.enforce.partition_nft import MARK_BASE, PartitionJob, partition_jobs, render_partition
from ringfence.lab.policy_text import render_policy
from ringfence.lab.topology import build_topology
from ringfence.policy import Partition, Policy, parse_policy

TOPO = build_topology("rfpt", 4, 2)
PORTS = {n.name: (TOPO.port(n.name),) for n in TOPO.nodes}
BASE = parse_policy(render_policy(TOPO), "lab")


def _with(*parts: Partition | None, policy: Policy = BASE) -> Policy:
    jobs = tuple(j.model_copy(update={"partition": p}) for j, p in zip(policy.jobs, parts, strict=True))
    return policy.model_copy(update={"jobs": jobs})


PARTED = _with(Partition(vlan=100), Partition(vlan=101))


def _objects(cmds: list[dict[str, Any]], kind: str) -> dict[tuple[str, str], dict[str, Any]]:
    out = {}
    for c in cmds:
        body = c["add"].get(kind)
        if body is not None and "name" in body:
            out[(body["family"], body["name"])] = body
    return out


def _rules(cmds: list[dict[str, Any]], family: str, chain: str) -> list[dict[str, Any]]:
    return [c["add"]["rule"] for c in cmds if "rule" in c["add"] and c["add"]["rule"]["family"] == family
            and c["add"]["rule"]["chain"] == chain]


def test_each_job_gets_its_ports_its_mark_and_the_other_jobs_addresses_as_forbidden() -> None:
    cmds = render_partition(partition_jobs(PARTED, PORTS))
    sets, maps, chains = _objects(cmds, "set"), _objects(cmds, "map"), _objects(cmds, "chain")
    assert sets[("bridge", "part_ports_train-a")]["elem"] == sorted([TOPO.port("worker-0"), TOPO.port("worker-1")])
    assert sets[("bridge", "part_ports_train-b")]["elem"] == sorted([TOPO.port("worker-2"), TOPO.port("worker-3")])
    assert sets[("inet", "part_forbid_train-a")]["elem"] == [TOPO.address("worker-2"), TOPO.address("worker-3")]
    assert sets[("inet", "part_forbid_train-b")]["elem"] == [TOPO.address("worker-0"), TOPO.address("worker-1")]
    assert dict(map(tuple, maps[("bridge", "part_mark")]["elem"])) == {
        TOPO.port("worker-0"): MARK_BASE + 1, TOPO.port("worker-1"): MARK_BASE + 1,
        TOPO.port("worker-2"): MARK_BASE + 2, TOPO.port("worker-3"): MARK_BASE + 2}
    # before the policy's own filter chains (priority 0), on the bridge's forward and the routed forward hooks
    assert (chains[("bridge", "partition")]["hook"], chains[("bridge", "partition")]["prio"]) == ("forward", -10)
    assert (chains[("inet", "partition")]["hook"], chains[("inet", "partition")]["prio"]) == ("forward", -10)
    assert chains[("bridge", "part_mark_in")]["hook"] == "prerouting"
    # inside the job: accept (ends only this chain: the policy still judges); out of it: recorded and dropped
    inside, outside = _rules(cmds, "bridge", "part_train-a")
    assert inside["expr"][-1] == {"accept": None}
    assert outside["expr"][-1] == {"drop": None} and outside["expr"][0]["set"]["set"] == "@part_denied"
    # every frame, ARP included: no rule of the partition lets non-IPv4 through
    assert not any("ether" in str(r["expr"]) and "type" in str(r["expr"]) for r in _rules(cmds, "bridge", "partition"))


def test_only_declared_jobs_are_isolated_but_every_job_is_kept_from_a_partitioned_one() -> None:
    cmds = render_partition(partition_jobs(_with(Partition(pkey=0x10), None), PORTS))
    sets, maps = _objects(cmds, "set"), _objects(cmds, "map")
    assert ("bridge", "part_ports_train-b") not in sets
    assert {e[0] for e in maps[("bridge", "part_src")]["elem"]} == {TOPO.port("worker-0"), TOPO.port("worker-1")}
    # the unpartitioned job's routed packets still never reach the partitioned job's ranks, nor the reverse
    assert sets[("inet", "part_forbid_train-b")]["elem"] == [TOPO.address("worker-0"), TOPO.address("worker-1")]
    assert sets[("inet", "part_forbid_train-a")]["elem"] == [TOPO.address("worker-2"), TOPO.address("worker-3")]


def test_no_declared_partition_renders_nothing_and_apply_records_it() -> None:
    assert partition_jobs(BASE, PORTS) == () and render_partition([]) == []
    scopes = [FABRIC]
    assert render_bundle(BASE, scopes, DEFAULT_OPTIONS, fabric_ports=PORTS) == render_bundle(BASE, scopes,
                                                                                             DEFAULT_OPTIONS)
    assert partition_record(BASE, PORTS) is None
    assert partition_record(PARTED, PORTS) == {"installed": True, "jobs": ["train-a", "train-b"]}
    without = partition_record(PARTED, None)
    assert without is not None and without["installed"] is False and "PKEY/VLAN" in without["why"]
    # with ports, the fabric's ruleset grows by the partition; without, it is the policy's alone
    parted = render_bundle(PARTED, scopes, DEFAULT_OPTIONS, fabric_ports=PORTS)[FABRIC]["nftables"]
    plain = render_bundle(PARTED, scopes, DEFAULT_OPTIONS)[FABRIC]["nftables"]
    assert parted[: len(plain)] == plain and len(parted) > len(plain)


def test_a_member_without_a_port_is_named() -> None:
    ports = {k: v for k, v in PORTS.items() if k != "worker-3"}
    with pytest.raises(EnforceError, match=r"job train-b: node worker-3 has no bridge port"):
        partition_jobs(PARTED, ports)


def test_a_node_in_two_jobs_is_named() -> None:
    jobs = (PARTED.jobs[0], PARTED.jobs[1].model_copy(update={"members": ("worker-1", "worker-2", "worker-3")}))
    with pytest.raises(EnforceError, match=r"jobs train-a and train-b both have node worker-1"):
        partition_jobs(PARTED.model_copy(update={"jobs": jobs}), PORTS)
    shared = [PartitionJob("a", True, ("x",), ("p1",), ("10.0.0.1",)), PartitionJob("b", True, ("y",), ("p1",), ())]
    with pytest.raises(EnforceError, match=r"bridge port p1 is in jobs a and b"):
        render_partition(shared)


def test_a_job_without_members_is_named() -> None:
    with pytest.raises(EnforceError, match=r"job empty has no members"):
        render_partition([PartitionJob("a", True, ("x",), ("p1",), ("10.0.0.1",)),
                          PartitionJob("empty", False, (), (), ())])


@pytest.mark.privileged
def test_the_kernel_takes_the_fabric_ruleset_with_the_partition() -> None:
    try:
        check_in_throwaway(render_bundle(PARTED, [FABRIC], DEFAULT_OPTIONS, fabric_ports=PORTS)[FABRIC])
    except EnforceError as exc:
        if "Operation not permitted" in str(exc) or "cannot run ip" in str(exc):
            pytest.skip(f"no namespaces here: {exc}")
        raise


def test_the_proof_refuses_without_a_partition_a_fabric_point_or_a_rendezvous() -> None:
    from ringfence.enforce.partition_probe import ProveInputs, prove_partitions
    from ringfence.targets.local import LocalExecutor

    ex = LocalExecutor(name="x")
    inp = ProveInputs(points={"worker-0": ex}, interfaces={}, rendezvous={}, gateways={}, steps=dict)
    with pytest.raises(EnforceError, match="no job declares a partition"):
        prove_partitions(partition_jobs(_with(None, None), PORTS) or [], inp, target="t")
    with pytest.raises(EnforceError, match="no fabric point"):
        prove_partitions(partition_jobs(PARTED, PORTS), inp, target="t")
    with pytest.raises(EnforceError, match="no rendezvous port for job train-a, train-b"):
        prove_partitions(partition_jobs(PARTED, PORTS), ProveInputs({FABRIC: ex}, {}, {}, {}, dict), target="t")
