"""Zeek ``conn.log`` (TSV with ``#fields`` headers, or JSON lines) → flows.

Zeek's connection records are already conversations oriented from the originator, so each record is
one flow: ``orig`` → ``src``, ``resp`` → ``dst``. Confidentiality is only as good as Zeek's ``service``
detection: ``ssl``/``ssh`` mean a TLS/SSH handshake was recognised (the payload itself is not
inspected), ``http``/``dns`` and other cleartext protocols mean plaintext was parsed; anything else is
``unknown``. Tunnel parents are resolved to the outer connection when it is in the same log.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

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
    proto_numbers,
    warn_if_empty,
)
from ringfence.observe.flows._zeek_json import ZeekColumns, read_zeek_json
from ringfence.observe.flows.interface import FlowSourceError, ProgressFn, ReadResult
from ringfence.observe.schema import TS, Protection, conform

#: Services whose recognition means a handshake of an encrypting protocol was seen.
ENCRYPTED_SERVICES: Final[dict[str, str]] = {
    "ssl": "zeek service=ssl (TLS handshake seen; payload not inspected)",
    "ssh": "zeek service=ssh (SSH handshake seen; payload not inspected)",
    "dtls": "zeek service=dtls (DTLS handshake seen; payload not inspected)",
    "quic": "zeek service=quic (QUIC handshake seen; payload not inspected)",
}
#: Services Zeek can only recognise by parsing their cleartext.
PLAINTEXT_SERVICES: Final = frozenset(
    {
        "http",
        "dns",
        "ftp",
        "ftp-data",
        "telnet",
        "smtp",
        "pop3",
        "imap",
        "irc",
        "dhcp",
        "snmp",
        "syslog",
        "ntp",
        "sip",
        "modbus",
        "dnp3",
        "mysql",
        "rdp-cleartext",
    }
)
REQUIRED: Final = ("id.orig_h", "id.resp_h", "proto")
_DIRECTIVE = re.compile(rb"^#(separator|set_separator|empty_field|unset_field|fields|types|path|open|close)[\s]")


@dataclass(frozen=True)
class _Header:
    """The directives of one TSV header block."""

    sep: bytes
    set_sep: str
    empty: str
    unset: str
    fields: tuple[str, ...]


def _unescape(value: bytes) -> bytes:
    return re.sub(rb"\\x([0-9a-fA-F]{2})", lambda m: bytes([int(m.group(1), 16)]), value)


class ZeekReader:
    """Reads Zeek ``conn.log`` in the ASCII (TSV) writer's format or as JSON lines."""

    name = "zeek"

    def sniff(self, head: bytes) -> bool:
        """A ``#separator``/``#fields`` header naming conn fields, or a JSON object with Zeek's conn keys."""
        if b"#fields" in head and b"id.orig_h" in head:
            return True
        first = head.lstrip()[:2048]
        return first.startswith(b"{") and b'"id.orig_h"' in first and b'"id.resp_h"' in first

    def read(self, path: Path, *, progress: ProgressFn | None = None) -> ReadResult:
        """Read the whole log; bad records are skipped with a warning naming their lines."""
        warnings = WarningLog()
        head = b""
        try:
            with path.open("rb") as fh:
                head = fh.read(4096)
        except OSError as exc:
            raise FlowSourceError(str(path), f"cannot read: {exc.strerror or exc}") from exc
        if head.lstrip().startswith(b"{"):
            batches, records = read_zeek_json(path, warnings, progress)
        else:
            batches, records = self._read_tsv(path, warnings, progress)
        tables = [_to_flows(b, path, warnings) for b in batches]
        flows = pa.concat_tables(tables) if tables else _EMPTY_ZEEK
        flows = _resolve_outer(flows)
        warn_if_empty(path, records, warnings)
        return ReadResult(flows=conform(flows), warnings=warnings.freeze(), records=records)

    def _read_tsv(self, path: Path, warnings: WarningLog, progress: ProgressFn | None) -> tuple[list[ZeekColumns], int]:
        header: _Header | None = None
        pending: dict[bytes, bytes] = {}
        batches: list[ZeekColumns] = []
        records = 0
        for first_line, block in iter_line_blocks(path, progress=progress, warnings=warnings):
            starts, ends = line_spans(block)
            arr = np.frombuffer(block, dtype=np.uint8)
            nonempty = ends > starts
            is_comment = np.zeros(starts.size, dtype=bool)
            is_comment[nonempty] = arr[starts[nonempty]] == ord("#")
            comment_rows = np.flatnonzero(is_comment)
            # Data runs between header lines: a header changes how the following lines are read.
            seg_start = 0
            for row in [*comment_rows.tolist(), starts.size]:
                if row > seg_start and header is not None:
                    keep = np.zeros(starts.size, dtype=bool)
                    keep[seg_start:row] = nonempty[seg_start:row]
                    if keep.any():
                        batch, n = _parse_tsv_rows(block, starts, ends, keep, header, first_line, path, warnings)
                        records += n
                        if batch is not None:
                            batches.append(batch)
                elif row > seg_start and nonempty[seg_start:row].any():
                    bad = seg_start + int(np.flatnonzero(nonempty[seg_start:row])[0])
                    raise FlowSourceError(
                        f"{path}:{first_line + bad}",
                        "Zeek TSV data before a #fields header",
                        hint="is this a Zeek conn.log? the ASCII writer starts with #separator and #fields lines",
                    )
                if row < starts.size:
                    line = block[starts[row] : ends[row]]
                    header = _directive(line, pending, header, f"{path}:{first_line + row}")
                seg_start = row + 1
        if header is None:
            raise FlowSourceError(f"{path}:1", "no #fields header found", hint="expected a Zeek conn.log")
        return batches, records


def _directive(line: bytes, pending: dict[bytes, bytes], header: _Header | None, where: str) -> _Header | None:
    """Apply one ``#directive`` line; returns the header in force after it."""
    if line.startswith(b"#separator"):
        value = _unescape(line[len(b"#separator") :].strip(b" \t"))
        if len(value) != 1:
            raise FlowSourceError(where, f"unsupported #separator {value[:20]!r}: a single byte is expected")
        pending.clear()
        pending[b"separator"] = value
        return header
    m = _DIRECTIVE.match(line + b" ")
    if m is None:
        return header  # a comment (e.g. "### BTest baseline data …")
    sep = pending.get(b"separator", b"\t")
    key = m.group(1)
    rest = line[1 + len(key) :]
    value = rest[1:] if rest[:1] in (sep, b" ") else rest
    if key == b"set_separator" and not value:
        # a set field is split on it; Zeek writes one character (default ",")
        raise FlowSourceError(where, "empty #set_separator: a set field cannot be split on nothing")
    pending[key] = value
    if key != b"fields":
        return header
    fields = tuple(f.decode("utf-8", "replace") for f in value.split(sep))
    missing = [f for f in REQUIRED if f not in fields]
    if missing:
        raise FlowSourceError(where, f"#fields lacks {', '.join(missing)}", hint="expected a Zeek conn.log")
    if len(set(fields)) != len(fields):
        raise FlowSourceError(where, "#fields names a column twice")
    return _Header(
        sep=sep,
        set_sep=pending.get(b"set_separator", b",").decode("utf-8", "replace"),
        empty=pending.get(b"empty_field", b"(empty)").decode("utf-8", "replace"),
        unset=pending.get(b"unset_field", b"-").decode("utf-8", "replace"),
        fields=fields,
    )


def _parse_tsv_rows(
    block: bytes,
    starts: npt.NDArray[np.int64],
    ends: npt.NDArray[np.int64],
    keep: npt.NDArray[np.bool_],
    header: _Header,
    first_line: int,
    path: Path,
    warnings: WarningLog,
) -> tuple[ZeekColumns | None, int]:
    seps = count_per_line(block, starts, ends, header.sep[0])
    ok = keep & (seps == len(header.fields) - 1)
    not_text = invalid_utf8_rows(block, starts, ends, ok)
    if not_text.any():
        # One bad byte costs its line, named, not the whole file (Arrow's CSV reader names no line).
        warnings.add(
            f"{path}: {int(not_text.sum())} record(s) skipped, "
            f"{describe_lines(first_line, np.flatnonzero(not_text))}: not UTF-8 text"
        )
        ok &= ~not_text
    wrong = np.flatnonzero(keep & ~ok & ~not_text)
    if wrong.size:
        warnings.add(
            f"{path}: {wrong.size} record(s) skipped, {describe_lines(first_line, wrong)}: "
            f"expected {len(header.fields)} fields"
        )
    rows = np.flatnonzero(ok)
    if rows.size == 0:
        return None, int(keep.sum())
    data = join_lines(block, starts, ok)
    try:
        table = pacsv.read_csv(
            io.BytesIO(data),
            read_options=pacsv.ReadOptions(column_names=list(header.fields), block_size=1 << 26),
            parse_options=pacsv.ParseOptions(
                delimiter=header.sep.decode("latin-1"), quote_char=False, escape_char=False, double_quote=False
            ),
            convert_options=pacsv.ConvertOptions(
                column_types={f: pa.string() for f in header.fields}, strings_can_be_null=False, null_values=[]
            ),
        )
    except (pa.ArrowInvalid, UnicodeDecodeError) as exc:
        raise FlowSourceError(f"{path}:{first_line + int(rows[0])}", f"cannot parse Zeek TSV: {exc}") from exc
    n = table.num_rows

    def text(name: str) -> pa.Array:
        if name not in table.column_names:
            return pa.nulls(n, pa.string())
        col = table.column(name).combine_chunks()
        return pc.if_else(pc.equal(col, header.unset), pa.scalar(None, pa.string()), col)

    lines = rows.astype(np.int64) + first_line
    bad = np.zeros(n, dtype=bool)

    def number(name: str, limit: int) -> pa.Array:
        values, wrong_rows = parse_uint(text(name), limit)
        _flag(wrong_rows, name, lines, path, warnings, bad)
        return values

    ts, bad_ts = epoch_seconds_to_ts(text("ts"))
    if bad_ts.any():
        warnings.add(f"{path}: ts not a time on {describe_lines(0, lines[bad_ts])}: first_seen left empty")
    duration_text = text("duration")
    dur_ok = pc.match_substring_regex(duration_text, r"^[0-9]{1,12}(\.[0-9]{0,9})?$")
    duration = pc.if_else(dur_ok, duration_text, None).cast(pa.float64())
    parents = text("tunnel_parents")
    parents = pc.if_else(pc.equal(parents, header.empty), pa.scalar(None, pa.string()), parents)
    cols = ZeekColumns(
        line=lines,
        ts=ts,
        uid=text("uid"),
        orig_h=text("id.orig_h"),
        resp_h=text("id.resp_h"),
        orig_p=number("id.orig_p", 65535),
        resp_p=number("id.resp_p", 65535),
        proto=text("proto"),
        service=text("service"),
        duration=duration,
        orig_bytes=number("orig_bytes", 2**62),
        resp_bytes=number("resp_bytes", 2**62),
        orig_pkts=number("orig_pkts", 2**62),
        resp_pkts=number("resp_pkts", 2**62),
        orig_ip_bytes=number("orig_ip_bytes", 2**62),
        resp_ip_bytes=number("resp_ip_bytes", 2**62),
        tunnel_parents=pc.split_pattern(parents, header.set_sep),
        vlan=number("vlan", 4095),
        inner_vlan=number("inner_vlan", 4095),
    )
    if bad.any():
        cols = _filter(cols, ~bad)
    return cols, int(keep.sum())


def _flag(
    wrong: npt.NDArray[np.bool_],
    name: str,
    lines: npt.NDArray[np.int64],
    path: Path,
    warnings: WarningLog,
    bad: npt.NDArray[np.bool_],
) -> None:
    """Mark rows with an unusable ``name`` value as bad and say where they are."""
    if wrong.any():
        rows = lines[wrong]
        warnings.add(f"{path}: {rows.size} record(s) skipped, {describe_lines(0, rows)}: {name} is not a number")
        bad |= wrong


def _filter(cols: ZeekColumns, mask: npt.NDArray[np.bool_]) -> ZeekColumns:
    keep = pa.array(mask)
    values = {k: (v[mask] if isinstance(v, np.ndarray) else pc.filter(v, keep)) for k, v in cols.__dict__.items()}
    return ZeekColumns(**values)


def _to_flows(c: ZeekColumns, path: Path, warnings: WarningLog) -> pa.Table:
    """Map one batch of typed Zeek columns to flow columns (plus ``uid`` and ``parents`` helpers)."""
    src, src_ok = canonical_ips(c.orig_h)
    dst, dst_ok = canonical_ips(c.resp_h)
    is_v6 = pc.match_substring(src, ":")
    proto, proto_bad = proto_numbers(c.proto, is_v6)
    bad = ~src_ok | ~dst_ok | proto_bad
    if bad.any():
        warnings.add(
            f"{path}: {int(bad.sum())} record(s) skipped, {describe_lines(0, c.line[bad])}: "
            "unusable address or protocol"
        )
    n = len(src)
    zero = pa.scalar(0, pa.int64())
    orig_pkts, resp_pkts = pc.fill_null(c.orig_pkts, zero), pc.fill_null(c.resp_pkts, zero)
    orig_ipb, resp_ipb = pc.fill_null(c.orig_ip_bytes, zero), pc.fill_null(c.resp_ip_bytes, zero)
    has_ports = pc.is_in(proto, value_set=pa.array([6, 17, 132], pa.uint8()))
    no_port = pa.scalar(None, pa.int64())
    nanos = pc.round(pc.multiply(pc.fill_null(c.duration, 0.0), 1e9)).cast(pa.int64())
    first = c.ts.cast(TS)
    last = pc.add(first.cast(pa.int64()), nanos).cast(TS)
    service = pc.utf8_lower(c.service)
    protection, protocol, reason = _protection(service)
    vlan = pc.coalesce(c.inner_vlan, c.vlan)
    table = pa.table(
        {
            "src": src,
            "dst": dst,
            "sport": pc.if_else(has_ports, c.orig_p, no_port),
            "dport": pc.if_else(has_ports, c.resp_p, no_port),
            "proto": proto,
            "packets": pc.add(orig_pkts, resp_pkts),
            "bytes": pc.add(orig_ipb, resp_ipb),
            "packets_fwd": orig_pkts,
            "bytes_fwd": orig_ipb,
            "payload_bytes": pc.add(c.orig_bytes, c.resp_bytes),
            "first_seen": first,
            "last_seen": last,
            "protection": protection,
            "protocol": protocol,
            "reason": reason,
            "vlan": vlan,
            "source": pa.array([f"zeek:{path.name}"] * n, pa.string()),
            "uid": c.uid,
            "service": service,
            "parents": c.tunnel_parents,
        }
    )
    return table.filter(pa.array(~bad)) if bad.any() else table


def _protection(service: pa.Array) -> tuple[pa.Array, pa.Array, pa.Array]:
    """Protection, protocol and reason per row, computed once per distinct service value."""
    enc = pc.dictionary_encode(service)
    decided = [_one_service(v) for v in enc.dictionary.to_pylist()]

    def column(i: int) -> pa.Array:
        values = pa.array([d[i] for d in decided], pa.string())
        return pa.DictionaryArray.from_arrays(enc.indices, values).cast(pa.string())

    # Null services are not in the dictionary: their rows get the "no service" verdict.
    none = _one_service(None)
    out = [pc.fill_null(column(i), none[i]) if none[i] is not None else column(i) for i in range(3)]
    return out[0], out[1], out[2]


def _one_service(svc: str | None) -> tuple[str, str | None, str]:
    if not svc:
        return Protection.UNKNOWN.value, None, "zeek recognised no service; conn.log has no payload verdict"
    parts = [s.strip() for s in svc.split(",") if s.strip()]
    protocol = ",".join("tls" if s == "ssl" else s for s in parts)
    enc = [s for s in parts if s in ENCRYPTED_SERVICES]
    plain = [s for s in parts if s in PLAINTEXT_SERVICES]
    if enc and plain:
        return (
            Protection.UNKNOWN.value,
            protocol,
            f"zeek service={svc}: both a cleartext protocol and an encrypted handshake seen (STARTTLS?)",
        )
    if enc:
        return Protection.ENCRYPTED.value, protocol, "; ".join(ENCRYPTED_SERVICES[s] for s in enc)
    if plain:
        return Protection.PLAINTEXT.value, protocol, f"zeek service={svc} (parsed as cleartext)"
    return Protection.UNKNOWN.value, protocol, f"zeek service={svc} does not decide confidentiality"


def _resolve_outer(flows: pa.Table) -> pa.Table:
    """Fill ``outer`` from ``tunnel_parents``: the parent connection's service and endpoints, if logged."""
    if flows.num_rows == 0:
        return flows.drop_columns(["uid", "service", "parents"])
    # Any logged connection can be a parent (a Teredo tunnel before Zeek recognised it has no service).
    tunnels = flows.filter(pc.is_valid(flows["uid"]))
    desc = pc.binary_join_element_wise(
        pc.coalesce(tunnels["service"], pa.scalar("tunnel")), " ", tunnels["src"], "→", tunnels["dst"], ""
    )
    parents = flows["parents"].combine_chunks()
    flat = pc.list_flatten(parents)
    if len(flat) == 0:
        return flows.drop_columns(["uid", "service", "parents"])
    idx = pc.index_in(flat, value_set=tunnels["uid"].combine_chunks())
    found = pc.take(desc, idx)
    text = pc.coalesce(found, pc.binary_join_element_wise("tunnel parent uid ", flat, ""))
    lengths = pc.fill_null(pc.list_value_length(parents), 0).to_numpy(zero_copy_only=False)
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int32)
    if isinstance(text, pa.ChunkedArray):
        text = text.combine_chunks()
    rebuilt = pa.ListArray.from_arrays(pa.array(offsets), text)
    outer = pc.binary_join(rebuilt, "; ")
    outer = pc.if_else(pc.greater(pc.list_value_length(parents), 0), outer, pa.scalar(None, pa.string()))
    return flows.drop_columns(["uid", "service", "parents"]).append_column("outer", outer)


_EMPTY_ZEEK: Final = pa.table(
    {
        "src": pa.array([], pa.string()),
        "dst": pa.array([], pa.string()),
        "proto": pa.array([], pa.uint8()),
        "packets": pa.array([], pa.int64()),
        "bytes": pa.array([], pa.int64()),
        "protection": pa.array([], pa.string()),
        "source": pa.array([], pa.string()),
        "uid": pa.array([], pa.string()),
        "service": pa.array([], pa.string()),
        "parents": pa.array([], pa.list_(pa.string())),
    }
)

__all__ = ["ENCRYPTED_SERVICES", "PLAINTEXT_SERVICES", "ZeekReader"]
