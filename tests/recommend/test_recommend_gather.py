"""NIC facts gathered from the nodes: the real gathering script, run here against stand-in tools on PATH."""

from __future__ import annotations

import json
import stat
from collections.abc import Sequence
from pathlib import Path

import pytest

from ringfence.facts import nic
from ringfence.recommend.gather import gather_nic
from ringfence.targets.interface import Host, RunResult, Site, TargetError
from ringfence.targets.local import LocalExecutor

IP = """#!/bin/sh
case "$*" in
  "-o addr show") printf '1: lo    inet 127.0.0.1/8 scope host lo\\n7: eth7    inet 10.9.9.9/24 brd 10.9.9.255\\n';;
  "-d link show dev eth7") printf '7: eth7: <BROADCAST,UP> mtu 9000\\n    link/ether 02:00:00:00:00:07\\n';;
  *) exit 1;;
esac
"""
ETHTOOL = """#!/bin/sh
[ "$1" = "-k" ] && [ "$2" = "eth7" ] || exit 1
printf 'Features for eth7:\\nesp-hw-offload: on\\nmacsec-hw-offload: off [fixed]\\n@@rf-0000 end\\n'
"""


def _bin(tmp_path: Path, tools: dict[str, str]) -> Path:
    d = tmp_path / "bin"
    d.mkdir()
    for name, text in tools.items():
        p = d / name
        p.write_text(text)
        p.chmod(p.stat().st_mode | stat.S_IXUSR)
    return d


def _site(hosts: dict[str, Host]) -> Site:
    return Site("unit", "ssh", hosts)


def _local(tmp_path: Path, tools: dict[str, str]) -> LocalExecutor:
    # no /usr/sbin on PATH: devlink is "not installed" here, like on a host without iproute2's devlink
    return LocalExecutor("w0", prefix=("env", f"PATH={_bin(tmp_path, tools)}:/usr/bin:/bin"))


def test_the_interface_of_the_nodes_address_and_its_offloads(tmp_path: Path) -> None:
    local = _local(tmp_path, {"ip": IP, "ethtool": ETHTOOL})
    doc = gather_nic(_site({"worker-0": Host("worker-0", "10.9.9.9", local)}))
    (row,) = doc["nodes"]
    assert row["interface"] == "eth7" and "esp-hw-offload: on" in row["ethtool_k"] and "mtu 9000" in row["ip_link"]
    assert row["devlink"] == "" and any("devlink not installed" in n for n in row["notes"])
    # a tool's output that looks like a section marker is just output: the markers are chosen per run
    assert "@@rf-0000 end" in row["ethtool_k"]
    data = json.dumps(doc).encode()
    caps = nic.load("gathered", data).value
    assert caps["worker-0"].has("ipsec") and not caps["worker-0"].has("macsec")


def test_a_node_without_ethtool_is_said_and_assumed_to_offload_nothing(tmp_path: Path) -> None:
    doc = gather_nic(_site({"worker-0": Host("worker-0", "10.9.9.9", _local(tmp_path, {"ip": IP}))}))
    (row,) = doc["nodes"]
    assert row["ethtool_k"] == "" and any("ethtool not installed" in n for n in row["notes"])
    caps = nic.load("gathered", json.dumps(doc).encode()).value
    assert not any(caps["worker-0"].has(x) for x in ("ipsec", "macsec", "tls"))


def test_no_interface_carries_the_address(tmp_path: Path) -> None:
    doc = gather_nic(_site({"worker-0": Host("worker-0", "10.1.1.1", _local(tmp_path, {"ip": IP}))}))
    (row,) = doc["nodes"]
    assert row["interface"] == "" and any("no interface carries 10.1.1.1" in n for n in row["notes"])


class _Down:
    name = "w1"

    def run(self, argv: Sequence[str], *, timeout: float = 30.0, stdin: bytes | None = None,
            env: object = None) -> RunResult:
        raise TargetError("w1: ssh: connect to host 10.9.9.10 port 22: Connection refused")


class _Silent:
    name = "w2"

    def run(self, argv: Sequence[str], *, timeout: float = 30.0, stdin: bytes | None = None,
            env: object = None) -> RunResult:
        return RunResult(tuple(argv), -9, b"@@rf-x iface eth0\n", b"", timeout, timed_out=True)


def test_a_host_that_cannot_be_asked_is_named_and_known_for_nothing(tmp_path: Path) -> None:
    site = _site({"worker-0": Host("worker-0", "10.9.9.9", _local(tmp_path, {"ip": IP, "ethtool": ETHTOOL})),
                  "worker-1": Host("worker-1", "10.9.9.10", _Down()),  # type: ignore[arg-type]
                  "worker-2": Host("worker-2", "10.9.9.11", _Silent())})  # type: ignore[arg-type]
    doc = gather_nic(site)
    assert [r["node"] for r in doc["nodes"]] == ["worker-0", "worker-1", "worker-2"]  # never dropped
    data = json.dumps(doc).encode()
    assert set(nic.load("g", data).value) == {"worker-0"}  # no capabilities, not "none", for the others
    why = nic.unreadable("g", data)
    assert "Connection refused" in why["worker-1"] and "no answer within" in why["worker-2"]


def test_an_unknown_node_is_refused_before_any_host_is_asked(tmp_path: Path) -> None:
    with pytest.raises(TargetError, match="has no node 'worker-9'"):
        gather_nic(_site({"worker-0": Host("worker-0", "10.9.9.9", _Down())}), ["worker-9"])  # type: ignore[arg-type]
