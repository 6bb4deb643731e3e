"""The evidence family: an append-only, tamper-evident record of every observation, action and
finding, and (in :mod:`ringfence.evidence.report`) the renderers of reports.

Open a store with :meth:`EvidenceStore.open`, write with :meth:`~EvidenceStore.append` and
:meth:`~EvidenceStore.add_artifact`, check with :meth:`~EvidenceStore.verify`. The format and what
verification proves are described in ``docs/evidence.md``.
"""

from ringfence.evidence.interface import (
    GENESIS,
    ChainHead,
    EvidenceError,
    EvidenceId,
    Record,
    RecordKind,
    StoreDamaged,
    TamperReason,
    UnknownEvidence,
    VerifyReport,
    canonical_json,
    make_id,
    parse_id,
    sha256_bytes,
    sha256_file,
)
from ringfence.evidence.store import EvidenceStore, NewRecord

__all__ = [
    "GENESIS",
    "ChainHead",
    "EvidenceError",
    "EvidenceId",
    "EvidenceStore",
    "NewRecord",
    "Record",
    "RecordKind",
    "StoreDamaged",
    "TamperReason",
    "UnknownEvidence",
    "VerifyReport",
    "canonical_json",
    "make_id",
    "parse_id",
    "sha256_bytes",
    "sha256_file",
]
