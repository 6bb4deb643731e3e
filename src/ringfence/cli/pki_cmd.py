"""``ringfence pki init|issue|rotate|revoke|show``: the cluster CA and workload certificates."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ringfence.cli._lazy import OneOf
from ringfence.errors import InputError

if TYPE_CHECKING:
    from ringfence.secure import pki

# cryptography is imported by ringfence.secure.pki only when a pki command runs, not at start-up.
_ALGORITHMS = OneOf("ringfence.secure.pki", "ALGORITHMS")


def _policy_keys(args: argparse.Namespace) -> tuple[str | None, timedelta | None]:
    """(cluster, cert lifetime) from ``--policy``, when given."""
    from ringfence.secure import pki

    if not getattr(args, "policy", None):
        return None, None
    from ringfence.policy import load_policy

    policy = load_policy(args.policy)
    return policy.cluster, pki.parse_duration(policy.keys.cert_lifetime, where=f"{args.policy}: keys.cert_lifetime")


def _lifetime(args: argparse.Namespace, default: str) -> timedelta:
    from ringfence.secure import pki

    if args.lifetime:
        return pki.parse_duration(args.lifetime, where="--lifetime")
    _, from_policy = _policy_keys(args)
    return from_policy or pki.parse_duration(default)


def _print(info: pki.CertInfo, args: argparse.Namespace, extra: dict[str, object] | None = None) -> None:
    data: dict[str, object] = {**info.as_dict(), **(extra or {})}
    if args.json:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    else:
        for k, v in data.items():
            print(f"{k:13} {v}")


def _init(args: argparse.Namespace) -> int:
    from ringfence.secure import pki

    cluster = args.cluster or _policy_keys(args)[0]
    if not cluster:
        raise InputError("--cluster", "the cluster name is needed (or --policy to take it from a policy file)")
    info = pki.init_ca(
        args.dir,
        cluster,
        algorithm=args.algorithm,
        lifetime=pki.parse_duration(args.ca_lifetime, where="--ca-lifetime"),
        force=args.force,
    )
    _print(info, args, {"ca_dir": f"{args.dir}/ca"})
    return 0


def _identity(args: argparse.Namespace) -> str:
    from ringfence.secure import pki

    chosen = [x for x in (args.identity, args.node, args.user, args.job) if x]
    if len(chosen) != 1:
        raise InputError("arguments", "give exactly one of --identity, --node, --user, --job (with --rank)")
    if args.identity:
        return str(args.identity)
    cluster = pki.ca_cluster(pki.load_ca(args.dir)[0])
    if args.job:
        if args.rank is None:
            raise InputError("--rank", "--job needs --rank N")
        return pki.job_rank_identity(cluster, args.job, args.rank)
    kind, name = ("node", args.node) if args.node else ("user", args.user)
    return pki.parse_identity(f"spiffe://{cluster}/{kind}/{name}").uri


def _issue(args: argparse.Namespace) -> int:
    from ringfence.secure import pki

    issued = pki.issue(
        args.dir, _identity(args), lifetime=_lifetime(args, "24h"), out_dir=args.out, algorithm=args.algorithm
    )
    _print(issued.info, args, {"directory": str(issued.directory), "key_mode": "0600"})
    return 0


def _rotate(args: argparse.Namespace) -> int:
    from ringfence.secure import pki

    old, new = pki.rotate(args.dir, args.cert_dir, lifetime=_lifetime(args, "24h"))
    _print(new.info, args, {"directory": str(new.directory), "replaced": old.fingerprint})
    return 0


def _revoke(args: argparse.Namespace) -> int:
    from ringfence.secure import pki

    fp = pki.revoke(args.dir, args.cert)
    print(f"revoked {fp}")
    return 0


def _show(args: argparse.Namespace) -> int:
    from ringfence.secure import pki

    _print(pki.show(args.path), args)
    return 0


def register(sub: Any) -> None:
    """Add the ``pki`` verb."""
    p = sub.add_parser("pki", help="cluster CA and short-lived workload certificates")
    psub = p.add_subparsers(dest="pki_cmd", required=True, metavar="CMD")

    def common(sp: argparse.ArgumentParser, *, with_dir: bool = True) -> None:
        if with_dir:
            sp.add_argument("dir", help="the PKI directory (holds ca/ and nodes/)")
        sp.add_argument("--json", action="store_true", help="print JSON instead of text")

    s = psub.add_parser("init", help="create the cluster CA")
    common(s)
    s.add_argument("--cluster", help="trust domain (spiffe://<cluster>); default: the policy's cluster")
    s.add_argument("--policy", help="policy file to take the cluster name from")
    s.add_argument("--algorithm", type=_ALGORITHMS, metavar="ALG", default="ec-p256",
                   help="key algorithm (default ec-p256; a wrong one lists them)")
    s.add_argument("--ca-lifetime", default="365d", help="CA validity (default 365d)")
    s.add_argument("--force", action="store_true", help="replace an existing CA")
    s.set_defaults(func=_init)

    s = psub.add_parser("issue", help="issue a workload certificate into its own directory")
    common(s)
    s.add_argument("--identity", help="full spiffe:// identity URI")
    s.add_argument("--node", help="node name: spiffe://<cluster>/node/<NODE>")
    s.add_argument("--user", help="user name: spiffe://<cluster>/user/<USER>")
    s.add_argument("--job", help="job name (with --rank): spiffe://<cluster>/job/<JOB>/rank/<N>")
    s.add_argument("--rank", type=int)
    s.add_argument("--out", help="directory for cert.pem, key.pem (0600), ca.pem (default DIR/nodes/<name>)")
    s.add_argument("--lifetime", help="validity like 24h, 30m, 7d (default: policy keys.cert_lifetime, else 24h)")
    s.add_argument("--policy", help="policy file whose keys.cert_lifetime sets the lifetime")
    s.add_argument("--algorithm", type=_ALGORITHMS, metavar="ALG", default="ec-p256",
                   help="key algorithm (default ec-p256; a wrong one lists them)")
    s.set_defaults(func=_issue)

    s = psub.add_parser("rotate", help="re-issue a certificate with a new key, same identity")
    common(s)
    s.add_argument("cert_dir", help="the directory holding cert.pem and key.pem")
    s.add_argument("--lifetime", help="validity (default: policy keys.cert_lifetime, else 24h)")
    s.add_argument("--policy", help="policy file whose keys.cert_lifetime sets the lifetime")
    s.set_defaults(func=_rotate)

    s = psub.add_parser("revoke", help="add a certificate's fingerprint to the CA's revocation list")
    common(s)
    s.add_argument("cert", help="certificate file to revoke")
    s.set_defaults(func=_revoke)

    s = psub.add_parser("show", help="public facts of a certificate (never key material)")
    common(s, with_dir=False)
    s.add_argument("path", help="a certificate file or a directory holding cert.pem")
    s.set_defaults(func=_show)
