"""``ringfence encrypt rotate``: rotate a layer's credentials on the live path, record the result as key facts.

Its own module (``encrypt_cmd`` only adds it) so that layers added to ``encrypt`` merge without touching it.
Exit 0: rotated, the job went on and the old credential is refused; 1: a finding failed; 3: unproven
(the job could not be watched on this target).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ringfence.atomic import write_atomic
from ringfence.cli._targets import add_target_arguments


def _rotate(args: argparse.Namespace) -> int:
    from ringfence.cli._targets import site_for
    from ringfence.evidence.store import EvidenceStore, default_store_path
    from ringfence.secure import rotation
    from ringfence.secure.rotation_facts import keys_document, record_keys_facts

    rotation.rotator(args.layer)  # an unknown layer is refused before anything is touched
    nodes = [x.strip() for x in (args.nodes or "").split(",") if x.strip()] or None
    watch: Any = None
    if args.target == "lab":
        from ringfence.lab import Lab

        lab = Lab.attach(args.name)
        site, policy, watch = lab.site(), lab.policy(), lab
    else:
        site, policy = site_for(args)
    store = EvidenceStore.open(Path(args.evidence) if args.evidence else default_store_path())
    print(f"rotating {args.layer} credentials on {site.kind} {site.name} under load", file=sys.stderr)
    results = rotation.rotate_live(site, policy, [args.layer], watch=watch, nodes=nodes, settle=args.settle,
                                   evidence=store)
    doc = keys_document(results, target=f"{site.kind} {site.name}")
    content, record = record_keys_facts(store, doc, Path(args.output).name if args.output else "keys.json")
    if args.output:
        write_atomic(args.output, content)
    else:
        sys.stdout.write(content.decode())
    for r in results:
        print(f"{r.layer}: {r.verdict.value} — longest step gap {r.stall_s:.2f} s, {r.request_failures} failed "
              f"requests, {r.failed_steps if r.failed_steps is not None else '?'} failed steps, old credential "
              f"{'refused' if r.old_refused else 'NOT refused'}", file=sys.stderr)
    print(f"recorded as key facts {record} in {store.path}", file=sys.stderr)
    verdict = json.loads(content)["verdict"]
    if verdict == "unknown":
        print("the job was not watched on this target: the rotation is not proven harmless (run it on a "
              "target whose job reports progress, e.g. --target lab)", file=sys.stderr)
    return {"pass": 0, "fail": 1}.get(verdict, 3)


def register_rotate(esub: Any) -> None:
    """Add ``encrypt rotate`` to the ``encrypt`` subcommands."""
    s = esub.add_parser("rotate", help="rotate a layer's credentials under load; record it as key facts")
    s.add_argument("--layer", required=True, help="tls | wireguard | ipsec (the layers with a live rotation)")
    s.add_argument("--nodes", help="nodes whose credentials to rotate, comma-separated (default: all of the layer)")
    s.add_argument("--settle", type=float, default=4.0, help="seconds the job must keep stepping after it")
    s.add_argument("--evidence", help="evidence store (default: $RINGFENCE_EVIDENCE or .ringfence/evidence)")
    s.add_argument("-o", "--output", help="also write the key facts here (default: stdout)")
    add_target_arguments(s)
    s.set_defaults(func=_rotate)


__all__ = ["register_rotate"]
