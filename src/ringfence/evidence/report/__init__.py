"""Report renderers: each turns one :class:`Assessment` into the bytes of one report format.

The registry :data:`RENDERERS` is the one place formats are named (no import side effects); the
caller writes the bytes atomically, e.g. with :func:`write_report`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from ringfence.atomic import write_atomic
from ringfence.evidence.report import html, json, junit, oscal, sarif, terminal
from ringfence.evidence.report.interface import (
    Assessment,
    InputSummary,
    MatrixRow,
    Renderer,
    ReportError,
    Summary,
    VerdictCounts,
    exit_code,
)

#: format name → renderer ``(Assessment) -> bytes``.
RENDERERS: Final[dict[str, Renderer]] = {
    "html": html.render,
    "json": json.render,
    "junit": junit.render,
    "oscal": oscal.render,
    "sarif": sarif.render,
    "terminal": terminal.render,
}

#: format name → the file name a report of that format gets by default.
DEFAULT_NAMES: Final[dict[str, str]] = {
    "html": "report.html",
    "json": "report.json",
    "junit": "junit.xml",
    "oscal": "assessment-results.json",
    "sarif": "report.sarif",
    "terminal": "summary.txt",
}


def write_report(assessment: Assessment, fmt: str, path: str | Path) -> Path:
    """Render ``assessment`` as ``fmt`` and write it atomically to ``path``; returns the path."""
    try:
        renderer = RENDERERS[fmt]
    except KeyError:
        raise ReportError(f"unknown report format {fmt!r}", hint=f"choose from {', '.join(RENDERERS)}") from None
    write_atomic(path, renderer(assessment))
    return Path(path)


__all__ = [
    "DEFAULT_NAMES",
    "RENDERERS",
    "Assessment",
    "InputSummary",
    "MatrixRow",
    "Renderer",
    "ReportError",
    "Summary",
    "VerdictCounts",
    "exit_code",
    "write_report",
]
