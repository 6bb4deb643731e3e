"""The SSH hosts inventory (``hosts.yaml``): which nodes, at which address, reached how.

::

    site: rf1                      # names the layers' state and what they create (default: the file's stem)
    hosts:
      worker-0:
        address: 10.77.1.10        # where its peers reach it (the policy's address)
        ssh: 10.77.1.10            # where sshd listens (default: address)
        port: 22
        user: root
        key: /path/admin_ed25519   # private key: key authentication only
        known_hosts: /path/known_hosts   # host keys are checked against it, never accepted on first sight
        python: [/usr/bin/python3] # how ringfence modules start there (default: python3)
        env: {PYTHONPATH: /opt/ringfence/src}
        client_prefix: [ip, netns, exec, rf1-jump]   # run the ssh client under this (the lab's jump host)
        interface: eth0            # the NIC the collective uses (GLOO_SOCKET_IFNAME)
        progress: /run/train/rank.json   # the training rank's progress file, if it runs one (targets.cluster)
        connect_timeout: 10
    fanout: 8                      # hosts contacted at once
    timeout: 60                    # seconds per host and command

Validated strictly at this edge: an unknown key, a wrong type or a missing field is an
:class:`~ringfence.errors.InputError` naming ``file:line`` and the field.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ringfence.errors import InputError
from ringfence.targets.interface import Host, Site


class HostEntry(BaseModel):
    """One host of the inventory."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    address: str = Field(min_length=1)
    ssh: str | None = None
    port: int = Field(default=22, ge=1, le=65535)
    user: str = Field(min_length=1)
    key: str = Field(min_length=1)
    known_hosts: str = Field(min_length=1)
    python: tuple[str, ...] = ("python3",)
    env: dict[str, str] = Field(default_factory=dict)
    client_prefix: tuple[str, ...] = ()
    interface: str | None = None
    progress: str | None = Field(default=None, min_length=1)
    connect_timeout: float = Field(default=10.0, gt=0, le=300)
    #: commands share one connection to the host (OpenSSH ControlMaster); false: a connection per command
    multiplex: bool = True


class Inventory(BaseModel):
    """The whole file."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    site: str | None = Field(default=None, min_length=1, max_length=12, pattern=r"^[a-z0-9][a-z0-9-]*$")
    hosts: dict[str, HostEntry] = Field(min_length=1)
    fanout: int = Field(default=8, ge=1, le=1024)
    timeout: float = Field(default=60.0, gt=0, le=3600)
    source: str = "<hosts>"  # where it was read from (set by the loader)


def _lines(node: yaml.Node, path: tuple[str, ...], out: dict[tuple[str, ...], int]) -> None:
    # a mapping entry is located by its key's line (set by the parent), not by its value's first child
    out.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            key = (*path, str(k.value))
            out[key] = k.start_mark.line + 1
            _lines(v, key, out)
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            _lines(v, (*path, str(i)), out)


def parse_hosts(text: str, source: str = "<hosts>") -> Inventory:
    """Parse inventory text; :class:`InputError` naming ``source:line`` and the field."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise InputError(f"{source}:{mark.line + 1 if mark else 1}", f"not valid YAML: {exc}") from exc
    if root is None or not isinstance(data, dict):
        raise InputError(f"{source}:1", "the hosts file must be a mapping with hosts:")
    lines: dict[tuple[str, ...], int] = {}
    _lines(root, (), lines)
    try:
        inv = Inventory.model_validate_json(json.dumps({**data, "source": source}, default=str))
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(str(p) for p in err["loc"])
        line = next((lines[loc[:n]] for n in range(len(loc), -1, -1) if loc[:n] in lines), 1)
        field = ".".join(loc) or "(top level)"
        more = f" (and {len(exc.errors()) - 1} more problem(s))" if len(exc.errors()) > 1 else ""
        raise InputError(f"{source}:{line}", f"{field}: {err['msg']}{more}") from exc
    return inv


def load_hosts(path: str | Path) -> Inventory:
    """Read and validate a hosts file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(str(p), f"cannot read the hosts file: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise InputError(f"{p}@{exc.start}", "the hosts file is not UTF-8 text") from exc
    inv = parse_hosts(text, str(p))
    return inv if inv.site else inv.model_copy(update={"site": p.stem[:12].lower() or "ssh"})


def ssh_site(inventory: Inventory) -> Site:
    """The inventory as a site whose every host is an OpenSSH executor (strict host-key checking)."""
    from ringfence.targets.ssh import SshExecutor

    hosts: dict[str, Host] = {}
    for name, h in sorted(inventory.hosts.items()):
        ex = SshExecutor(h.ssh or h.address, user=h.user, key=Path(h.key), known_hosts=Path(h.known_hosts),
                         port=h.port, name=name, prefix=h.client_prefix, connect_timeout=h.connect_timeout,
                         multiplex=h.multiplex)
        hosts[name] = Host(name, h.address, ex, python=h.python, env=dict(h.env), interface=h.interface,
                           progress=h.progress)
    return Site(inventory.site or "ssh", "ssh", hosts, fanout=inventory.fanout, timeout=inventory.timeout)


def dump_hosts(inventory: Mapping[str, Any]) -> str:
    """YAML text of an inventory document (what ``ringfence lab hosts -o`` writes)."""
    return yaml.safe_dump(dict(inventory), sort_keys=False)


__all__ = ["HostEntry", "Inventory", "dump_hosts", "load_hosts", "parse_hosts", "ssh_site"]
