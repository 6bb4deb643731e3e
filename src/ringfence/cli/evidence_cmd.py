"""``ringfence evidence verify|show|export|head|pubkey|repair``: the evidence store from the command line.

``verify`` checks the hash chain and the Ed25519-signed checkpoint (see
:mod:`ringfence.evidence.checkpoint` for where the key lives); it exits 0 when the store is intact,
1 when it was tampered with (or damaged), 2 when it cannot be read at all.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ringfence.errors import RingfenceError

if TYPE_CHECKING:
    from ringfence.evidence import EvidenceStore


def _open(args: argparse.Namespace) -> EvidenceStore:
    from ringfence.evidence import EvidenceStore
    from ringfence.evidence.store import default_store_path

    return EvidenceStore.open(args.store or default_store_path(), create=False)


def _verify(args: argparse.Namespace) -> int:
    from ringfence.evidence import ChainHead

    anchor = None
    if args.anchor:
        try:
            anchor = ChainHead.parse(args.anchor)
        except ValueError as exc:
            raise RingfenceError(f"--anchor: {exc}") from exc
    report = _open(args).verify(anchor=anchor, check_blobs=not args.no_blobs, public_key=args.pubkey)
    if args.json:
        doc = {
            "ok": report.ok,
            "records": report.records,
            "head": str(report.head),
            "bad_seq": report.bad_seq,
            "reason": None if report.reason is None else report.reason.value,
            "detail": report.detail,
        }
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        print(report.summary())
    return 0 if report.ok else 1


def _show(args: argparse.Namespace) -> int:
    store = _open(args)
    if args.id:
        record = store.get(args.id)
        sys.stdout.write(json.dumps({"id": record.id, **record.to_json()}, indent=2, ensure_ascii=False) + "\n")
        return 0
    for record in store.records():
        print(f"{record.id}  {record.time}  {record.kind.value:<11}  {record.source}  {record.subject}")
    return 0


def _export(args: argparse.Namespace) -> int:
    from ringfence.atomic import write_atomic

    store = _open(args)
    lines = list(store.raw_lines())
    if args.output:
        write_atomic(args.output, b"".join(lines))
    else:
        sys.stdout.buffer.writelines(lines)
        sys.stdout.flush()
    print(f"exported {len(lines)} records; chain head {store.head()}", file=sys.stderr)
    return 0


def _pubkey(args: argparse.Namespace) -> int:
    # The public half of the checkpoint signing key, for `verify --pubkey` on a machine without the key.
    from ringfence.evidence.checkpoint import public_bytes

    print(public_bytes(_open(args).signer().public_key).hex())
    return 0


def _head(args: argparse.Namespace) -> int:
    print(_open(args).head())
    return 0


def _repair(args: argparse.Namespace) -> int:
    store = _open(args)
    note = store.repair()
    if note is None:
        print("nothing to repair: the last line is complete and signed")
    else:
        print(f"{store.get(note).data.get('action', 'repaired')}; recorded {note}")
    return 0


def register(sub: Any) -> None:
    """Add the ``evidence`` verb."""
    p = sub.add_parser("evidence", help="the tamper-evident evidence store: verify, show, export")
    esub = p.add_subparsers(dest="evidence_cmd", required=True, metavar="CMD")

    def store_arg(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--store",
            type=Path,
            help="the store directory (default: $RINGFENCE_EVIDENCE or .ringfence/evidence)",
        )

    v = esub.add_parser("verify", help="check the hash chain, head and blobs (exit 0 ok, 1 tampered, 2 unreadable)")
    store_arg(v)
    v.add_argument("--anchor", metavar="SEQ:SHA256", help="a chain head printed earlier the store must still extend")
    v.add_argument("--pubkey", type=Path, metavar="FILE",
                   help="the checkpoint verification key (hex or PEM; default: the public half of the signing key)")
    v.add_argument("--no-blobs", action="store_true", help="skip re-hashing the artifact blobs")
    v.add_argument("--json", action="store_true", help="print the verification report as JSON")
    v.set_defaults(func=_verify)

    s = esub.add_parser("show", help="list the records, or print one record by id")
    store_arg(s)
    s.add_argument("id", nargs="?", metavar="ID", help="an evidence id like ev-000042-1a2b3c4d")
    s.set_defaults(func=_show)

    e = esub.add_parser("export", help="write the records as JSON lines, byte for byte as stored")
    store_arg(e)
    e.add_argument("-o", "--output", help="write to this file instead of stdout")
    e.set_defaults(func=_export)

    h = esub.add_parser("head", help="print the chain head SEQ:SHA256 (keep it outside the store)")
    store_arg(h)
    h.set_defaults(func=_head)

    k = esub.add_parser("pubkey", help="print the checkpoint verification key (hex) for `verify --pubkey`")
    store_arg(k)
    k.set_defaults(func=_pubkey)

    r = esub.add_parser("repair", help="remove an incomplete last line left by a crash (recorded as a note)")
    store_arg(r)
    r.set_defaults(func=_repair)
