"""The one place that knows every flow source: name → reader, and detection by content.

Detection looks at the first 4 KiB (magic numbers, header lines, JSON keys), never at the file
name: a Zeek log called ``flows.json`` or piped on stdin is still a Zeek log.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import BinaryIO, Final

import pyarrow as pa

from ringfence.observe.arrow_kernels import pc
from ringfence.observe.flows._common import os_error, read_head
from ringfence.observe.flows.interface import FlowReader, FlowSourceError, ProgressFn, ReadResult
from ringfence.observe.schema import empty_flows

#: pcap / pcapng magic numbers, so a capture is recognised even before its reader is importable.
_PCAP_MAGICS: Final = (
    b"\xd4\xc3\xb2\xa1",
    b"\xa1\xb2\xc3\xd4",
    b"\x4d\x3c\xb2\xa1",
    b"\xa1\xb2\x3c\x4d",
    b"\x0a\x0d\x0d\x0a",
)
STDIN: Final = "-"


def _pcap() -> FlowReader:
    # Imported here: the capture reader lives in its own module and may pull in heavier dependencies.
    from ringfence.observe.flows.pcap import PcapReader

    reader: FlowReader = PcapReader()
    return reader


# Each reader is imported when it is first tried: detection stops at the first that recognises the head,
# so reading a capture never pays for the text readers' imports (~60 ms of every `ringfence flows x.pcap`).
def _ipfix() -> FlowReader:
    from ringfence.observe.flows.ipfix import IpfixReader

    return IpfixReader()


def _zeek() -> FlowReader:
    from ringfence.observe.flows.zeek import ZeekReader

    return ZeekReader()


def _hubble() -> FlowReader:
    from ringfence.observe.flows.hubble import HubbleReader

    return HubbleReader()


def _vpc() -> FlowReader:
    from ringfence.observe.flows.vpc import VpcFlowLogReader

    return VpcFlowLogReader()


#: Every flow source by name, in detection order (binary formats first, then the text formats).
READERS: Final[dict[str, Callable[[], FlowReader]]] = {
    "pcap": _pcap,
    "ipfix": _ipfix,
    "zeek": _zeek,
    "hubble": _hubble,
    "vpc": _vpc,
}


def reader(name: str) -> FlowReader:
    """The reader called ``name`` (one of :data:`READERS`)."""
    try:
        factory = READERS[name]
    except KeyError:
        raise FlowSourceError(name, f"unknown flow format; known: {', '.join(READERS)}") from None
    try:
        return factory()
    except ImportError as exc:
        raise FlowSourceError(name, f"the {name} reader is not available: {exc}") from exc


def detect(head: bytes, name: str) -> FlowReader:
    """The reader whose format ``head`` (the first 4 KiB of ``name``) is in; else an error listing what was tried."""
    tried: list[str] = []
    for fmt, factory in READERS.items():
        try:
            candidate = factory()
        except ImportError:
            if head[:4] in _PCAP_MAGICS and fmt == "pcap":
                raise FlowSourceError(name, "a packet capture, but the pcap reader is not installed") from None
            tried.append(f"{fmt} (reader not available)")
            continue
        if candidate.sniff(head):
            return candidate
        tried.append(fmt)
    if not head:
        raise FlowSourceError(name, "empty input: no flows")
    raise FlowSourceError(
        name,
        f"unrecognised flow format (tried {', '.join(tried)})",
        hint="supported: pcap/pcapng, nfcapd or raw NetFlow v5/v9/IPFIX, Zeek conn.log (TSV/JSON), "
        "Hubble JSON, AWS VPC flow logs",
    )


def _spool_stdin(stream: BinaryIO) -> Path:
    """Copy stdin to a temp file: readers need to seek and to know the size (progress)."""
    try:
        with tempfile.NamedTemporaryFile(prefix="ringfence-stdin-", suffix=".flows", delete=False) as fh:
            shutil.copyfileobj(stream, fh, 1 << 20)
            return Path(fh.name)
    except OSError as exc:
        raise os_error(Path(STDIN), exc) from exc


def read_any(
    path_or_dash: str | Path, *, progress: ProgressFn | None = None, stdin: BinaryIO | None = None
) -> ReadResult:
    """Detect the format of a file (or ``-`` for stdin) by content and read it."""
    if str(path_or_dash) != STDIN:
        path = Path(path_or_dash)
        if path.is_dir():
            raise FlowSourceError(str(path), "is a directory, not a flow file")
        return detect(read_head(path), str(path)).read(path, progress=progress)
    spooled = _spool_stdin(stdin if stdin is not None else sys.stdin.buffer)
    try:
        result = detect(read_head(spooled), "stdin").read(spooled, progress=progress)
    except FlowSourceError as exc:
        raise FlowSourceError(
            exc.where.replace(str(spooled), "stdin"), exc.message.split(": ", 1)[-1], hint=exc.hint
        ) from exc
    finally:
        spooled.unlink(missing_ok=True)
    # Name stdin, not the temp file, in what the user sees.
    source = pc.replace_substring(result.flows["source"], spooled.name, "stdin")
    flows = result.flows.set_column(result.flows.schema.get_field_index("source"), "source", source)
    warnings = tuple(w.replace(str(spooled), "stdin") for w in result.warnings)
    return ReadResult(flows=flows, warnings=warnings, records=result.records)


def read_all(paths: Iterable[str | Path], *, progress: ProgressFn | None = None) -> ReadResult:
    """Read several inputs (each detected on its own) into one table."""
    tables: list[pa.Table] = []
    warnings: list[str] = []
    records = 0
    for p in paths:
        result = read_any(p, progress=progress)
        tables.append(result.flows)
        warnings.extend(result.warnings)
        records += result.records
    flows = pa.concat_tables(tables) if tables else empty_flows()
    return ReadResult(flows=flows, warnings=tuple(warnings), records=records)


__all__ = ["READERS", "STDIN", "detect", "read_all", "read_any", "reader"]
