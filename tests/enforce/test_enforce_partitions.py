"""Partition renderers: OpenSM partitions.conf, SONiC config_db JSON, Cumulus NVUE YAML, each parsed back."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml

from flow_kit import policy_variant
from ringfence.enforce.interface import EnforceError
from ringfence.enforce.partitions import nvue_startup, opensm_partitions, sonic_config_db
from ringfence.policy import Policy

GUIDS = {"worker-0": ["0x0002c90300001f2d"], "worker-1": ["0x0002c90300001f2e"]}
SWITCH = {"worker-0": ["Ethernet0"], "worker-1": ["Ethernet4"]}
NVUE_PORTS = {"worker-0": ["swp1"], "worker-1": ["swp2"]}
#: OpenSM's partition line: Name[=PKey][,flag[=value]]* : member[=full|limited|both][, member…] ;
_LINE = re.compile(r"^(?P<name>[\w.-]+)(=(?P<pkey>0x[0-9a-fA-F]{1,4}))?((,\s*[\w]+(=\w+)?)*)\s*:\s*"
                   r"(?P<members>[^;]*?)\s*;$")  # fmt: skip
_MEMBER = re.compile(r"^(ALL|SELF|ALL_CAS|ALL_SWITCHES|ALL_ROUTERS|0x[0-9a-fA-F]{1,16})(=(full|limited|both))?$")


def _policy(**partition: Any) -> Policy:
    def change(doc: dict[str, Any]) -> None:
        doc["jobs"][0]["partition"] = partition

    return policy_variant(change)


def _opensm(text: str) -> dict[str, tuple[int, dict[str, str]]]:
    """Parse partitions.conf back: name → (pkey, member → membership), checking every line's grammar."""
    out: dict[str, tuple[int, dict[str, str]]] = {}
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        m = _LINE.match(line)
        assert m, line
        members: dict[str, str] = {}
        for item in m["members"].split(","):
            mm = _MEMBER.match(item.strip())
            assert mm, item
            members[mm[1]] = mm[3] or "limited"
        out[m["name"]] = (int(m["pkey"], 16), members)
    return out


def test_opensm_one_full_partition_per_job_and_a_limited_default() -> None:
    parsed = _opensm(opensm_partitions(_policy(pkey=0x10), GUIDS))
    assert parsed["Default"] == (0x7FFF, {"ALL": "limited", "SELF": "full"})
    assert parsed["train-a"] == (0x10, {"0x0002c90300001f2d": "full", "0x0002c90300001f2e": "full"})


def test_sonic_vlan_members_and_vrf() -> None:
    db = json.loads(sonic_config_db(_policy(vlan=110, vrf="train-a"), SWITCH))
    assert db["VLAN"] == {"Vlan110": {"vlanid": "110", "members": ["Ethernet0", "Ethernet4"]}}
    assert db["VLAN_MEMBER"] == {"Vlan110|Ethernet0": {"tagging_mode": "untagged"},
                                 "Vlan110|Ethernet4": {"tagging_mode": "untagged"}}  # fmt: skip
    assert db["VRF"] == {"Vrftrain-a": {}} and db["VLAN_INTERFACE"] == {"Vlan110": {"vrf_name": "Vrftrain-a"}}
    for key in db["VLAN_MEMBER"]:  # SONiC keys: "Vlan<id>|<port>", the VLAN a declared one
        assert key.split("|")[0] in db["VLAN"]


def test_nvue_access_ports_and_svi_in_vrf() -> None:
    (doc,) = yaml.safe_load(nvue_startup(_policy(vlan=110, vrf="train-a"), NVUE_PORTS))
    conf = doc["set"]
    assert conf["bridge"]["domain"]["br_default"]["vlan"] == {"110": {}}
    assert conf["interface"]["swp1"] == {"type": "swp", "bridge": {"domain": {"br_default": {"access": 110}}}}
    assert conf["interface"]["vlan110"] == {"type": "svi", "vlan": 110, "ip": {"vrf": "train-a"}}
    assert conf["vrf"] == {"train-a": {}}


def test_missing_partition_or_port_is_an_error_naming_it() -> None:
    with pytest.raises(EnforceError, match="no job declares a partition pkey"):
        opensm_partitions(_policy(vlan=110), GUIDS)
    with pytest.raises(EnforceError, match="node worker-1 has no fabric port"):
        sonic_config_db(_policy(vlan=110), {"worker-0": ["Ethernet0"]})
