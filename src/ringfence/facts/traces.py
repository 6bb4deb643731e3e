"""Trace facts (``ringfence trace --sample allowed|denied -o trace.json``), validated against the trace model."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from ringfence.facts.interface import FactsFileError, Loaded, parse
from ringfence.trace.model import Trace

HINT = "write them with: ringfence trace --sample allowed --target lab -o trace-allowed.json (and --sample denied)"


def load(path: str | Path, data: bytes | None = None) -> Loaded:
    """``Facts.traces`` gets one validated trace per file; its age is when it was reconstructed."""
    doc = parse(path, Trace, "trace facts", HINT, data=data)
    try:
        generated = datetime.fromisoformat(doc.generated)
    except ValueError as exc:
        raise FactsFileError(f"{path}: generated", f"not an ISO 8601 time: {doc.generated[:40]!r}", hint=HINT) from exc
    if generated.tzinfo is None:
        raise FactsFileError(f"{path}: generated", "needs a UTC offset", hint=HINT)
    value: dict[str, Any] = doc.model_dump(mode="json")
    return Loaded("traces", str(path), value, generated)


__all__ = ["HINT", "load"]
