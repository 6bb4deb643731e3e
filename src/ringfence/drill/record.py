"""A played drill on the record: the report into the evidence store (hash-chained) and into its file.

The file is written to a temporary name, fsynced and renamed, so a crash never leaves half a report;
the store gets the same report as one observation, with the file's sha256 as its input.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ringfence.atomic import write_atomic
from ringfence.drill.interface import DrillReport
from ringfence.evidence import EvidenceStore, RecordKind

#: the evidence source of every drill record
DRILL_SOURCE = "ringfence.drill"


def record(report: DrillReport, store: EvidenceStore, output: Path | None) -> tuple[str, bytes]:
    """Write ``report`` to ``output`` (when given) and record it in ``store``; returns (evidence id, JSON)."""
    doc = report.to_json()
    body = (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()
    if output is not None:
        write_atomic(output, body)
    ev = store.append(RecordKind.OBSERVATION, DRILL_SOURCE, f"drill {report.scenario}", doc,
                      {"report": hashlib.sha256(body).hexdigest()})
    return str(ev), body


__all__ = ["DRILL_SOURCE", "record"]
