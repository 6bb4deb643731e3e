"""``ringfence attest enroll|verify|status --target lab|ssh [-o FILE]``: node attestation before the fabric.

``enroll`` creates each fabric member's EK and AK and proves by credential activation that they share a
TPM; ``verify`` quotes every member with a fresh nonce, admits the verified ones at the fabric's gate for
the policy interval and cuts the others off (``--probe`` proves both with collective-port probes,
``--drill NODE`` first shows NODE a replayed quote, ``--watch`` re-attests every half interval);
``status`` shows the registry and who the gate admits now. Exit 0: every node enrolled / admitted;
1: any refused (each named with why); 2: bad input.

With ``--target lab`` the members are the lab's job ranks, their TPMs are the lab's swtpm (started on
first use) and the allowlist is the lab's own stack unless ``--policy`` gives one; with ``--target ssh``
the TPM is ``/dev/tpmrm0`` (``--tcti``), the gate is the inventory's host ``fabric`` (``--gate``) and
``--policy`` must have an ``attestation`` section.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ringfence.cli._targets import add_target_arguments
from ringfence.errors import InputError

if TYPE_CHECKING:
    from cryptography import x509

    from ringfence.attest.ekcrl import EkCrl
    from ringfence.attest.run import AttestSite
    from ringfence.policy.attestation import Attestation

_REMOTE_DIR = "/var/lib/ringfence/attest"


def _lab_site(args: argparse.Namespace) -> tuple[AttestSite, Attestation]:
    from ringfence.lab import Lab
    from ringfence.lab.attest import attest_site, lab_allowlist
    from ringfence.policy import load_policy

    lab = Lab.attach(args.name)
    if args.target_policy:
        from ringfence.attest.verifier import require_policy

        allow = require_policy(load_policy(args.target_policy).attestation, args.target_policy)
    else:  # the lab's approved stack is what this machine runs
        allow = lab_allowlist()
    return attest_site(lab, args.nodes), allow


def _ssh_site(args: argparse.Namespace) -> tuple[AttestSite, Attestation]:
    from ringfence.attest.gate import Gate
    from ringfence.attest.node import DEVICE_TCTI, NodeTpm
    from ringfence.attest.run import AttestSite
    from ringfence.attest.verifier import require_policy
    from ringfence.cli._targets import site_for

    site, policy = site_for(args)
    allow = require_policy(policy.attestation, args.target_policy)
    jobs = tuple((j.name, tuple(m for m in j.members if m in site.hosts), args.probe_port) for j in policy.jobs)
    nodes = args.nodes or sorted({m for _, members, _ in jobs for m in members})
    tpms = {n: NodeTpm(site.executor(n), args.tcti or DEVICE_TCTI, f"{_REMOTE_DIR}/work",
                       args.event_log or f"{_REMOTE_DIR}/eventlog.json", args.ima_list or "") for n in nodes}
    return AttestSite(f"ssh-{site.name}", tpms, site.hosts, Gate(site.executor(args.gate)), jobs), allow


def _site(args: argparse.Namespace) -> tuple[AttestSite, Attestation]:
    if args.target == "lab":
        return _lab_site(args)
    if args.target == "ssh":
        return _ssh_site(args)
    raise InputError("--target", f"{args.target!r}: attest acts on a lab or on SSH hosts")


def _registry(args: argparse.Namespace, site: str) -> Path:
    from ringfence.attest.registry import default_registry_path

    return Path(args.registry) if args.registry else default_registry_path(site)


def _write(args: argparse.Namespace, doc: dict[str, Any]) -> None:
    from ringfence.enforce.facts import write_json

    if args.output:
        write_json(args.output, doc)
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        print(json.dumps(doc, indent=1))


def _ek_trust(args: argparse.Namespace) -> tuple[tuple[x509.Certificate, ...], tuple[EkCrl, ...]]:
    """The EK roots and CRLs that ``--policy`` lists, read before any node is contacted: a missing or
    malformed file is an error naming it (exit 2), never an enrolment without the check it asked for."""
    if not args.target_policy:
        return (), ()  # the lab's own allowlist lists neither
    from ringfence.attest.ekcert import load_ek_roots
    from ringfence.attest.ekcrl import load_ek_crls
    from ringfence.policy import load_policy

    allow = load_policy(args.target_policy).attestation
    if allow is None:
        return (), ()  # _site refuses it, saying what is missing
    base = Path(args.target_policy).parent
    return load_ek_roots(allow.ek_roots, base), load_ek_crls(allow.ek_crls, base)


def _enroll(args: argparse.Namespace) -> int:
    from ringfence.attest.verifier import enrol

    roots, crls = _ek_trust(args)
    site, _ = _site(args)
    outcomes = enrol([site.tpms[n] for n in sorted(site.tpms)], _registry(args, site.name), site.name,
                     ek_roots=roots, ek_crls=crls)
    for o in outcomes:
        print(f"{o.node}: {'enrolled' if o.enrolled else 'REFUSED'}: {o.reason}", file=sys.stderr)
    _write(args, {"site": site.name, "nodes": [{"node": o.node, "enrolled": o.enrolled, "reason": o.reason,
                                                 "ek_sha256": o.ek_sha256} for o in outcomes]})
    return 0 if all(o.enrolled for o in outcomes) else 1


def _verify(args: argparse.Namespace) -> int:
    from ringfence.attest.run import Round, attest_round, facts_document, watch
    from ringfence.evidence import EvidenceStore
    from ringfence.evidence.store import default_store_path

    site, allow = _site(args)
    store = EvidenceStore.open(Path(args.store) if args.store else default_store_path())
    registry = _registry(args, site.name)

    def show(rnd: Round) -> None:
        for d in rnd.decisions:
            why = "; ".join(d.reasons) if d.reasons else "quote, event log and allowlist agree"
            print(f"{d.node}: {'admitted' if d.admitted else 'REFUSED'}: {why}", file=sys.stderr)
        for p in rnd.probes:
            print(f"probe {p.source} → {p.target}:{p.port}: expected {p.expected}, {p.outcome} ({p.verdict})",
                  file=sys.stderr)

    if args.watch:
        watch(site, allow, registry, store=store, rounds=args.rounds, report=show)
        return 0
    rnd = attest_round(site, allow, registry, store=store, do_probe=args.probe, drill=args.drill)
    show(rnd)
    _write(args, facts_document(site, allow, rnd))
    final = {d.node: d.admitted for d in rnd.decisions}  # a drilled node's second verdict is its last
    probes_ok = all(p.verdict == "pass" for p in rnd.probes)
    return 0 if all(final.values()) and probes_ok else 1


def _status(args: argparse.Namespace) -> int:
    from ringfence.attest.registry import read_registry

    site, _ = _site(args)
    reg = read_registry(_registry(args, site.name), site.name)
    admitted = site.gate.admitted()
    addrs = site.addresses()
    nodes = []
    for n in sorted(site.tpms):
        left = [admitted[a] for a in addrs.get(n, ()) if a in admitted]
        e = reg.nodes.get(n)
        nodes.append({"node": n, "enrolled": e is not None, "ek_sha256": e.ek_sha256 if e else None,
                      "admitted": bool(left), "seconds_left": left[0] if left else None,
                      "tcti": site.tpms[n].tcti})
        print(f"{n}: {'enrolled' if e else 'not enrolled'}, "
              f"{'admitted (' + str(left[0]) + ' s left)' if left else 'not admitted'}", file=sys.stderr)
    _write(args, {"site": site.name, "nodes": nodes})
    return 0 if all(x["admitted"] for x in nodes) else 1


def register(sub: Any) -> None:
    """Add the ``attest`` verb."""
    p = sub.add_parser("attest", help="TPM attestation of fabric members, and the gate that admits only them")
    verbs = p.add_subparsers(dest="attest_verb", metavar="STEP", required=True)
    for name, func, text in (("enroll", _enroll, "create and enrol each node's EK and AK"),
                             ("verify", _verify, "quote every node, admit or cut it off at the fabric"),
                             ("status", _status, "the registry and who the gate admits now")):
        q = verbs.add_parser(name, help=text)
        add_target_arguments(q)
        q.add_argument("--nodes", nargs="+", metavar="NODE", help="attest these nodes (default: every job rank)")
        q.add_argument("--registry", metavar="FILE", help="the verifier's enrolment record "
                       "(default: .ringfence/attest/SITE.json, or $RINGFENCE_ATTEST_DIR)")
        q.add_argument("--tcti", help="--target ssh: the nodes' TCTI (default: device:/dev/tpmrm0)")
        q.add_argument("--event-log", help=f"--target ssh: the event log on the nodes, ringfence's JSON or the "
                       f"binary UEFI log (/sys/kernel/security/tpm0/binary_bios_measurements; "
                       f"default: {_REMOTE_DIR}/eventlog.json)")
        q.add_argument("--ima-list", help="--target ssh: also read and judge the nodes' IMA list "
                       "(e.g. /sys/kernel/security/ima/ascii_runtime_measurements)")
        q.add_argument("--gate", default="fabric", help="--target ssh: the inventory host whose nftables "
                       "forwards the fabric (default: fabric)")
        q.add_argument("--probe-port", type=int, default=29500, help="--target ssh: rank 0's rendezvous port")
        q.add_argument("-o", "--output", metavar="FILE", help="write the JSON result here (default: stdout)")
        if name == "verify":
            q.add_argument("--probe", action="store_true", help="probe rank 0's port from each rank afterwards")
            q.add_argument("--drill", metavar="NODE",
                           help="first show NODE a replay of its own old quote (must be refused and cut off)")
            q.add_argument("--watch", action="store_true", help="re-attest every half interval until stopped")
            q.add_argument("--rounds", type=int, help="--watch: stop after this many rounds")
            q.add_argument("--store", help="evidence store (default: $RINGFENCE_EVIDENCE or .ringfence/evidence)")
        q.set_defaults(func=func)


__all__ = ["register"]
