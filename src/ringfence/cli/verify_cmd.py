"""``ringfence verify confidentiality|keys``: the confidentiality side, from the wire and from live live.

``confidentiality`` captures the lab (or reads ``--capture``), and reports per class the payload
bytes encrypted / plaintext / handshake-only / unknown, covered-vs-exempt and the scope check.
``keys`` additionally rotates every enabled layer's keys under load, breaks a key on purpose to show
the traffic fails closed, and checks that expired, revoked and foreign-CA credentials are refused.
The JSON written is the ``Facts.keys`` mapping ``assess`` hands to the ``encryption_keys`` control.
Exit 0 when everything passes (or is exempt), 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from ringfence.atomic import write_atomic
from ringfence.errors import InputError


def _enabled(args: argparse.Namespace, name: str | None) -> dict[str, str]:
    if args.enabled:
        return dict(e.split("=", 1) for e in args.enabled)
    if name is None:
        return {}
    from ringfence.secure.layers.runtime import StateStore

    return dict(StateStore(name).read().classes)


def _table(report: Any) -> None:
    print(f"{'class':13} {'verdict':8} {'encrypted':>12} {'plaintext':>12} {'handshake':>10} {'unknown':>10}  "
          "coverage", file=sys.stderr)
    cov = {c.traffic_class: c for c in report.coverage}
    for c in report.classes:
        p = c.payload
        where = cov[c.traffic_class].reason if c.traffic_class in cov else ""
        print(f"{c.traffic_class:13} {c.verdict.value:8} {p['encrypted']:>12} {p['plaintext']:>12} "
              f"{p['handshake-only']:>10} {p['unknown']:>10}  {where}", file=sys.stderr)
    for s in report.scope:
        if s.verdict.value == "fail":
            print(f"scope: {s.path} ({s.traffic_class}, {s.boundary}): {s.reason}", file=sys.stderr)
    for r in report.rotation:
        print(f"rotation {r.layer}: {r.verdict.value}: {r.detail}", file=sys.stderr)
    for f in report.fail_closed:
        print(f"fail-closed {f.layer}: {f.verdict.value}: {f.error}; {f.detail}", file=sys.stderr)
    for c in report.credentials:
        print(f"credential {c.kind}: expected {c.expected}, {c.outcome}: {c.verdict.value}", file=sys.stderr)
    print(f"verdict: {report.verdict.value}", file=sys.stderr)


def _run(args: argparse.Namespace, *, drills: bool) -> int:
    from ringfence.analyze import classify
    from ringfence.observe.flows.pcap import PcapReader
    from ringfence.policy import load_policy, parse_policy
    from ringfence.secure import drills as live
    from ringfence.secure import verify

    lab = None
    site = None
    cluster: live.Cluster | None = None  # what the live drills observe and act on
    if args.target == "ssh" and (args.capture is None or drills):
        # the capture is taken on the hosts themselves, over SSH (egress of every host, merged); the drills
        # watch the job through the ranks' progress files (``progress:`` in the hosts file)
        from ringfence.cli._targets import site_for
        from ringfence.targets.cluster import SiteCluster

        site, ssh_policy = site_for(argparse.Namespace(**{**vars(args), "target_policy": args.policy}))
        cluster = SiteCluster(site, ssh_policy)
        if drills and not cluster.progress_hosts():
            raise InputError("--hosts", "the live drills watch the training job, but no host of the inventory "
                             "names its rank's progress file (`progress:`); give it, or use `verify "
                             "confidentiality`")
    elif args.capture is None or drills:
        if args.target != "lab":
            raise InputError("--target", "the live drills need a running job to watch: --target lab or --target "
                             "ssh; `verify confidentiality --capture FILE` judges a capture alone")
        from ringfence.lab import Lab

        lab = Lab.attach(args.name)
        cluster = lab
    policy = load_policy(args.policy) if args.policy else (
        parse_policy(lab.policy_yaml(), source=f"lab {lab.name}") if lab is not None else None)
    if policy is None:
        raise InputError("--policy", "a policy is needed when verifying a capture without a lab")
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="rf-verify-"))
    work.mkdir(parents=True, exist_ok=True)
    before = classify(PcapReader().read(Path(args.before)).flows, policy) if args.before else None
    if args.capture:
        flows = classify(PcapReader().read(Path(args.capture)).flows, policy)
    elif site is not None:
        from ringfence.targets.capture import capture_site

        print(f"capturing {args.seconds:g}s on every host of {site.kind} site {site.name}", file=sys.stderr)
        taken = capture_site(site, args.seconds, work / "verify.pcap")
        if taken.left_out:  # the filter each host used is in SiteCapture.left_out; one line here is enough
            print(f"not judged: the SSH connection each capture came back on ({len(taken.left_out)} of "
                  f"{len(taken.nodes)} hosts: {', '.join(sorted(taken.left_out))})", file=sys.stderr)
        flows = classify(PcapReader().read(taken.path).flows, policy)
    else:
        assert lab is not None
        print(f"capturing {args.seconds:g}s of lab {lab.name}", file=sys.stderr)
        flows = live.capture_flows(lab, args.seconds, work / "verify.pcap", policy)
    rotation: tuple[Any, ...] = ()
    fail_closed: list[Any] = []
    credentials: tuple[Any, ...] = ()
    inventory: tuple[Any, ...] = ()
    enabled = _enabled(args, lab.name if lab is not None else site.name if site is not None else None)
    if cluster is not None:
        inventory = live.inventory(cluster)
    if drills:
        assert cluster is not None
        layers = set(enabled.values())
        print("rotating keys under load", file=sys.stderr)
        rotation = live.rotate_under_load(cluster)
        if "wireguard" in layers:
            print("fail-closed drill: wrong WireGuard key", file=sys.stderr)
            fail_closed.append(live.fail_closed_wireguard(cluster, policy, work))
        if "tls" in layers:
            print("fail-closed drill: untrusted certificate", file=sys.stderr)
            fail_closed.append(live.fail_closed_tls(cluster, policy, work))
            credentials = live.credential_checks(cluster, work)
        inventory = live.inventory(cluster)
    evidence_ids: list[str] = []
    report = verify.judge(flows, policy, enabled, before=before, rotation=rotation, fail_closed=fail_closed,
                          credentials=credentials, inventory=inventory)
    if args.evidence:
        from ringfence.evidence import EvidenceStore, RecordKind

        store = EvidenceStore.open(Path(args.evidence))
        subject = f"lab {lab.name}" if lab else f"ssh {site.name}" if site else str(args.capture)
        evidence_ids.append(str(store.append(RecordKind.OBSERVATION, source="verify:confidentiality",
                                             subject=subject,
                                             data=report.facts_keys())))
    keys = report.facts_keys()
    keys["evidence"] = evidence_ids
    text = json.dumps(keys, indent=2) + "\n"
    if args.output:
        write_atomic(args.output, text.encode())
    else:
        sys.stdout.write(text)
    _table(report)
    return 0 if report.verdict.value in ("pass", "exempt") else 1


def register(sub: Any) -> None:
    """Add the ``verify`` verb."""
    p = sub.add_parser("verify", help="verify confidentiality on the wire and key management")
    vsub = p.add_subparsers(dest="verify_cmd", required=True, metavar="CMD")
    for name, drills, text in (("confidentiality", False, "per-class bytes, coverage and scope from a capture"),
                               ("keys", True, "confidentiality plus rotation under load, fail-closed drills and "
                                              "credential refusal (lab, or SSH hosts with progress files)")):
        s = vsub.add_parser(name, help=text)
        s.add_argument("--target", default="lab", choices=("lab", "ssh", "none"))
        s.add_argument("--name", help="the lab's name (default: the only lab)")
        s.add_argument("--hosts", help="--target ssh: the hosts inventory (capture on every host over SSH)")
        s.add_argument("--policy", help="policy file (default: the lab's own policy)")
        s.add_argument("--capture", help="judge this pcap instead of capturing the lab")
        s.add_argument("--before", help="an as-found capture, reported next to the result")
        s.add_argument("--seconds", type=float, default=4.0, help="capture length (default 4)")
        s.add_argument("--enabled", action="append", help="CLASS=LAYER (default: what `encrypt enable` recorded)")
        s.add_argument("--evidence", help="evidence store to record the result in")
        s.add_argument("--work", help="directory for captures and drill material (default: a temp dir)")
        s.add_argument("-o", "--output", help="write the Facts.keys JSON here (default stdout)")
        s.set_defaults(func=lambda a, d=drills: _run(a, drills=d))


__all__ = ["register"]
