"""Job-partition facts (``ringfence partition prove POLICY --target lab -o partitions.json``): each partitioned
job probed both ways at L2 and L3 on the fabric, and its ranks' step counters around the probes."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, Field

from ringfence.facts.interface import Loaded, Strict, parse

FORMAT = "ringfence-partitions/1"
HINT = "write it with: ringfence partition prove POLICY --target lab -o partitions.json"


class JobModel(Strict):
    """One job as probed: its ranks, their fabric ports, and each rank's step counter before and after."""

    job: str
    partitioned: bool
    members: tuple[str, ...]
    ports: tuple[str, ...]
    steps_before: dict[str, Annotated[int, Field(ge=0)]]
    steps_after: dict[str, Annotated[int, Field(ge=0)]]


class ProbeModel(Strict):
    """One partition probe (:class:`ringfence.enforce.partition_probe.PartitionProbe`)."""

    layer: Literal["l2", "l3", "l3-routed"]
    source: str
    source_job: str | None
    destination: str
    destination_job: str
    address: str
    port: Annotated[int, Field(ge=0, le=65535)]
    expected: Literal["allow", "deny"]
    outcome: Literal["answered", "silent", "connected", "timeout", "refused", "reset", "error"]
    by_policy: bool | None
    detail: str = ""


class PartitionsDoc(Strict):
    """The partitions facts file."""

    format: Literal["ringfence-partitions/1"]
    target: str
    taken: AwareDatetime
    evidence: str | None = None
    jobs: tuple[JobModel, ...]
    probes: tuple[ProbeModel, ...]


def load(path: str | Path, data: bytes | None = None) -> Loaded:
    """``Facts.partitions`` (the validated document as plain JSON values) and when it was taken."""
    doc = parse(path, PartitionsDoc, "partitions facts", HINT, fmt=FORMAT, data=data)
    value: dict[str, Any] = doc.model_dump(mode="json")
    return Loaded("partitions", str(path), value, doc.taken)


__all__ = ["FORMAT", "JobModel", "PartitionsDoc", "ProbeModel", "load"]
