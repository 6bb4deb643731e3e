"""Inventory from an Ansible-style hosts file (INI or YAML).

A host's zone is the first group that lists it directly (in file order; ``all`` and ``ungrouped`` only
when nothing else does); its other groups — direct ones and, through ``:children``, the groups above
them — become roles (``group:NAME``). Its address is ``ansible_host`` or else its name. Host ranges
(``gpu[01:16].example``) are expanded the way Ansible does.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass, field

import yaml

from ringfence.inventory.interface import Host, InventoryError

_RANGE = re.compile(r"\[([0-9a-zA-Z]+):([0-9a-zA-Z]+)(?::([0-9]+))?\]")
_GENERIC = ("all", "ungrouped")


@dataclass
class _Tree:
    """Groups as read: direct members (host → where, address), children, in file order."""

    hosts: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    groups: dict[str, list[str]] = field(default_factory=dict)  # group → direct hosts
    children: dict[str, list[str]] = field(default_factory=dict)

    def member(self, group: str, host: str, where: str, address: str | None) -> None:
        self.groups.setdefault(group, [])
        if host not in self.groups[group]:
            self.groups[group].append(host)
        prev = self.hosts.get(host)
        if prev is None or (prev[1] is None and address is not None):
            self.hosts[host] = (prev[0] if prev else where, address)


def expand_range(pattern: str, where: str) -> list[str]:
    """Ansible host ranges: ``web[01:03]`` → web01 web02 web03; ``db-[a:c]``; ``[1:9:2]`` steps."""
    m = _RANGE.search(pattern)
    if m is None:
        return [pattern]
    lo, hi, step = m.group(1), m.group(2), int(m.group(3) or 1)
    if lo.isdigit() and hi.isdigit():
        width = len(lo) if lo.startswith("0") else 0
        values = [f"{n:0{width}d}" for n in range(int(lo), int(hi) + 1, step)]
    elif len(lo) == len(hi) == 1 and lo in string.ascii_letters and hi in string.ascii_letters:
        values = [chr(c) for c in range(ord(lo), ord(hi) + 1, step)]
    else:
        raise InventoryError(where, f"cannot expand host range {m.group(0)!r}")
    if not values or len(values) > 100_000:
        raise InventoryError(where, f"host range {m.group(0)!r} is empty or too large")
    head, tail = pattern[: m.start()], pattern[m.end() :]
    return [h for v in values for h in expand_range(head + v + tail, where)]


def parse_ini(text: str, source: str) -> _Tree:
    """The INI inventory format."""
    tree = _Tree()
    section, kind = "ungrouped", "hosts"
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        where = f"{source}:{lineno}"
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            m = re.fullmatch(r"\[([^\]:\s]+)(?::(children|vars))?\]", line)
            if m is None:
                raise InventoryError(where, f"cannot read section header {line!r}")
            section, kind = m.group(1), m.group(2) or "hosts"
            tree.groups.setdefault(section, [])
            continue
        if kind == "vars":
            continue
        if kind == "children":
            tree.children.setdefault(section, []).append(line.split()[0])
            continue
        fields = line.split()
        address = None
        for f in fields[1:]:
            key, sep, value = f.partition("=")
            if not sep:
                raise InventoryError(where, f"expected key=value after the host name, got {f!r}")
            if key == "ansible_host":
                address = value.strip("'\"")
        for host in expand_range(fields[0], where):
            tree.member(section, host, where, address)
    return tree


def parse_yaml(text: str, source: str) -> _Tree:
    """The YAML inventory format (``all: {hosts: …, children: {group: {hosts: …}}}``)."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise InventoryError(f"{source}:{mark.line + 1 if mark else 1}", f"not valid YAML: {exc}") from None
    tree = _Tree()
    if root is None:
        return tree
    _yaml_groups(root, tree, source, None)
    return tree


def _line(node: yaml.Node, source: str) -> str:
    return f"{source}:{node.start_mark.line + 1}"


def _mapping(node: yaml.Node, source: str, what: str) -> list[tuple[str, yaml.Node]]:
    if isinstance(node, yaml.ScalarNode) and node.value in ("", "~", "null"):
        return []
    if not isinstance(node, yaml.MappingNode):
        raise InventoryError(_line(node, source), f"{what} must be a mapping")
    out = []
    for k, v in node.value:
        if not isinstance(k, yaml.ScalarNode):
            raise InventoryError(_line(k, source), f"{what}: a key must be a name")
        out.append((str(k.value), v))
    return out


def _yaml_groups(node: yaml.Node, tree: _Tree, source: str, parent: str | None) -> None:
    for group, body in _mapping(node, source, "the inventory" if parent is None else f"children of {parent}"):
        tree.groups.setdefault(group, [])
        if parent is not None:
            tree.children.setdefault(parent, []).append(group)
        for key, value in _mapping(body, source, f"group {group}"):
            if key == "hosts":
                for host, hvars in _mapping(value, source, f"hosts of {group}"):
                    address = None
                    for vk, vv in _mapping(hvars, source, f"host {host}"):
                        if vk == "ansible_host":
                            if not isinstance(vv, yaml.ScalarNode):
                                raise InventoryError(_line(vv, source), f"host {host}: ansible_host must be a string")
                            address = str(vv.value)
                    for name in expand_range(host, _line(value, source)):
                        tree.member(group, name, _line(hvars, source), address)
            elif key == "children":
                _yaml_groups(value, tree, source, group)
            elif key != "vars":
                why = f"group {group}: unknown key {key!r}; expected hosts, children or vars"
                raise InventoryError(_line(value, source), why)


def hosts_of(tree: _Tree) -> list[Host]:
    """Hosts with zones and roles from a read inventory (see the module docstring)."""
    parents: dict[str, list[str]] = {}
    for group, kids in tree.children.items():
        for kid in kids:
            parents.setdefault(kid, []).append(group)

    def ancestors(group: str, seen: set[str]) -> list[str]:
        out: list[str] = []
        for p in parents.get(group, ()):
            if p not in seen:
                seen.add(p)
                out += [p, *ancestors(p, seen)]
        return out

    direct: dict[str, list[str]] = {}
    for group, members in tree.groups.items():
        for h in members:
            direct.setdefault(h, []).append(group)
    out: list[Host] = []
    for host, (where, address) in tree.hosts.items():
        groups = direct.get(host, [])
        specific = [g for g in groups if g not in _GENERIC]
        zone = (specific or groups or ["ungrouped"])[0]
        seen: set[str] = {zone}
        others = [g for g in groups if g != zone]
        for g in groups:
            others += ancestors(g, seen)
        roles = tuple(dict.fromkeys(f"group:{g}" for g in others if g not in _GENERIC and g != zone))
        out.append(Host(host, zone, (address or host,), where, roles))
    return out


def parse_hosts_file(text: str, source: str) -> list[Host]:
    """An Ansible inventory, YAML when the name ends ``.yml``/``.yaml`` (or it starts like YAML), else INI."""
    first = next((ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")), "")
    is_yaml = source.endswith((".yml", ".yaml")) or first == "---" or re.match(r"^[\w.-]+:\s*$", first) is not None
    tree = parse_yaml(text, source) if is_yaml else parse_ini(text, source)
    hosts = hosts_of(tree)
    if not hosts:
        raise InventoryError(source, "no hosts in the inventory")
    return hosts


__all__ = ["expand_range", "hosts_of", "parse_hosts_file", "parse_ini", "parse_yaml"]
