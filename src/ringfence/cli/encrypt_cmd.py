"""``ringfence encrypt enable|disable|status|render|support``: encryption layers by traffic class."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ringfence.atomic import write_atomic
from ringfence.cli._targets import add_target_arguments
from ringfence.cli.rotate_cmd import register_rotate
from ringfence.errors import InputError


def _site(args: argparse.Namespace) -> Any:
    from ringfence.cli._targets import site_for

    return site_for(args)


def _evidence(args: argparse.Namespace) -> Any:
    if not getattr(args, "evidence", None):
        return None
    from ringfence.evidence import EvidenceStore

    return EvidenceStore.open(Path(args.evidence))


def _list(text: str | None) -> list[str]:
    return [x.strip() for x in (text or "").split(",") if x.strip()]


def _enable(args: argparse.Namespace) -> int:
    from ringfence.secure.layers import registry, tls_run, wireguard_run
    from ringfence.secure.layers.wireguard import LISTEN_PORT

    layer = registry.layer(args.layer)
    classes = _list(args.cls)
    if not classes:
        raise InputError("--class", "name at least one traffic class (storage, collective, management, replication)")
    site, policy = _site(args)
    evidence = _evidence(args)
    code = 0
    if layer.value == "tls":
        done = tls_run.enable_tls(site, policy, classes, evidence=evidence)
        out: dict[str, Any] = {"layer": "tls", "classes": list(done.classes), "services": list(done.services),
                               "ca_fingerprint": done.ca_fingerprint,
                               "nodes": {n.node: {"identity": n.identity, "fingerprint": n.fingerprint}
                                         for n in done.nodes}}
    elif layer.value == "wireguard":
        nodes = _list(args.nodes) or [m for j in policy.jobs for m in j.members]
        wg = wireguard_run.enable_wireguard(site, nodes, strict=not args.no_strict, evidence=evidence)
        wireguard_run.set_collective_class(site, classes)
        out = {"layer": "wireguard", "classes": classes, "nodes": list(wg.nodes), "interface": wg.interface,
               "public_keys": wg.public_keys, "strict": not args.no_strict, "handshakes": wg.handshakes}
        if wg.silent():
            # configured but proven to carry nothing: not a success (strict mode keeps the tunnels closed)
            sys.stderr.write(f"ringfence: WireGuard is enabled, but {', '.join(wg.silent())} did not handshake "
                             f"within {wireguard_run.HANDSHAKE_TIMEOUT_S:.0f} s: check that udp/{LISTEN_PORT} passes "
                             "between the nodes, or `ringfence encrypt disable --layer wireguard`\n")
            code = 1
    elif layer.value == "ipsec":
        from ringfence.secure.layers import ipsec_run
        from ringfence.secure.pki import parse_duration

        nodes = _list(args.nodes) or [m for j in policy.jobs for m in j.members]
        life = parse_duration(policy.keys.cert_lifetime, where="policy keys.cert_lifetime")
        ip = ipsec_run.enable_ipsec(site, nodes, cluster=policy.cluster, strict=not args.no_strict, lifetime=life,
                                    evidence=evidence)
        ipsec_run.set_collective_class(site, classes)
        out = {"layer": "ipsec", "classes": classes, "nodes": list(ip.nodes), "tunnels": list(ip.tunnels),
               "fingerprints": ip.fingerprints, "strict": not args.no_strict}
    else:
        raise InputError("--layer", f"{layer.value} cannot be run by ringfence (the lab's kernel lacks it "
                         f"or it is not ours to switch on); see `ringfence encrypt support --layer {layer.value}` "
                         "and `encrypt render`")
    sys.stdout.write(json.dumps(out, indent=2) + "\n")
    return code


def _disable(args: argparse.Namespace) -> int:
    from ringfence.secure.layers import registry, tls_run, wireguard_run

    layer = registry.layer(args.layer)
    site, _ = _site(args)
    if layer.value == "tls":
        tls_run.disable_tls(site)
    elif layer.value == "wireguard":
        wireguard_run.disable_wireguard(site)
    elif layer.value == "ipsec":
        from ringfence.secure.layers import ipsec_run

        ipsec_run.disable_ipsec(site)
    else:
        raise InputError("--layer", f"{layer.value} is never enabled by ringfence")
    print(f"{layer.value} disabled on {site.kind} {site.name}", file=sys.stderr)
    return 0


def _status(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from ringfence.secure.layers.runtime import StateStore

    site, _ = _site(args)
    sys.stdout.write(json.dumps(asdict(StateStore(site.name).read()), indent=2) + "\n")
    return 0


def _render(args: argparse.Namespace) -> int:
    from ringfence.policy import load_policy
    from ringfence.secure.layers import registry
    from ringfence.secure.layers.interface import Endpoint, RenderOptions

    policy = load_policy(args.policy)
    names = _list(args.nodes)
    if len(names) < 2:
        raise InputError("--nodes", "name at least two nodes of the policy")
    macs = dict(m.split("=", 1) for m in args.mac or [])
    nodes = {n.name: n for n in policy.nodes}
    ends = []
    for name in names:
        if name not in nodes:
            raise InputError(str(args.policy), f"no node {name!r} in the policy")
        n = nodes[name]
        ends.append(Endpoint(name, n.addresses[0], args.interface, macs.get(name),
                             n.identity or f"spiffe://{policy.cluster}/node/{name}"))
    pairs = tuple((a, b) for i, a in enumerate(ends) for b in ends[i + 1:])
    extra = {"job": args.job} if args.job else {}
    rendered = registry.renderer(args.layer).render(
        pairs, RenderOptions(cipher=args.cipher, offload=args.offload, extra=extra))
    out = Path(args.output)
    for r in rendered:
        for f in r.files:
            # Atomic and symlink-safe like every -o: a key must never land where a planted link points.
            write_atomic(out / r.node / f.path, f.content.encode(), mode=0o600 if f.secret else 0o644)
        print(f"{r.node}: {', '.join(f.path for f in r.files)}", file=sys.stderr)
        for step in r.apply:
            print(f"  apply: {step}", file=sys.stderr)
        for note in r.notes:
            print(f"  note: {note}", file=sys.stderr)
    return 0


def _support(args: argparse.Namespace) -> int:
    from ringfence.secure.layers import registry
    from ringfence.targets.local import LocalExecutor

    executor: Any
    if args.target == "local":
        executor = LocalExecutor()
    else:
        executor = _site(args)[0].executor(args.node or "worker-0")
    res = registry.renderer(args.layer).support(executor)
    sys.stdout.write(json.dumps(res.as_dict(), indent=2) + "\n")
    return 0 if res.available else 1


def register(sub: Any) -> None:
    """Add the ``encrypt`` verb."""
    p = sub.add_parser("encrypt", help="encryption layers by traffic class (tls, wireguard, macsec, ipsec, nccl-tls)")
    esub = p.add_subparsers(dest="encrypt_cmd", required=True, metavar="CMD")

    def target(sp: argparse.ArgumentParser, choices: tuple[str, ...] = ("lab", "ssh")) -> None:
        add_target_arguments(sp, choices=choices)

    s = esub.add_parser("enable", help="protect classes with a layer in the lab")
    s.add_argument("--class", dest="cls", required=True, help="traffic classes, comma-separated")
    s.add_argument("--layer", required=True, help="tls | wireguard | ipsec")
    s.add_argument("--nodes", help="nodes of a tunnel (wireguard, ipsec), comma-separated; default: the jobs' workers")
    s.add_argument("--no-strict", action="store_true", help="wireguard, ipsec: do not drop untunnelled traffic")
    s.add_argument("--evidence", help="evidence store to record fingerprints/public keys and the action in")
    target(s)
    s.set_defaults(func=_enable)

    s = esub.add_parser("disable", help="remove a layer from the lab")
    s.add_argument("--class", dest="cls", help="(informational) the classes it protected")
    s.add_argument("--layer", required=True)
    s.add_argument("--nodes", help="(ignored: a layer is removed from all its nodes)")
    target(s)
    s.set_defaults(func=_disable)

    s = esub.add_parser("status", help="which layer protects which class in the lab (JSON)")
    target(s)
    s.set_defaults(func=_status)

    s = esub.add_parser("render", help="write a layer's configuration for nodes of a policy (macsec, ipsec, ...)")
    s.add_argument("--layer", required=True, help="macsec | ipsec | wireguard | nccl-tls")
    s.add_argument("--policy", required=True, type=Path)
    s.add_argument("--nodes", required=True, help="comma-separated node names; every pair is linked")
    s.add_argument("--mac", action="append", help="NODE=MAC (macsec needs each NIC's MAC)")
    s.add_argument("--interface", default="eth0", help="NIC the layer binds to (default eth0)")
    s.add_argument("--cipher", default="gcm-aes-256")
    s.add_argument("--offload", default="off", choices=("off", "phy", "mac"), help="macsec offload")
    s.add_argument("--job", help="nccl-tls: the job the pre-shared key is for")
    s.add_argument("-o", "--output", required=True, help="directory; one subdirectory per node")
    s.set_defaults(func=_render)

    s = esub.add_parser("support", help="probe whether a node's kernel can run a layer (exit 1 if not)")
    s.add_argument("--layer", required=True, help="macsec | ipsec | wireguard | nccl-tls")
    s.add_argument("--node", help="node to probe in (default worker-0)")
    target(s, ("lab", "ssh", "local"))
    s.set_defaults(func=_support)

    register_rotate(esub)


__all__ = ["register"]
