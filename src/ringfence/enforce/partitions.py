"""Render each job's fabric partition (``jobs[].partition``) for real fabrics.

- InfiniBand: an OpenSM ``partitions.conf`` (OpenSM's partition configuration grammar: ``Name=PKey[,flag…] :
  member[=full|limited|both], … ;``), one partition per job whose member ports are full members, and the default
  partition (0x7fff) left to the SM alone, every other port a *limited* member (limited members cannot talk to
  each other, so the default partition stops being a path between jobs).
- Ethernet: SONiC ``config_db.json`` tables (``VLAN``, ``VLAN_MEMBER``, ``VRF``, ``VLAN_INTERFACE``) and a Cumulus
  NVUE ``startup.yaml`` (one ``set`` document: bridge domain VLANs, access ports, SVIs in the job's VRF).

Node → port names are not in the policy (port GUIDs, switch ports): the caller passes them. A job without a
partition, or a member without a port, is an error naming it, never a silently open port.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

import yaml

from ringfence.enforce.interface import EnforceError
from ringfence.policy import Job, Policy

DEFAULT_PKEY: Final = 0x7FFF
_BRIDGE: Final = "br_default"


def _jobs(policy: Policy, need: str) -> list[Job]:
    jobs = [j for j in policy.jobs if j.partition is not None and getattr(j.partition, need) is not None]
    if not jobs:
        raise EnforceError(f"no job declares a partition {need}: nothing to render (policy jobs[].partition.{need})")
    return jobs


def _ports(job: Job, ports: Mapping[str, Sequence[str]]) -> list[str]:
    out: list[str] = []
    for node in job.members:
        mine = ports.get(node)
        if not mine:
            raise EnforceError(f"job {job.name}: node {node} has no fabric port given (a port GUID or switch port)")
        out.extend(mine)
    return out


def opensm_partitions(policy: Policy, guids: Mapping[str, Sequence[str]]) -> str:
    """``partitions.conf`` text: the default partition limited, one full-member partition per job."""
    lines = [
        "# Rendered by ringfence from the policy's jobs[].partition: one partition per job.",
        "# Default partition: only the SM is a full member, so ports cannot use it to reach each other.",
        f"Default={DEFAULT_PKEY:#06x}, ipoib : ALL=limited, SELF=full ;",
    ]
    for job in _jobs(policy, "pkey"):
        assert job.partition is not None and job.partition.pkey is not None
        members = ", ".join(f"{g}=full" for g in _ports(job, guids))
        lines.append(f"{job.name}={job.partition.pkey:#06x} : {members} ;")
    return "\n".join(lines) + "\n"


def _vrf_name(job: Job) -> str | None:
    assert job.partition is not None
    return job.partition.vrf


def sonic_config_db(policy: Policy, ports: Mapping[str, Sequence[str]]) -> str:
    """SONiC ``config_db.json`` fragment: a VLAN per job, its members' ports untagged in it, its SVI in a VRF."""
    db: dict[str, dict[str, Any]] = {"VLAN": {}, "VLAN_MEMBER": {}, "VRF": {}, "VLAN_INTERFACE": {}}
    for job in _jobs(policy, "vlan"):
        assert job.partition is not None and job.partition.vlan is not None
        vlan = f"Vlan{job.partition.vlan}"
        members = _ports(job, ports)
        db["VLAN"][vlan] = {"vlanid": str(job.partition.vlan), "members": members}
        for port in members:
            db["VLAN_MEMBER"][f"{vlan}|{port}"] = {"tagging_mode": "untagged"}
        vrf = _vrf_name(job)
        if vrf is not None:
            sonic_vrf = f"Vrf{vrf}" if not vrf.startswith("Vrf") else vrf  # SONiC VRF names start with "Vrf"
            db["VRF"][sonic_vrf] = {}
            db["VLAN_INTERFACE"][vlan] = {"vrf_name": sonic_vrf}
    return json.dumps({k: v for k, v in db.items() if v}, indent=2, sort_keys=True) + "\n"


def nvue_startup(policy: Policy, ports: Mapping[str, Sequence[str]]) -> str:
    """Cumulus NVUE ``startup.yaml``: VLANs in the default bridge, member ports as access ports, SVIs in VRFs."""
    interfaces: dict[str, Any] = {}
    vlans: dict[str, Any] = {}
    vrfs: dict[str, Any] = {}
    for job in _jobs(policy, "vlan"):
        assert job.partition is not None and job.partition.vlan is not None
        vid = job.partition.vlan
        vlans[str(vid)] = {}
        for port in _ports(job, ports):
            interfaces[port] = {"type": "swp", "bridge": {"domain": {_BRIDGE: {"access": vid}}}}
        vrf = _vrf_name(job)
        if vrf is not None:
            vrfs[vrf] = {}
            interfaces[f"vlan{vid}"] = {"type": "svi", "vlan": vid, "ip": {"vrf": vrf}}
    config: dict[str, Any] = {"bridge": {"domain": {_BRIDGE: {"vlan": vlans}}}, "interface": interfaces}
    if vrfs:
        config["vrf"] = vrfs
    text: str = yaml.safe_dump([{"set": config}], sort_keys=True, default_flow_style=False)
    return text


#: format name → renderer. The one place a format is added.
PARTITION_FORMATS: Final = {"opensm": opensm_partitions, "sonic": sonic_config_db, "nvue": nvue_startup}

__all__ = ["DEFAULT_PKEY", "PARTITION_FORMATS", "nvue_startup", "opensm_partitions", "sonic_config_db"]
