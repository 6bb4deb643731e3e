"""NetFlow v5/v9 and IPFIX → flows: nfcapd files (through ``nfdump``) or raw export datagrams.

* Files written by ``nfcapd`` are read with the installed ``nfdump`` (``-o fmt:…`` with millisecond
  times, run with ``TZ=UTC``), streamed through Arrow's CSV reader.
* Files of raw export datagrams (v5, v9 template+data, IPFIX template+data, concatenated) are parsed
  directly; data sets whose template is not in the file are reported.

NetFlow records are one direction each: they are folded into conversations per exporter (see
:mod:`ringfence.observe.flows._bidir`). Flow records carry no payload: protection is ``unknown``.
"""

from __future__ import annotations

import mmap
import os
import shutil
import struct
import subprocess
from pathlib import Path
from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from ringfence.errors import EnvironmentProblem
from ringfence.observe.flows._bidir import RECORD_SCHEMA, to_conversations
from ringfence.observe.flows._common import (
    WarningLog,
    canonical_ips,
    iso_to_ts,
    os_error,
    parse_uint,
    read_head,
    warn_if_empty,
)
from ringfence.observe.flows._netflow_raw import MAX_TEMPLATES, RawDatagramParser
from ringfence.observe.flows.interface import FlowSourceError, ProgressFn, ReadResult
from ringfence.observe.schema import Protection, conform

REASON: Final = "flow record has no payload"
NFCAPD_MAGIC: Final = b"\x0c\xa5"  # 0xA50C little-endian, nffile layout versions 1 and 2
#: nfdump output columns: times with milliseconds, plain numbers, full IPv6 addresses.
_FMT_FIELDS: Final = ("ts", "te", "pr", "sa", "da", "sp", "dp", "ipkt", "ibyt", "opkt", "obyt", "flg", "ra", "svln")
_FMT: Final = "fmt:" + "|".join(f"%{f}" for f in _FMT_FIELDS)
NFDUMP_TIMEOUT_S: Final = 600


def _raw_header_ok(head: bytes) -> bool:
    if len(head) < 16:
        return False
    version, count = struct.unpack_from(">HH", head, 0)
    if version == 5:
        return 1 <= count <= 30 and len(head) >= 24
    if version == 9:
        if len(head) < 24 or count == 0:
            return False
        set_id = struct.unpack_from(">H", head, 20)[0]
        return set_id in (0, 1) or set_id >= 256
    if version == 10:
        set_id = struct.unpack_from(">H", head, 16)[0] if len(head) >= 18 else 0
        return count >= 20 and (set_id in (2, 3) or set_id >= 256)
    return False


class IpfixReader:
    """Reads NetFlow v5/v9 and IPFIX, from nfcapd files or raw export datagrams."""

    name = "ipfix"

    def sniff(self, head: bytes) -> bool:
        """nfcapd's file magic, or a plausible NetFlow v5/v9/IPFIX datagram header."""
        if head[:2] == NFCAPD_MAGIC and head[2:4] in (b"\x01\x00", b"\x02\x00"):
            return True
        return _raw_header_ok(head)

    def read(self, path: Path, *, progress: ProgressFn | None = None) -> ReadResult:
        """Read all flow records and fold them into conversations."""
        head = read_head(path, 64)
        warnings = WarningLog()
        if head[:2] == NFCAPD_MAGIC:
            rec, records = _read_nfdump(path, warnings)
            kind = "nfcapd"
        else:
            rec, records = _read_raw(path, warnings, progress)
            kind = "netflow"
        conv = to_conversations(rec)
        n = conv.num_rows
        vlan = conv["attr"].cast(pa.int32())
        conv = conv.drop_columns(["attr", "vantage"]).append_column("vlan", vlan)
        conv = conv.append_column("protection", pa.array([Protection.UNKNOWN.value] * n, pa.string()))
        conv = conv.append_column("reason", pa.array([REASON] * n, pa.string()))
        conv = conv.append_column("source", pa.array([f"{kind}:{path.name}"] * n, pa.string()))
        warn_if_empty(path, records, warnings)
        return ReadResult(flows=conform(conv), warnings=warnings.freeze(), records=records)


def _read_raw(path: Path, warnings: WarningLog, progress: ProgressFn | None) -> tuple[pa.Table, int]:
    parser = RawDatagramParser(path, warnings)
    try:
        with path.open("rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size == 0:
                raise FlowSourceError(f"{path}@0", "empty file")
            # mmap: the page cache holds the file, not the Python heap.
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                tables = parser.parse(mm, progress)  # type: ignore[arg-type]
                rec = pa.concat_tables(tables) if tables else RECORD_SCHEMA.empty_table()
                rec = pa.table({name: rec[name].combine_chunks() for name in rec.column_names})  # detach from mmap
    except OSError as exc:
        raise os_error(path, exc) from exc
    if rec.num_rows == 0 and parser.missing_template_sets:
        ignored = (
            f"; {parser.templates_ignored} template(s) ignored beyond the limit of {MAX_TEMPLATES}"
            if parser.templates_ignored
            else ""
        )
        raise FlowSourceError(
            f"{path}@0",
            f"{parser.missing_template_sets} data set(s) but none of their templates{ignored}",
            hint="templates travel in separate datagrams: concatenate the template file first (cat tpl.dat data.dat)",
        )
    return rec, parser.records


def _read_nfdump(path: Path, warnings: WarningLog) -> tuple[pa.Table, int]:
    exe = shutil.which("nfdump")
    if exe is None:
        raise EnvironmentProblem(f"{path}: reading nfcapd files needs nfdump", hint="apt-get install nfdump")
    env = dict(os.environ, TZ="UTC")
    cmd = [exe, "-r", str(path), "-q", "-N", "-6", "-o", _FMT]
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    except OSError as exc:
        raise EnvironmentProblem(f"cannot run nfdump: {exc.strerror or exc}") from exc
    assert proc.stdout is not None and proc.stderr is not None
    parts: list[pa.Table] = []
    records = 0
    try:
        reader = pacsv.open_csv(
            proc.stdout,
            read_options=pacsv.ReadOptions(column_names=list(_FMT_FIELDS), block_size=1 << 22),
            parse_options=pacsv.ParseOptions(delimiter="|", quote_char=False),
            convert_options=pacsv.ConvertOptions(column_types={f: pa.string() for f in _FMT_FIELDS}),
        )
        for batch in reader:
            records += batch.num_rows
            parts.append(_nfdump_records(pa.Table.from_batches([batch]), path, warnings))
    except pa.ArrowInvalid as exc:
        if "Empty CSV file" not in str(exc):
            proc.kill()
            raise FlowSourceError(str(path), f"unexpected nfdump output: {exc}") from exc
    finally:
        try:
            stderr = proc.stderr.read().decode("utf-8", "replace")
            rc = proc.wait(timeout=NFDUMP_TIMEOUT_S)
        except subprocess.TimeoutExpired as exc:
            proc.kill()
            raise FlowSourceError(str(path), "nfdump did not finish") from exc
        finally:
            proc.stdout.close()
            proc.stderr.close()
    if rc != 0:
        detail = stderr.strip().splitlines()[0] if stderr.strip() else f"exit status {rc}"
        raise FlowSourceError(str(path), f"nfdump cannot read it: {detail}")
    rec = pa.concat_tables(parts) if parts else RECORD_SCHEMA.empty_table()
    return rec, records


def _nfdump_records(t: pa.Table, path: Path, warnings: WarningLog) -> pa.Table:
    def col(name: str) -> pa.Array:
        return pc.utf8_trim_whitespace(t.column(name).combine_chunks())

    src, src_ok = canonical_ips(col("sa"))
    dst, dst_ok = canonical_ips(col("da"))
    proto, bad_p = parse_uint(col("pr"), 255)
    sport, bad_s = parse_uint(col("sp"), 65535)
    dport, bad_d = parse_uint(col("dp"), 65535)
    ipkt, bad_1 = parse_uint(col("ipkt"), 2**62)
    ibyt, bad_2 = parse_uint(col("ibyt"), 2**62)
    opkt, _ = parse_uint(col("opkt"), 2**62)
    obyt, _ = parse_uint(col("obyt"), 2**62)
    vlan, _ = parse_uint(col("svln"), 4095)
    first, _ = iso_to_ts(col("ts"))
    last, _ = iso_to_ts(col("te"))
    bad = ~src_ok | ~dst_ok | bad_p | bad_s | bad_d | bad_1 | bad_2
    if bad.any():
        warnings.add(f"{path}: {int(bad.sum())} nfdump record(s) with unusable fields skipped")
    flags = col("flg")
    syn_only = pc.and_(pc.match_substring(flags, "S"), pc.invert(pc.match_substring(flags, "A")))
    n = t.num_rows
    has_ports = pc.is_in(proto, value_set=pa.array([6, 17, 132], pa.int64()))
    no_port = pa.scalar(None, pa.int64())
    vlan_text = pc.if_else(pc.greater(pc.fill_null(vlan, 0), 0), vlan.cast(pa.string()), pa.scalar(None, pa.string()))
    fwd = pa.table(
        {
            "src": src,
            "dst": dst,
            "sport": pc.if_else(has_ports, sport, no_port),
            "dport": pc.if_else(has_ports, dport, no_port),
            "proto": pc.fill_null(proto, 0),
            "packets": pc.fill_null(ipkt, 0),
            "bytes": pc.fill_null(ibyt, 0),
            "payload_bytes": pa.nulls(n, pa.int64()),
            "first_seen": first,
            "last_seen": last,
            "hint": pc.if_else(pc.fill_null(syn_only, False), 1, 0),
            "vantage": col("ra"),
            "src_identity": pa.nulls(n, pa.string()),
            "dst_identity": pa.nulls(n, pa.string()),
            "verdict": pa.nulls(n, pa.string()),
            "attr": vlan_text,
        }
    ).cast(RECORD_SCHEMA)
    if bad.any():
        keep = pa.array(~bad)
        fwd, opkt, obyt = fwd.filter(keep), pc.filter(opkt, keep), pc.filter(obyt, keep)
    # A bidirectional record (IPFIX biflow, NSEL) carries the reverse direction in opkt/obyt.
    has_rev = pc.greater(pc.fill_null(opkt, 0), 0)
    rev = fwd.filter(has_rev)
    if rev.num_rows:
        rev_cols = {
            "src": rev["dst"],
            "dst": rev["src"],
            "sport": rev["dport"],
            "dport": rev["sport"],
            "packets": pc.filter(pc.fill_null(opkt, 0), has_rev),
            "bytes": pc.filter(pc.fill_null(obyt, 0), has_rev),
        }
        for name, value in rev_cols.items():
            rev = rev.set_column(rev.schema.get_field_index(name), name, value)
        rev_hint = pa.array(np.full(rev.num_rows, -1, np.int8))
        rev = rev.set_column(rev.schema.get_field_index("hint"), "hint", rev_hint)
        fwd_hint = pc.if_else(has_rev, 1, fwd["hint"]).cast(pa.int8())
        fwd = fwd.set_column(fwd.schema.get_field_index("hint"), "hint", fwd_hint)
        fwd = pa.concat_tables([fwd, rev.cast(RECORD_SCHEMA)])
    return fwd


__all__ = ["NFCAPD_MAGIC", "REASON", "IpfixReader"]
