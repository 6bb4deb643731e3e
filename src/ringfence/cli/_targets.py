"""``--target lab|ssh|local`` for the action verbs: which site (hosts behind executors) a verb acts on.

``lab`` attaches to a running lab (``--name``) and takes its policy; ``ssh`` reads a hosts inventory
(``--hosts hosts.yaml``, e.g. from ``ringfence lab hosts -o``) and needs ``--policy``. The verbs act
on the :class:`~ringfence.targets.interface.Site` only, so the same code drives both.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ringfence.errors import InputError

if TYPE_CHECKING:
    from ringfence.policy import Policy
    from ringfence.targets.interface import Executor, Site

TARGETS = ("lab", "ssh", "local")


def add_target_arguments(parser: argparse.ArgumentParser, *, default: str = "lab",
                         choices: tuple[str, ...] = ("lab", "ssh")) -> None:
    """``--target``, ``--name`` (lab), ``--hosts`` and ``--policy`` (ssh) on ``parser``."""
    parser.add_argument("--target", default=default, choices=choices, help=f"where (default: {default})")
    parser.add_argument("--name", help="the lab's name (default: the only lab)")
    parser.add_argument("--hosts", help="--target ssh: the hosts inventory (YAML, e.g. from `ringfence lab hosts`)")
    parser.add_argument("--policy", dest="target_policy", metavar="POLICY",
                        help="--target ssh: the cluster's policy file (the lab knows its own)")


def site_for(args: argparse.Namespace) -> tuple[Site, Policy]:
    """The site and policy ``args`` name (see the module docstring)."""
    if args.target == "lab":
        from ringfence.lab import Lab

        lab = Lab.attach(args.name)
        return lab.site(), lab.policy()
    if args.target == "ssh":
        if not getattr(args, "target_policy", None):
            raise InputError("--policy", "--target ssh needs the cluster's policy file")
        from ringfence.policy import load_policy

        return _ssh_site(args), load_policy(args.target_policy)
    raise InputError("--target", f"{args.target!r}: this verb acts on a lab or on SSH hosts")


def _ssh_site(args: argparse.Namespace, *, precheck: bool = True) -> Site:
    if not args.hosts:
        raise InputError("--hosts", "--target ssh needs the hosts inventory (ringfence lab hosts -o hosts.yaml)")
    from ringfence.targets.fanout import require_reachable
    from ringfence.targets.hosts import load_hosts, ssh_site

    site = ssh_site(load_hosts(args.hosts))
    if precheck:
        # an action must not start on a site with a host down: it would be left half applied
        require_reachable(site, fanout=site.fanout, timeout=min(30.0, site.timeout))
    return site


def points_for(args: argparse.Namespace, *, precheck: bool = True
               ) -> tuple[str, dict[str, Executor], dict[str, tuple[str, ...]]]:
    """(target label, point → executor, node → addresses) for ``apply`` and ``probe``.

    The lab's points are its fabric and node namespaces; an SSH inventory's are its hosts (a host
    named ``fabric`` is the fabric point, as in the lab). ``precheck``: refuse when a host is
    unreachable (a change); without it (gathering facts) such a host's facts come back unknown.
    """
    if args.target == "lab":
        from ringfence.lab import Lab
        from ringfence.lab.points import lab_inventory, lab_points

        lab = Lab.attach(args.name)
        return f"lab:{lab.name}", lab_points(lab), lab_inventory(lab)
    if args.target == "ssh":
        site = _ssh_site(args, precheck=precheck)
        points = {n: site.executor(n) for n in sorted(site.hosts)}
        return f"ssh:{site.name}", points, {n: (site.address(n),) for n in sorted(site.hosts)}
    raise InputError("--target", f"unknown target {args.target!r}", hint="lab or ssh (with --hosts)")


def fabric_ports_for(args: argparse.Namespace) -> dict[str, tuple[str, ...]] | None:
    """Node → its bridge ports on the fabric point, where the target knows them (the lab); None otherwise."""
    if args.target != "lab":
        return None  # an SSH inventory names no switch ports: the switch's partitions are rendered for it
    from ringfence.lab import Lab
    from ringfence.lab.points import lab_fabric_ports

    return lab_fabric_ports(Lab.attach(args.name))


__all__ = ["TARGETS", "add_target_arguments", "fabric_ports_for", "points_for", "site_for"]
