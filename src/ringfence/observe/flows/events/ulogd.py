"""ulogd2 JSON output (``ulogd_output_JSON``, NFLOG stacks) → firewall decision events.

ringfence's nftables rules log new connections to NFLOG, one group per verdict, with the policy's
rule id as the log prefix (:mod:`ringfence.enforce.nflog`). ulogd's JSON does not carry the group,
so each stack sets ``numeric_label`` and the verdict is read from ``raw.label``
(:data:`LABEL_VERDICTS`, ulogd's own convention: 0 blocked, 1 allowed); records from other setups
carry ulogd's ``action`` word instead. The default drop and the audit rule log a prefix of the form
``rf-drop SCOPE/CHAIN``: a decision with no named rule (``rule`` null), which is its own state.

The time is ``oob.time.sec``/``usec`` (the kernel's, UTC); ulogd's ``timestamp`` text is local time
and only used when those are absent. The node is ulogd's ``dvc`` (the lab sets ``device`` to the
enforcement point's name), else the ``node`` the caller names.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ringfence.observe.flows._common import (
    WarningLog,
    canonical_ips,
    describe_lines,
    iso_to_ts,
    read_head,
)
from ringfence.observe.flows.events._logfile import read_json_events
from ringfence.observe.flows.events.conventions import (
    ACTION_VERDICTS,
    DEFAULT_DEVICE,
    GROUPS,
    LABEL_VERDICTS,
    UNNAMED,
)
from ringfence.observe.flows.events.interface import DECISION_SCHEMA, EventResult
from ringfence.observe.schema import TS

SCHEMA: Final = pa.schema([
    pa.field("oob.time.sec", pa.int64()),
    pa.field("oob.time.usec", pa.int64()),
    pa.field("timestamp", pa.string()),
    pa.field("oob.prefix", pa.string()),
    pa.field("src_ip", pa.string()),
    pa.field("dest_ip", pa.string()),
    pa.field("src_port", pa.int64()),
    pa.field("dest_port", pa.int64()),
    pa.field("ip.protocol", pa.int64()),
    pa.field("raw.label", pa.int64()),
    pa.field("action", pa.string()),
    pa.field("dvc", pa.string()),
])


class UlogdReader:
    """Reads ulogd2 JSON lines into :data:`DECISION_SCHEMA` events."""

    name = "ulogd"
    schema = DECISION_SCHEMA

    def read(self, path: Path, *, node: str | None = None) -> EventResult:
        """Every NFLOG record; records without addresses, a protocol, a time or a verdict are skipped, named."""
        read_head(path, 1)
        return read_json_events(path, SCHEMA, DECISION_SCHEMA,
                                lambda t, lines, w: _decisions(t, lines, path, node, w))


def _time(table: pa.Table) -> tuple[pa.Array, np.ndarray]:
    sec, usec = table.column("oob.time.sec"), table.column("oob.time.usec")
    ok = pc.and_(pc.and_(pc.greater_equal(sec, 0), pc.less(sec, 1 << 40)),
                 pc.and_(pc.greater_equal(pc.fill_null(usec, 0), 0), pc.less(pc.fill_null(usec, 0), 1_000_000)))
    nanos = pc.add(pc.multiply(sec, 1_000_000_000), pc.multiply(pc.fill_null(usec, 0), 1000))
    kernel = pc.if_else(ok, nanos, pa.scalar(None, pa.int64())).cast(TS)
    text, _ = iso_to_ts(table.column("timestamp"))
    out = pc.coalesce(kernel, text)
    return out, np.asarray(pc.is_null(out).to_numpy(zero_copy_only=False), bool)


def _verdict(table: pa.Table, unnamed_kind: pa.Array) -> pa.Array:
    labels = pa.array(list(LABEL_VERDICTS), pa.int64())
    by_label = pc.take(pa.array(list(LABEL_VERDICTS.values())), pc.index_in(table.column("raw.label"), labels))
    words = pa.array(list(ACTION_VERDICTS), pa.string())
    by_action = pc.take(pa.array(list(ACTION_VERDICTS.values())), pc.index_in(table.column("action"), words))
    # ringfence's own unnamed prefixes say their verdict themselves: contain and drop drop, audit accepts
    dropped = pc.if_else(pc.is_valid(unnamed_kind), "drop", pa.scalar(None, pa.string()))
    by_prefix = pc.if_else(pc.fill_null(pc.equal(unnamed_kind, "audit"), False), "audit", dropped)
    return pc.coalesce(by_prefix, by_label, by_action)


def _decisions(table: pa.Table, lines: np.ndarray, path: Path, node: str | None, warnings: WarningLog) -> pa.Table:
    n = table.num_rows
    time, bad_time = _time(table)
    src, src_ok = canonical_ips(table.column("src_ip"))
    dst, dst_ok = canonical_ips(table.column("dest_ip"))
    proto = table.column("ip.protocol")
    proto_ok = np.asarray(pc.fill_null(pc.and_(pc.greater_equal(proto, 0), pc.less_equal(proto, 255)), False)
                          .to_numpy(zero_copy_only=False), bool)
    sport, dport = table.column("src_port"), table.column("dest_port")
    port_ok = np.asarray(pc.fill_null(pc.and_(
        pc.fill_null(pc.and_(pc.greater_equal(sport, 0), pc.less_equal(sport, 65535)), True),
        pc.fill_null(pc.and_(pc.greater_equal(dport, 0), pc.less_equal(dport, 65535)), True)), True)
        .to_numpy(zero_copy_only=False), bool)
    prefix = pc.fill_null(table.column("oob.prefix"), "")
    kind = pc.struct_field(pc.extract_regex(prefix, r"^[A-Za-z0-9_]{1,16}-(?P<k>drop|audit|contain) "), "k")
    unnamed = pc.fill_null(pc.match_substring_regex(prefix, UNNAMED), False)
    kind = pc.if_else(unnamed, kind, pa.scalar(None, pa.string()))
    verdict = _verdict(table, kind)
    verdict_ok = np.asarray(pc.is_valid(verdict).to_numpy(zero_copy_only=False), bool)
    rule_text = pc.utf8_trim_whitespace(prefix)
    rule = pc.if_else(pc.fill_null(pc.equal(kind, "contain"), False), "containment",
                      pc.if_else(pc.or_(unnamed, pc.equal(rule_text, "")), pa.scalar(None, pa.string()), rule_text))
    dvc = table.column("dvc")
    fallback = pa.scalar(node, pa.string())
    where = pc.if_else(pc.fill_null(pc.not_equal(dvc, DEFAULT_DEVICE), False), dvc, fallback)
    checks = (("time", bad_time), ("addresses", ~(src_ok & dst_ok)), ("IP protocol", ~proto_ok),
              ("ports", ~port_ok), ("verdict (raw.label or action)", ~verdict_ok))
    bad = np.zeros(n, bool)
    for what, mask in checks:
        mask = mask & ~bad
        if mask.any():
            warnings.add(f"{path}: {int(mask.sum())} record(s) skipped, {describe_lines(0, lines[mask])}: "
                         f"no usable {what}")
        bad |= mask
    out = pa.table({
        "time": time, "src": src, "dst": dst, "sport": sport.cast(pa.int32(), safe=False),
        "dport": dport.cast(pa.int32(), safe=False), "proto": proto.cast(pa.uint8(), safe=False),
        "rule": rule, "verdict": verdict, "prefix": prefix, "node": where,
        "line": pa.array(lines), "source": pa.array([str(path)] * n, pa.string()),
    })
    return (out.filter(pa.array(~bad)) if bad.any() else out).cast(DECISION_SCHEMA)


__all__ = ["ACTION_VERDICTS", "DEFAULT_DEVICE", "GROUPS", "LABEL_VERDICTS", "SCHEMA", "UNNAMED", "UlogdReader"]
