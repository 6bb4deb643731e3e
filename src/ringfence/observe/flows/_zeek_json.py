"""Zeek ``conn.log`` written by the JSON writer (``LogAscii::use_json=T``), one object per line."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from ringfence.observe.flows._common import WarningLog, describe_lines, epoch_seconds_to_ts, iso_to_ts
from ringfence.observe.flows._jsonl import iter_json_records
from ringfence.observe.flows.interface import ProgressFn


@dataclass(frozen=True)
class ZeekColumns:
    """Typed Zeek columns of one batch (any may be all-null when the log lacks it)."""

    line: npt.NDArray[np.int64]
    ts: pa.Array
    uid: pa.Array
    orig_h: pa.Array
    resp_h: pa.Array
    orig_p: pa.Array
    resp_p: pa.Array
    proto: pa.Array
    service: pa.Array
    duration: pa.Array
    orig_bytes: pa.Array
    resp_bytes: pa.Array
    orig_pkts: pa.Array
    resp_pkts: pa.Array
    orig_ip_bytes: pa.Array
    resp_ip_bytes: pa.Array
    tunnel_parents: pa.Array  # list<string>
    vlan: pa.Array
    inner_vlan: pa.Array


_COUNTS = ("orig_bytes", "resp_bytes", "orig_pkts", "resp_pkts", "orig_ip_bytes", "resp_ip_bytes")
_LIMITS = {"id.orig_p": 65535, "id.resp_p": 65535, "vlan": 4095, "inner_vlan": 4095} | dict.fromkeys(_COUNTS, 2**62)


def _schema(iso_ts: bool) -> pa.Schema:
    fields = [
        pa.field("ts", pa.string() if iso_ts else pa.float64()),
        pa.field("uid", pa.string()),
        pa.field("id.orig_h", pa.string()),
        pa.field("id.orig_p", pa.int64()),
        pa.field("id.resp_h", pa.string()),
        pa.field("id.resp_p", pa.int64()),
        pa.field("proto", pa.string()),
        pa.field("service", pa.string()),
        pa.field("duration", pa.float64()),
        *[pa.field(c, pa.int64()) for c in _COUNTS],
        pa.field("tunnel_parents", pa.list_(pa.string())),
        pa.field("vlan", pa.int64()),
        pa.field("inner_vlan", pa.int64()),
    ]
    return pa.schema(fields)


def read_zeek_json(path: Path, warnings: WarningLog, progress: ProgressFn | None) -> tuple[list[ZeekColumns], int]:
    """Read a JSON conn.log into typed column batches; bad lines are skipped with warnings."""
    with path.open("rb") as fh:
        head = fh.read(4096)
    # Zeek writes ts as epoch seconds by default, or ISO 8601 with JSON::TS_ISO8601.
    iso_ts = re.search(rb'"ts"\s*:\s*"', head) is not None
    batches: list[ZeekColumns] = []
    records = 0
    for table, lines, consumed in iter_json_records(path, _schema(iso_ts), warnings, progress):
        records += consumed
        n = table.num_rows
        if n == 0:
            continue
        bad = np.zeros(n, dtype=bool)

        def col(name: str, table: pa.Table = table) -> pa.Array:
            return table.column(name).combine_chunks()

        def bounded(
            name: str,
            table: pa.Table = table,
            bad: npt.NDArray[np.bool_] = bad,
            lines: npt.NDArray[np.int64] = lines,
        ) -> pa.Array:
            values = col(name, table)
            wrong = pc.and_(
                pc.is_valid(values),
                pc.invert(pc.and_(pc.greater_equal(values, 0), pc.less_equal(values, _LIMITS[name]))),
            )
            mask = np.asarray(wrong.to_numpy(zero_copy_only=False), dtype=bool)
            if mask.any():
                warnings.add(
                    f"{path}: {int(mask.sum())} record(s) skipped, {describe_lines(0, lines[mask])}: "
                    f"{name} out of range"
                )
                bad |= mask
            return values

        ts, bad_ts = iso_to_ts(col("ts")) if iso_ts else epoch_seconds_to_ts(col("ts"))
        if bad_ts.any():
            warnings.add(f"{path}: ts not a time on {describe_lines(0, lines[bad_ts])}: first_seen left empty")
        duration = col("duration")
        duration = pc.if_else(pc.greater_equal(duration, 0.0), duration, pa.scalar(None, pa.float64()))
        cols = ZeekColumns(
            line=lines,
            ts=ts,
            uid=col("uid"),
            orig_h=col("id.orig_h"),
            resp_h=col("id.resp_h"),
            orig_p=bounded("id.orig_p"),
            resp_p=bounded("id.resp_p"),
            proto=col("proto"),
            service=col("service"),
            duration=duration,
            orig_bytes=bounded("orig_bytes"),
            resp_bytes=bounded("resp_bytes"),
            orig_pkts=bounded("orig_pkts"),
            resp_pkts=bounded("resp_pkts"),
            orig_ip_bytes=bounded("orig_ip_bytes"),
            resp_ip_bytes=bounded("resp_ip_bytes"),
            tunnel_parents=col("tunnel_parents"),
            vlan=bounded("vlan"),
            inner_vlan=bounded("inner_vlan"),
        )
        if bad.any():
            keep = pa.array(~bad)
            cols = ZeekColumns(
                **{k: (v[~bad] if isinstance(v, np.ndarray) else pc.filter(v, keep)) for k, v in cols.__dict__.items()}
            )
        batches.append(cols)
    return batches, records


__all__ = ["ZeekColumns", "read_zeek_json"]
