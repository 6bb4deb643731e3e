"""AWS VPC and Transit Gateway Flow Logs (space-separated text with a header line) → flows.

The header line names the fields (the default v2 format, or any custom v3–v7 / ECS / Transit
Gateway field list); a file without one is read as the default v2 format. ``-`` is an unset value.
``NODATA``/``SKIPDATA`` records carry no flow and are skipped with a note. ``action`` (ACCEPT/REJECT)
becomes ``verdict``. Each record is one direction seen at one interface (or TGW attachment) in one
aggregation window, so records are folded into conversations per interface. A flow log carries no
payload: protection is always ``unknown``.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from ringfence.observe.flows._bidir import RECORD_SCHEMA, to_conversations
from ringfence.observe.flows._common import (
    WarningLog,
    canonical_ips,
    count_per_line,
    describe_lines,
    epoch_seconds_to_ts,
    invalid_utf8_rows,
    iter_line_blocks,
    join_lines,
    line_spans,
    parse_uint,
    read_head,
    warn_if_empty,
)
from ringfence.observe.flows.interface import FlowSourceError, ProgressFn, ReadResult
from ringfence.observe.schema import Protection, conform

#: The default (version 2) format, used when a file has no header line.
DEFAULT_FIELDS: Final = (
    "version account-id interface-id srcaddr dstaddr srcport dstport protocol packets bytes start end action log-status"
).split()
REASON: Final = "flow log has no payload"


class VpcFlowLogReader:
    """Reads VPC / Transit Gateway flow log text files."""

    name = "vpc"

    def sniff(self, head: bytes) -> bool:
        """A header line naming VPC flow log fields, or a default-format v2 record."""
        first = head.split(b"\n", 1)[0].strip().decode("latin-1").split(" ")
        if {"srcaddr", "dstaddr"} <= set(first) or ("version" in first and "log-status" in first):
            return True
        return len(first) == len(DEFAULT_FIELDS) and first[0] == "2" and first[-1] in ("OK", "NODATA", "SKIPDATA")

    def read(self, path: Path, *, progress: ProgressFn | None = None) -> ReadResult:
        """Read every record; malformed ones are skipped with warnings naming their lines."""
        head = read_head(path)
        first = head.split(b"\n", 1)[0].strip().decode("latin-1")
        header = first.split(" ")
        has_header = not header[0].isdigit()
        fields = header if has_header else DEFAULT_FIELDS
        if has_header and not ({"srcaddr", "dstaddr"} <= set(fields) or {"pkt-srcaddr", "pkt-dstaddr"} <= set(fields)):
            raise FlowSourceError(f"{path}:1", "header names no srcaddr/dstaddr fields", hint="expected a VPC flow log")
        if len(set(fields)) != len(fields):
            raise FlowSourceError(f"{path}:1", "header names a field twice")
        warnings = WarningLog()
        parts: list[pa.Table] = []
        records = 0
        skipped_status: dict[str, int] = {}
        for first_line, block in iter_line_blocks(path, progress=progress, warnings=warnings):
            starts, ends = line_spans(block)
            keep = ends > starts
            if has_header and first_line == 1 and keep.size:
                keep[0] = False
            records += int(keep.sum())
            seps = count_per_line(block, starts, ends, 0x20)
            ok = keep & (seps == len(fields) - 1)
            not_text = invalid_utf8_rows(block, starts, ends, ok)
            if not_text.any():
                warnings.add(
                    f"{path}: {int(not_text.sum())} record(s) skipped, "
                    f"{describe_lines(first_line, np.flatnonzero(not_text))}: not UTF-8 text"
                )
                ok &= ~not_text
            wrong = np.flatnonzero(keep & ~ok & ~not_text)
            if wrong.size:
                warnings.add(
                    f"{path}: {wrong.size} record(s) skipped, {describe_lines(first_line, wrong)}: "
                    f"expected {len(fields)} space-separated fields"
                )
            if not ok.any():
                continue
            try:
                table = pacsv.read_csv(
                    io.BytesIO(join_lines(block, starts, ok)),
                    read_options=pacsv.ReadOptions(column_names=fields, block_size=1 << 26),
                    parse_options=pacsv.ParseOptions(delimiter=" ", quote_char=False, escape_char=False),
                    convert_options=pacsv.ConvertOptions(
                        column_types={f: pa.string() for f in fields}, null_values=["-"], strings_can_be_null=True
                    ),
                )
            except (pa.ArrowInvalid, UnicodeDecodeError) as exc:
                raise FlowSourceError(f"{path}:{first_line}", f"cannot parse flow log block: {exc}") from exc
            lines = np.flatnonzero(ok).astype(np.int64) + first_line
            parts.append(_records(table, lines, path, warnings, skipped_status))
        for status, count in sorted(skipped_status.items()):
            warnings.add(f"{path}: {count} {status} record(s) skipped (no flow in that window)")
        rec = pa.concat_tables(parts) if parts else RECORD_SCHEMA.empty_table()
        conv = to_conversations(rec).drop_columns(["attr", "vantage"])
        n = conv.num_rows
        conv = conv.append_column("protection", pa.array([Protection.UNKNOWN.value] * n, pa.string()))
        conv = conv.append_column("reason", pa.array([REASON] * n, pa.string()))
        conv = conv.append_column("source", pa.array([f"vpc:{path.name}"] * n, pa.string()))
        warn_if_empty(path, records, warnings)
        return ReadResult(flows=conform(conv), warnings=warnings.freeze(), records=records)


def _records(
    table: pa.Table, lines: npt.NDArray[np.int64], path: Path, warnings: WarningLog, skipped: dict[str, int]
) -> pa.Table:
    n = table.num_rows

    def col(name: str) -> pa.Array:
        if name in table.column_names:
            return table.column(name).combine_chunks()
        return pa.nulls(n, pa.string())

    status = col("log-status")
    no_flow = pc.fill_null(pc.is_in(status, value_set=pa.array(["NODATA", "SKIPDATA"])), False)
    for value, count in zip(*_value_counts(pc.filter(status, no_flow)), strict=True):
        skipped[value] = skipped.get(value, 0) + count
    src, src_ok = canonical_ips(pc.coalesce(col("pkt-srcaddr"), col("srcaddr")))
    dst, dst_ok = canonical_ips(pc.coalesce(col("pkt-dstaddr"), col("dstaddr")))
    bad = np.zeros(n, dtype=bool)
    values: dict[str, pa.Array] = {}
    for name, limit in (
        ("srcport", 65535),
        ("dstport", 65535),
        ("protocol", 255),
        ("packets", 2**62),
        ("bytes", 2**62),
        ("tcp-flags", 255),
    ):
        values[name], wrong = parse_uint(col(name), limit)
        bad |= wrong
    first, bad_start = epoch_seconds_to_ts(col("start"))
    last, bad_end = epoch_seconds_to_ts(col("end"))
    no_flow_np = np.asarray(no_flow.to_numpy(zero_copy_only=False), dtype=bool)
    unusable = (
        bad
        | bad_start
        | bad_end
        | ~src_ok
        | ~dst_ok
        | ~np.asarray(pc.is_valid(values["protocol"]).to_numpy(zero_copy_only=False), dtype=bool)
    )
    unusable &= ~no_flow_np
    if unusable.any():
        warnings.add(
            f"{path}: {int(unusable.sum())} record(s) skipped, {describe_lines(0, lines[unusable])}: "
            "unusable address, port, protocol, counter or time"
        )
    flags = values["tcp-flags"]
    # VPC tcp-flags OR the flags of the window: SYN (2) without SYN-ACK (18) marks the initiator's record.
    syn = pc.not_equal(pc.bit_wise_and(flags, 2), 0)
    synack = pc.equal(pc.bit_wise_and(flags, 18), 18)
    hint = pc.fill_null(pc.if_else(synack, -1, pc.if_else(syn, 1, 0)), 0)
    proto = values["protocol"]
    has_ports = pc.is_in(proto, value_set=pa.array([6, 17, 132], pa.int64()))
    no_port = pa.scalar(None, pa.int64())
    action = col("action")
    reject_reason = col("reject-reason")
    verdict = pc.if_else(pc.is_valid(reject_reason), pc.binary_join_element_wise(action, reject_reason, ":"), action)
    records = pa.table(
        {
            "src": src,
            "dst": dst,
            "sport": pc.if_else(has_ports, values["srcport"], no_port).cast(pa.int32()),
            "dport": pc.if_else(has_ports, values["dstport"], no_port).cast(pa.int32()),
            "proto": pc.fill_null(proto, 0).cast(pa.uint8()),
            "packets": pc.fill_null(values["packets"], 0),
            "bytes": pc.fill_null(values["bytes"], 0),
            "payload_bytes": pa.nulls(n, pa.int64()),
            "first_seen": first,
            "last_seen": last,
            "hint": hint.cast(pa.int8()),
            "vantage": pc.coalesce(col("interface-id"), col("tgw-attachment-id"), col("resource-id")),
            "src_identity": pa.nulls(n, pa.string()),
            "dst_identity": pa.nulls(n, pa.string()),
            "verdict": verdict,
            "attr": pa.nulls(n, pa.string()),
        }
    )
    keep = ~(unusable | no_flow_np)
    return records.filter(pa.array(keep)) if not keep.all() else records


def _value_counts(col: pa.Array) -> tuple[list[str], list[int]]:
    counts = pc.value_counts(col)
    return counts.field("values").to_pylist(), counts.field("counts").to_pylist()


__all__ = ["DEFAULT_FIELDS", "REASON", "VpcFlowLogReader"]
