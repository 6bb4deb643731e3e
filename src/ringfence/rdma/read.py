"""The family's boundary: captures in, RDMA summaries out; what goes wrong becomes an :class:`RdmaError`.

Only pcap and pcapng carry BTH and RETH headers: any other flow input (Zeek, VPC, IPFIX) has no RDMA facts, which
is said, not guessed at. The reader's own errors already name the file and offset (they are ``InputError``s).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ringfence.observe.flows.interface import FlowSourceError, ProgressFn, ReadResult
from ringfence.observe.flows.pcap import PcapReader
from ringfence.observe.flows.registry import read_any
from ringfence.observe.schema import RdmaFacts
from ringfence.rdma.analysis import analyse
from ringfence.rdma.interface import RdmaError, RdmaSummary


def read_flows_and_rdma(path: Path, *, progress: ProgressFn | None = None) -> tuple[ReadResult, RdmaFacts | None]:
    """Flows of any flow input, with its RDMA facts when it is a capture (one pass); None for other inputs."""
    reader = PcapReader()
    if str(path) == "-":  # stdin: the flow registry spools it; its RDMA facts are not gathered
        return read_any(path, progress=progress), None
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError as exc:
        raise RdmaError(str(path), f"cannot read: {exc.strerror or exc}") from exc
    if not reader.sniff(head):
        return read_any(path, progress=progress), None
    return reader.read_rdma(path, progress=progress)


def summarise(facts: RdmaFacts, source: str, warnings: Sequence[str] = ()) -> RdmaSummary:
    """The findings of one capture's RDMA facts, with what it held."""
    return RdmaSummary(
        source=source,
        packets=facts.packets,
        connections=facts.conns.num_rows,
        keys=facts.keys.num_rows,
        payload_samples=int(sum(facts.payload.column("samples").to_pylist())),
        truncated=facts.truncated,
        findings=tuple(analyse(facts, source)),
        warnings=tuple(warnings),
    )


def check_captures(paths: Sequence[Path], *, progress: ProgressFn | None = None) -> list[RdmaSummary]:
    """One summary per capture. Raises :class:`RdmaError` for an input that is not a capture or cannot be read."""
    out: list[RdmaSummary] = []
    for path in paths:
        if path.is_dir():
            raise RdmaError(str(path), "is a directory, not a capture")
        try:
            result, facts = read_flows_and_rdma(path, progress=progress)
        except FlowSourceError:
            raise
        except OSError as exc:
            raise RdmaError(str(path), f"cannot read: {exc.strerror or exc}") from exc
        if facts is None:
            raise RdmaError(str(path), "is not a pcap or pcapng capture: only captures carry RDMA headers")
        out.append(summarise(facts, f"pcap:{path.name}", result.warnings))
    return out


__all__ = ["check_captures", "read_flows_and_rdma", "summarise"]
