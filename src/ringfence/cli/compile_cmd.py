"""``ringfence compile POLICY --to nftables|networkpolicy|cilium -o DIR [--audit] [--check]``."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ringfence.cli._lazy import OneOf


def _compile(args: argparse.Namespace) -> int:
    from ringfence.enforce import RenderOptions, check_policy, renderer
    from ringfence.policy import load_policy

    policy = load_policy(args.policy)
    # the same refusals as apply: a file that would lock out the admin path is not worth writing
    check_policy(policy, source=args.policy)
    result = renderer(args.to).render(policy, RenderOptions(audit=args.audit))
    if args.check and args.to == "nftables":
        from ringfence.enforce.nftrun import check_in_throwaway

        for f in result.files:
            check_in_throwaway(f.json())
        print(f"nft -c accepted {len(result.files)} ruleset(s)", file=sys.stderr)
    written = result.write(args.output)
    for note in result.unsupported:
        print(f"unsupported by {note.target}: {note.subject}: {note.reason}"
              f"{' — instead: ' + note.instead if note.instead else ''}", file=sys.stderr)
    summary = {"target": result.target, "files": [str(p) for p in written], "stats": dict(result.stats),
               "unsupported": len(result.unsupported)}
    sys.stdout.write(json.dumps(summary, indent=2) + "\n")
    return 0


def register(sub: Any) -> None:
    """Add the ``compile`` verb."""
    p = sub.add_parser("compile", help="render a policy for an enforcement target")
    p.add_argument("policy", help="policy file (YAML)")
    p.add_argument("--to", required=True, metavar="TARGET",
                   type=OneOf("ringfence.enforce", "RENDERERS"),
                   help="enforcement target (a wrong one lists them)")
    p.add_argument("-o", "--output", required=True, help="directory to write the rendered files into")
    p.add_argument("--audit", action="store_true", help="staged policy: log and count would-be drops, accept them")
    p.add_argument("--check", action="store_true",
                   help="nftables only: have the kernel check every ruleset in a throwaway namespace (root)")
    p.set_defaults(func=_compile)
