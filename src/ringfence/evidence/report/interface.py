"""The report input model: one :class:`Assessment` every renderer reads, and the exit code it implies.

A renderer is a pure function ``(Assessment) -> bytes``; the caller writes the bytes atomically
(:func:`ringfence.atomic.write_atomic`). Renderers never import the CLI and never fetch anything.
The summary is not stored but computed from the controls, so a report cannot claim counts its
findings do not support.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Final

from ringfence import __version__
from ringfence.controls.interface import ControlResult, Verdict
from ringfence.errors import RingfenceError
from ringfence.evidence.interface import ChainHead
from ringfence.evidence.report.performance import Headline, LayerPerformance, headline, performance_side

#: Order in which traffic classes and protections are shown; anything else follows, sorted.
CLASS_ORDER: Final = ("storage", "collective", "management", "replication", "unclassified")
PROTECTION_ORDER: Final = ("encrypted", "integrity-only", "handshake-only", "plaintext", "unknown")
VERDICT_ORDER: Final = (Verdict.FAIL, Verdict.UNKNOWN, Verdict.EXEMPT, Verdict.PASS)

# Inline SVG is inserted into the HTML report as markup, so it must not be able to run or fetch.
_SVG_FORBIDDEN: Final = re.compile(
    r"<\s*(script|foreignobject|iframe|object|embed|image|use)\b|\bon[a-z]+\s*=|(?:href|src)\s*=\s*(?![\"']?\s*#)"
    r"|url\s*\(\s*(?![\"']?\s*#)|javascript:|https?:|data:|@import",
    re.IGNORECASE,
)


class ReportError(RingfenceError):
    """A report cannot be built or rendered from what was given."""


@dataclass(frozen=True)
class InputSummary:
    """One input the assessment read: a capture, a flow log, a benchmark file, a probe run."""

    name: str
    kind: str  # "pcap", "zeek", "hubble", "bench", "probes", …
    sha256: str
    records: int | None = None  # records/packets consumed, if known
    flows: int | None = None  # flows produced, if it is a flow source


@dataclass(frozen=True)
class MatrixRow:
    """One cell of the observed communication matrix, joined with the approved matrix."""

    src_zone: str
    dst_zone: str
    traffic_class: str
    rule: str | None  # the approved-flow id that allows it; None when nothing does
    approved: bool
    flows: int
    bytes: int


@dataclass(frozen=True)
class VerdictCounts:
    """How many of something have each verdict."""

    passed: int = 0
    failed: int = 0
    exempt: int = 0
    unknown: int = 0

    @classmethod
    def of(cls, verdicts: Iterable[Verdict]) -> VerdictCounts:
        """Count an iterable of verdicts."""
        counts = dict.fromkeys(Verdict, 0)
        for v in verdicts:
            counts[v] += 1
        return cls(counts[Verdict.PASS], counts[Verdict.FAIL], counts[Verdict.EXEMPT], counts[Verdict.UNKNOWN])

    def get(self, verdict: Verdict) -> int:
        """The count for one verdict."""
        return {
            Verdict.PASS: self.passed,
            Verdict.FAIL: self.failed,
            Verdict.EXEMPT: self.exempt,
            Verdict.UNKNOWN: self.unknown,
        }[verdict]

    @property
    def total(self) -> int:
        """All counted."""
        return self.passed + self.failed + self.exempt + self.unknown

    def as_dict(self) -> dict[str, int]:
        """``{"pass": …, "fail": …, "exempt": …, "unknown": …}`` in that order."""
        return {v.value: self.get(v) for v in Verdict}


@dataclass(frozen=True)
class Summary:
    """Counts per verdict over the controls' aggregate verdicts and over all their findings."""

    controls: VerdictCounts
    findings: VerdictCounts


def _freeze_class_bytes(raw: Mapping[str, Mapping[str, int]]) -> Mapping[str, Mapping[str, int]]:
    def order(keys: Iterable[str], preferred: tuple[str, ...]) -> list[str]:
        known = [k for k in preferred if k in keys]
        return known + sorted(k for k in keys if k not in preferred)

    out: dict[str, Mapping[str, int]] = {}
    for cls in order(raw, CLASS_ORDER):
        inner = raw[cls]
        for prot, n in inner.items():
            if not isinstance(n, int) or isinstance(n, bool) or n < 0:
                raise ReportError(f"class_bytes[{cls!r}][{prot!r}] = {n!r} is not a byte count")
        out[cls] = MappingProxyType({p: inner[p] for p in order(inner, PROTECTION_ORDER)})
    return MappingProxyType(out)


def check_svg(title: str, svg: str) -> None:
    """Raise :class:`ReportError` unless ``svg`` is one inert inline ``<svg>`` element."""
    text = svg.strip()
    if not text.lower().startswith("<svg") or not text.lower().endswith("</svg>"):
        raise ReportError(f"chart {title!r} is not an inline <svg>…</svg> element")
    m = _SVG_FORBIDDEN.search(text)
    if m is not None:
        raise ReportError(f"chart {title!r} contains {m.group(0)!r}: charts may not script, link or fetch")


@dataclass(frozen=True)
class Assessment:
    """Everything a report shows. Build it once; every renderer reads the same object."""

    cluster: str
    policy_path: str
    policy_sha256: str
    generated: datetime  # timezone-aware
    controls: tuple[ControlResult, ...]
    version: str = __version__
    inputs: tuple[InputSummary, ...] = ()
    class_bytes: Mapping[str, Mapping[str, int]] = field(default_factory=dict)  # class → protection → bytes
    matrix: tuple[MatrixRow, ...] = ()
    evidence_store: str | None = None
    chain_head: ChainHead | None = None
    warnings: tuple[str, ...] = ()  # reader warnings, skipped inputs: shown prominently
    charts: tuple[tuple[str, str], ...] = ()  # (title, inline <svg>) for the HTML report, e.g. busbw / p99
    performance: tuple[LayerPerformance, ...] = ()  # the bench side: one per compared layer

    def __post_init__(self) -> None:
        if self.generated.tzinfo is None:
            raise ReportError("Assessment.generated must be timezone-aware")
        ids = [c.id for c in self.controls]
        if len(set(ids)) != len(ids):
            raise ReportError(f"duplicate control ids in assessment: {sorted(ids)}")
        for title, svg in self.charts:
            check_svg(title, svg)
        # Renderers iterate this; a fixed order and a read-only view make every report deterministic.
        object.__setattr__(self, "class_bytes", _freeze_class_bytes(self.class_bytes))

    @property
    def headline(self) -> tuple[Headline, str]:
        """Both questions in one verdict: done / compliance gap / training-speed regression / not proven."""
        return headline(self.controls, self.performance)

    @property
    def summary(self) -> Summary:
        """Verdict counts per control and per finding, computed from :attr:`controls`."""
        return Summary(
            controls=VerdictCounts.of(c.verdict for c in self.controls),
            findings=VerdictCounts.of(f.verdict for c in self.controls for f in c.findings),
        )


#: Exit codes of an assessment: every control pass/exempt; some fail; none fails but some are not proven.
EXIT_PASS, EXIT_FAIL, EXIT_NOT_PROVEN = 0, 1, 3


def exit_code(assessment: Assessment, *, allow_unknown: bool = False) -> int:
    """0 only if every control is pass or exempt; 1 if any control or finding fails (or a benchmarked
    layer is beyond its budget); 3 if none fails but some control is not proven, there is none, or a
    benchmarked layer is inconclusive — 0 then only with ``allow_unknown``."""
    s = assessment.summary
    speed = performance_side(assessment.performance) if assessment.performance else None
    if s.controls.failed or s.findings.failed or speed == "regression":
        return EXIT_FAIL
    unproven = s.controls.unknown or not assessment.controls or speed == "not proven"
    if unproven and not allow_unknown:
        return EXIT_NOT_PROVEN
    return EXIT_PASS


#: A renderer: the whole report as bytes.
Renderer = Callable[[Assessment], bytes]


def human_bytes(n: int) -> str:
    """``1.50 GB`` style (decimal units, as network people count)."""
    if n < 1000:
        return f"{n} B"
    value = n / 1000
    for unit in ("kB", "MB", "GB"):
        if value < 1000:
            return f"{value:.2f} {unit}"
        value /= 1000
    return f"{value:.2f} TB"


def clean_text(text: str) -> str:
    """Replace characters XML 1.0 cannot carry (C0 controls but tab/LF/CR, surrogates, U+FFFE/F)."""
    return _INVALID_XML.sub("\ufffd", text)


_INVALID_XML: Final = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")

__all__ = [
    "CLASS_ORDER",
    "EXIT_FAIL",
    "EXIT_NOT_PROVEN",
    "EXIT_PASS",
    "PROTECTION_ORDER",
    "VERDICT_ORDER",
    "Assessment",
    "InputSummary",
    "MatrixRow",
    "Renderer",
    "ReportError",
    "Summary",
    "VerdictCounts",
    "check_svg",
    "clean_text",
    "exit_code",
    "human_bytes",
]
