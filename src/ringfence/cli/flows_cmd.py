"""``ringfence flows FILE... [--format table|jsonl|parquet] [--policy P] [-o OUT]``."""

from __future__ import annotations

import argparse
import io
import json
import sys
from typing import TYPE_CHECKING, Any, Final

from ringfence.errors import RingfenceError

# pyarrow is imported by the handlers, never while the parser is built (start-up time).
if TYPE_CHECKING:
    import pyarrow as pa

#: Rows shown by ``--format table`` before the rest is only counted.
TABLE_ROWS: Final = 50
#: Keys every JSON line carries (more columns follow).
JSONL_KEYS: Final = (
    "src",
    "dst",
    "sport",
    "dport",
    "proto",
    "packets",
    "bytes",
    "first_seen",
    "last_seen",
    "class",
    "protection",
    "protocol",
    "reason",
)


def _classify(flows: pa.Table, policy_path: str) -> pa.Table:

    from ringfence.policy import load_policy

    policy = load_policy(policy_path)
    try:
        from ringfence.analyze import classify
    except ImportError as exc:
        raise RingfenceError(f"cannot classify flows: {exc}", hint="run without --policy") from exc
    result: pa.Table = classify(flows, policy)
    return result


def _iso(table: pa.Table) -> pa.Table:
    """Timestamps as ISO 8601 text (``2021-06-16T16:52:13.136834446Z``), digits as the column's unit has.

    numpy formats them: ``pyarrow.compute.strftime`` would cost the command its ~30 ms import.
    """
    import numpy as np
    import pyarrow as pa

    for name in ("first_seen", "last_seen"):
        i = table.schema.get_field_index(name)
        column = table[name]
        unit = column.type.unit
        values = column.to_numpy()  # datetime64 of the column's unit, NaT where null
        text = np.char.add(np.datetime_as_string(values, unit=unit), "Z").astype(object)
        text[np.isnat(values)] = None
        table = table.set_column(i, name, pa.array(text, pa.string()))
    return table


def _jsonl(flows: pa.Table) -> bytes:
    table = _iso(flows)
    names = [*JSONL_KEYS, *[n for n in table.column_names if n not in JSONL_KEYS]]
    out = io.StringIO()
    for batch in table.to_batches(max_chunksize=65536):
        cols = {n: (batch.column(n).to_pylist() if n in batch.schema.names else [None] * batch.num_rows) for n in names}
        for i in range(batch.num_rows):
            out.write(json.dumps({n: cols[n][i] for n in names}, ensure_ascii=False))
            out.write("\n")
    return out.getvalue().encode()


def _endpoint(ip: str, port: int | None) -> str:
    if port is None:
        return ip
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def _table(flows: pa.Table) -> None:
    from rich.console import Console
    from rich.table import Table

    shown = _iso(flows.slice(0, TABLE_ROWS)).to_pylist()
    has_class = "class" in flows.column_names
    t = Table(title=f"{flows.num_rows} flows", show_lines=False)
    for col in ("src", "dst", "proto", "packets", "bytes", "first seen", "protection", "protocol", "verdict"):
        t.add_column(col)
    if has_class:
        t.add_column("class")
    for r in shown:
        cells = [
            _endpoint(r["src"], r["sport"]),
            _endpoint(r["dst"], r["dport"]),
            str(r["proto"]),
            str(r["packets"]),
            str(r["bytes"]),
            r["first_seen"] or "",
            r["protection"],
            r["protocol"] or "",
            r["verdict"] or "",
        ]
        if has_class:
            cells.append(r["class"] or "")
        t.add_row(*cells)
    if flows.num_rows > TABLE_ROWS:
        t.caption = f"… {flows.num_rows - TABLE_ROWS} more flows (use --format jsonl or parquet for all)"
    Console(file=sys.stdout, width=200).print(t)


def _run(args: argparse.Namespace) -> int:
    from ringfence.cli.flow_inputs import read_flow_inputs

    if args.format == "parquet" and not args.output:
        raise RingfenceError("--format parquet needs -o/--output", hint="parquet is binary: name a file")
    flows = read_flow_inputs(args.files)
    if args.policy:
        flows = _classify(flows, args.policy)
    if args.format == "table":
        _table(flows)
        return 0
    if args.format == "jsonl":
        data = _jsonl(flows)
    else:
        import pyarrow.parquet as pq

        sink = io.BytesIO()
        pq.write_table(flows, sink)
        data = sink.getvalue()
    if args.output:
        from ringfence.atomic import write_atomic

        write_atomic(args.output, data)
    else:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    return 0


def register(sub: Any) -> None:
    """Add the ``flows`` verb."""
    p = sub.add_parser("flows", help="read flow sources (pcap, Zeek, Hubble, VPC, NetFlow/IPFIX) into one table")
    p.add_argument("files", nargs="+", metavar="FILE", help="flow files; '-' reads stdin; format detected by content")
    p.add_argument("--format", choices=("table", "jsonl", "parquet"), default="table", help="output format")
    p.add_argument("--policy", help="classify flows against this policy file")
    p.add_argument("-o", "--output", help="write to this file instead of stdout")
    p.set_defaults(func=_run)


__all__ = ["JSONL_KEYS", "TABLE_ROWS", "register"]
