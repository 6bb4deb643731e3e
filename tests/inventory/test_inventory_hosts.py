"""Ansible-style inventories (INI and YAML) → hosts with zones, roles and addresses."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ringfence.inventory import InventoryError, build_skeleton
from ringfence.inventory.hosts import expand_range, parse_hosts_file

INI = """# cluster inventory
bastion ansible_host=10.0.9.1

[gpu]
gpu[01:03].dc1 ansible_host=10.0.1.1
gpu04.dc1 ansible_host=10.0.1.4 ansible_user=ops

[storage]
st1 ansible_host=10.0.2.1
10.0.2.2

[train:children]
gpu

[gpu:vars]
ansible_user=ops
"""

YAML = """all:
  hosts:
    bastion:
      ansible_host: 10.0.9.1
  children:
    train:
      children:
        gpu:
          hosts:
            gpu01.dc1: {ansible_host: 10.0.1.1}
            gpu02.dc1:
              ansible_host: 10.0.1.2
    storage:
      hosts:
        st1: {ansible_host: 10.0.2.1}
      vars: {ansible_user: ops}
"""


def test_ini() -> None:
    hosts = {h.name: h for h in parse_hosts_file(INI, "inv.ini")}
    assert list(hosts) == ["bastion", "gpu01.dc1", "gpu02.dc1", "gpu03.dc1", "gpu04.dc1", "st1", "10.0.2.2"]
    assert hosts["bastion"].zone == "ungrouped" and hosts["bastion"].where == "inv.ini:2"
    assert hosts["gpu02.dc1"].zone == "gpu" and hosts["gpu02.dc1"].roles == ("group:train",)
    assert hosts["10.0.2.2"].addresses == ("10.0.2.2",)
    skeleton = build_skeleton("dc1", hosts.values())
    # a range shares one ansible_host: the second and third are reported, not given the same address
    assert [n.name for n in skeleton.policy.nodes] == ["bastion", "gpu01.dc1", "gpu04.dc1", "st1", "10.0.2.2"]
    assert sum("already host 'gpu01.dc1'" in u for u in skeleton.unresolved) == 2


def test_yaml() -> None:
    hosts = {h.name: h for h in parse_hosts_file(YAML, "inv.yml")}
    assert hosts["bastion"].zone == "all"
    assert (hosts["gpu01.dc1"].zone, hosts["gpu01.dc1"].roles) == ("gpu", ("group:train",))
    assert hosts["gpu02.dc1"].addresses == ("10.0.1.2",) and hosts["gpu02.dc1"].where == "inv.yml:12"
    skeleton = build_skeleton("dc1", hosts.values())
    assert {z.name for z in skeleton.policy.zones} == {"all", "gpu", "storage"} and not skeleton.unresolved


@pytest.mark.parametrize(
    ("text", "source", "where"),
    [
        ("[gpu\nh1\n", "i.ini", "i.ini:1"),
        ("[gpu]\nh1 ansible_host\n", "i.ini", "i.ini:2"),
        ("all:\n  hosts:\n    - h1\n", "i.yml", "i.yml:3"),
        ("all:\n  host:\n    h1:\n", "i.yml", "i.yml:3"),
        ("all:\n  hosts: {h1: {ansible_host: [1]}}\n", "i.yml", "i.yml:2"),
        ("all: [\n", "i.yml", "i.yml:"),
        ("# nothing\n", "i.ini", "i.ini"),
        ("[g]\nh[1:x]\n", "i.ini", "i.ini:2"),
    ],
)
def test_malformed_names_file_and_line(text: str, source: str, where: str) -> None:
    with pytest.raises(InventoryError) as exc:
        parse_hosts_file(text, source)
    assert exc.value.where.startswith(where)


def test_ranges() -> None:
    assert expand_range("w[08:10]", "x") == ["w08", "w09", "w10"]
    assert expand_range("db-[a:c]", "x") == ["db-a", "db-b", "db-c"]
    assert expand_range("n[1:5:2]", "x") == ["n1", "n3", "n5"]


@given(st.text(max_size=200))
def test_ini_parser_never_crashes(text: str) -> None:
    try:
        parse_hosts_file(text, "f.ini")
    except InventoryError:
        pass


@given(st.text(max_size=200))
def test_yaml_parser_never_crashes(text: str) -> None:
    try:
        parse_hosts_file(text, "f.yml")
    except InventoryError:
        pass
