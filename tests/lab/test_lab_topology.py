"""The lab's topology and as-found policy: pure functions, no root needed."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringfence.lab import LabError, build_topology, render_policy
from ringfence.lab.topology import IFNAME_MAX, MAX_WORKERS
from ringfence.policy import load_policy, parse_policy

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "lab-policy.yaml"


def test_default_lab_policy_is_the_example_policy() -> None:
    assert parse_policy(render_policy(build_topology("rfab12"))) == load_policy(EXAMPLE)


def test_addresses_and_zones_follow_the_plan() -> None:
    topo = build_topology("rf00ff", workers=4, jobs=2)
    addr = {n.name: n.address for n in topo.nodes}
    assert [addr[f"worker-{i}"] for i in range(4)] == ["10.77.1.10", "10.77.1.11", "10.77.1.12", "10.77.1.13"]
    assert (addr["aux"], addr["storage"], addr["mgmt"]) == ("10.77.1.50", "10.77.2.10", "10.77.3.10")
    assert (addr["user"], addr["jump"], addr["external"]) == ("10.77.4.10", "10.77.5.10", "10.77.9.10")
    assert [z.gateway() for z in topo.zones] == ["10.77.1.1", "10.77.2.1", "10.77.3.1", "10.77.4.1", "10.77.5.1",
                                                 "10.77.9.1"]
    assert [(j.name, j.members) for j in topo.jobs] == [("train-a", ("worker-0", "worker-1")),
                                                        ("train-b", ("worker-2", "worker-3"))]
    assert topo.jobs[1].master_port == topo.jobs[0].master_port + 1


def test_every_name_carries_the_prefix_and_fits_ifnamsiz() -> None:
    topo = build_topology("rfabcdef", workers=MAX_WORKERS, jobs=16)
    names = topo.all_link_names()
    assert len(set(names)) == len(names)
    assert all(n.startswith("rfabcdef-") and len(n) <= IFNAME_MAX for n in names)
    assert all(topo.namespace(n).startswith("rfabcdef-") for n in topo.node_names())
    assert topo.fabric_namespace == "rfabcdef-fabric"


@pytest.mark.parametrize(
    ("name", "workers", "jobs", "message"),
    [
        ("lab1", 2, 1, "bad lab name"),
        ("rfABCD", 2, 1, "bad lab name"),
        ("rfabcdefg", 2, 1, "bad lab name"),
        ("rfab12", 1, 1, "between 2 and"),
        ("rfab12", MAX_WORKERS + 1, 1, "between 2 and"),
        ("rfab12", 3, 2, "cannot split"),
        ("rfab12", 4, 0, "cannot split"),
    ],
)
def test_bad_shapes_are_refused(name: str, workers: int, jobs: int, message: str) -> None:
    with pytest.raises(LabError, match=message):
        build_topology(name, workers, jobs)


def test_unknown_node_names_the_known_ones() -> None:
    with pytest.raises(LabError) as err:
        build_topology("rfab12").node("worker-7")
    assert "worker-1" in err.value.diagnostics()


@settings(max_examples=25, deadline=None)
@given(workers=st.integers(2, MAX_WORKERS), data=st.data())
def test_jobs_partition_the_workers_evenly(workers: int, data: st.DataObject) -> None:
    jobs = data.draw(st.integers(1, workers // 2))
    topo = build_topology("rfab12", workers, jobs)
    members = [m for j in topo.jobs for m in j.members]
    assert members == [f"worker-{i}" for i in range(workers)]
    sizes = [len(j.members) for j in topo.jobs]
    assert min(sizes) >= 2 and max(sizes) - min(sizes) <= 1
    policy = parse_policy(render_policy(topo))
    assert [j.members for j in policy.jobs] == [j.members for j in topo.jobs]
    assert len({a.id for a in policy.approved}) == len(policy.approved) == 3 * jobs + 4
