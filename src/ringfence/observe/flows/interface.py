"""The flow-source family: a reader turns one input into the one Arrow flow schema."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import pyarrow as pa

from ringfence.errors import InputError


class FlowSourceError(InputError):
    """A flow input that cannot be read: names the file and the byte offset or line."""


@dataclass(frozen=True)
class ReadResult:
    """Flows read from one input, plus warnings for the parts that were skipped."""

    flows: pa.Table
    warnings: tuple[str, ...] = field(default=())
    records: int = 0  # packets or log records consumed


ProgressFn = Callable[[int, int], None]  # (done_bytes, total_bytes)


class FlowReader(Protocol):
    """Reads one file (or stdin, as bytes) into flows."""

    name: str

    def sniff(self, head: bytes) -> bool:
        """True if ``head`` (the first 4 KiB) looks like this format."""
        ...

    def read(self, path: Path, *, progress: ProgressFn | None = None) -> ReadResult:
        """Read the whole file. Raises :class:`FlowSourceError` on unreadable input."""
        ...


__all__ = ["FlowReader", "FlowSourceError", "ProgressFn", "ReadResult"]
