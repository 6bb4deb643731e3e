"""Facts validated at the edge: one strict schema module per kind of gathered fact.

:data:`LOADERS` is the one registry (explicit, no import side effects) from a
:class:`~ringfence.controls.interface.Facts` field to the loader of its files.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

from ringfence.facts import (
    attestation,
    bench,
    changes,
    containment,
    drills,
    gateway,
    keys,
    partitions,
    probes,
    ruleset,
    traces,
)
from ringfence.facts.interface import MAX_DEPTH, FactsFileError, Loaded

#: Facts field → loader of one or more files of that kind.
LOADERS: Final[dict[str, Callable[..., Loaded]]] = {
    "probes": probes.load,
    "ruleset": ruleset.load,
    "changes": changes.load,
    "containment": containment.load,
    "keys": keys.load,
    "bench": bench.load,
    "attestation": attestation.load,
    "traces": traces.load,
    "drills": drills.load,
    "gateway": gateway.load,
    "partitions": partitions.load,
}


def load_many(kind: str, paths: Sequence[str | Path], data: Sequence[bytes] | None = None) -> list[Loaded]:
    """Every file of ``kind`` loaded (containment reports load together, as one set of drills);
    ``data`` holds the files' bytes, in order, when they were already read (or come from a store)."""
    if kind not in LOADERS:
        raise FactsFileError(", ".join(str(p) for p in paths), f"unknown kind of facts {kind!r}")
    if kind == "containment":
        return [containment.load(*paths, data=data)]
    return [LOADERS[kind](p, data[i] if data is not None else None) for i, p in enumerate(paths)]


__all__ = ["LOADERS", "MAX_DEPTH", "FactsFileError", "Loaded", "load_many"]
