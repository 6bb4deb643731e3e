"""Slurm inventory: scontrol text, sinfo --json (real 21.08 output and the 23.02+ shape), partitions, squeue."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ringfence.inventory import InventoryError, build_skeleton, parse_etc_hosts
from ringfence.inventory.slurm import (
    expand_hostlist,
    parse_scontrol_nodes,
    parse_scontrol_partitions,
    parse_sinfo_json,
    parse_squeue_json,
    with_partitions,
)

# The layout of `scontrol show nodes` (Slurm 22.05): multi-line records, values with spaces (OS=, Reason=).
SCONTROL = """NodeName=gpu01 Arch=x86_64 CoresPerSocket=32
   CPUAlloc=0 CPUEfctv=64 CPUTot=64 CPULoad=0.01
   AvailableFeatures=a100,ib
   ActiveFeatures=a100,ib
   Gres=gpu:a100:8
   NodeAddr=10.20.0.1 NodeHostName=gpu01 Version=22.05.8
   OS=Linux 5.15.0-91-generic #101-Ubuntu SMP Tue Nov 14 13:30:08 UTC 2023
   RealMemory=1024000 AllocMem=0 FreeMem=1000000 Sockets=2 Boards=1
   State=IDLE ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   Partitions=train,debug
   BootTime=2026-11-30T08:00:00 SlurmdStartTime=2026-11-30T08:01:00

NodeName=gpu02 Arch=x86_64 CoresPerSocket=32
   NodeAddr=gpu02.ib.cluster NodeHostName=gpu02 Version=22.05.8
   OS=Linux 5.15.0-91-generic #101-Ubuntu SMP Tue Nov 14 13:30:08 UTC 2023
   State=DOWN+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A
   Partitions=train
   Reason=Not responding [slurm@2026-11-30T09:00:00]

NodeName=login1 Arch=x86_64 NodeAddr=10.20.9.1 NodeHostName=login1 State=IDLE Partitions=(null)
"""

PARTITIONS = """PartitionName=train
   AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL
   Nodes=gpu[01-02]
   State=UP TotalCPUs=128 TotalNodes=2

PartitionName=debug
   Nodes=gpu01
"""


def test_scontrol_nodes() -> None:
    hosts = {h.name: h for h in parse_scontrol_nodes(SCONTROL, "nodes.txt")}
    assert hosts["gpu01"].addresses == ("10.20.0.1",) and hosts["gpu01"].zone == "train"
    assert hosts["gpu01"].roles == ("partition:debug",) and hosts["gpu01"].where == "nodes.txt:1"
    assert hosts["gpu02"].addresses == ("gpu02.ib.cluster",)
    assert hosts["login1"].zone == "unpartitioned"
    oneliner = "\n".join(" ".join(rec.split()) for rec in SCONTROL.split("\n\n"))
    assert parse_scontrol_nodes(oneliner, "o.txt") == [
        type(h)(h.name, h.zone, h.addresses, h.where.replace("nodes.txt", "o.txt").split(":")[0] + f":{i + 1}", h.roles)
        for i, h in enumerate(hosts.values())
    ]


def test_skeleton_resolves_names_through_a_hosts_file_only() -> None:
    hosts = parse_scontrol_nodes(SCONTROL, "nodes.txt")
    bare = build_skeleton("lab", hosts)
    assert [n.name for n in bare.policy.nodes] == ["gpu01", "login1"]
    assert any("gpu02" in u and "no IP address" in u and "nodes.txt:13" in u for u in bare.unresolved)
    resolved = build_skeleton("lab", hosts, resolve=parse_etc_hosts("10.20.0.2 gpu02.ib.cluster\n", "hosts"))
    assert resolved.policy.node("gpu02") is not None and resolved.policy.node("gpu02").addresses == ("10.20.0.2",)
    assert {z.name for z in resolved.policy.zones} == {"train", "unpartitioned"}


def test_partitions_assign_zones() -> None:
    hosts = with_partitions(parse_scontrol_nodes(SCONTROL, "n"), parse_scontrol_partitions(PARTITIONS, "p"))
    zones = {h.name: (h.zone, h.roles) for h in hosts}
    assert zones["gpu01"] == ("train", ("partition:debug",))
    assert zones["login1"][0] == "unpartitioned"


def test_real_sinfo_json(samples: Path) -> None:
    path = samples / "slurm" / "rivos_sinfo_out.json"
    hosts = parse_sinfo_json(path.read_text(), str(path))
    assert [h.name for h in hosts] == [f"cs{i}.example.company.com" for i in (2, 3, 4, 5)]
    assert {h.zone for h in hosts} == {"hw"}
    resolve = {f"cs{i}.example.company.com": f"10.0.0.{i}" for i in (2, 3, 4, 5)}
    skeleton = build_skeleton("rivos", hosts, resolve=resolve)
    assert len(skeleton.policy.nodes) == 4 and not skeleton.unresolved
    jobs = parse_squeue_json((samples / "slurm" / "rivos_squeue_out.json").read_text(), "sq", "rivos")
    assert [(w.name, w.members, w.identity) for w in jobs] == [
        ("job_name-26515966", ("cs75",), "slurm:rivos/job/26515966")
    ]  # the PENDING job holds no nodes and is no workload


def test_sinfo_json_of_newer_slurm() -> None:
    doc = {"sinfo": [
        {"nodes": {"nodes": ["g1", "g2"], "addresses": ["10.0.0.1", "10.0.0.2"]}, "partition": {"name": "gpu"}},
        {"nodes": {"nodes": ["g1"], "addresses": ["10.0.0.1"]}, "partition": {"name": "all"}},
    ]}  # fmt: skip
    hosts = {h.name: h for h in parse_sinfo_json(json.dumps(doc), "s.json")}
    assert hosts["g1"].zone == "gpu" and hosts["g1"].roles == ("partition:all",)
    assert hosts["g2"].addresses == ("10.0.0.2",)


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ('{"nodes": [{"name": 5}]}', "s.json: nodes[0].name"),
        ('{"nodes": [\n  {"name": "a",}\n]}', "s.json:2:"),
        ('{"jobs": 3}', "s.json"),
        ("[]", "s.json"),
    ],
)
def test_malformed_sinfo_names_the_place(text: str, where: str) -> None:
    with pytest.raises(InventoryError) as exc:
        parse_sinfo_json(text, "s.json")
    assert exc.value.where.startswith(where)


def test_malformed_scontrol_names_the_line() -> None:
    with pytest.raises(InventoryError, match="t.txt:2"):
        parse_scontrol_nodes("\nGarbage here NodeName=x\n", "t.txt")
    with pytest.raises(InventoryError, match="no NodeName"):
        parse_scontrol_nodes("", "t.txt")


def test_hostlists() -> None:
    assert expand_hostlist("gpu[01-03,7],cpu1", "x") == ["gpu01", "gpu02", "gpu03", "gpu7", "cpu1"]
    assert expand_hostlist("a[1-2]-ib", "x") == ["a1-ib", "a2-ib"]
    for bad in ("gpu[01-", "gpu]1[", "gpu[3-1]", "gpu[a-b]"):
        with pytest.raises(InventoryError):
            expand_hostlist(bad, "x")


@given(st.text(max_size=200))
def test_scontrol_parser_never_crashes(text: str) -> None:
    try:
        parse_scontrol_nodes(text, "f")
    except InventoryError:
        pass


@given(st.text(alphabet="ab01-,[]", max_size=30))
def test_hostlist_never_crashes(text: str) -> None:
    try:
        expand_hostlist(text, "f")
    except InventoryError:
        pass
