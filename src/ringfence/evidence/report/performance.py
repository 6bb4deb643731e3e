"""The performance side of a report, and the headline that joins it with the security side.

``Facts.bench`` (``assess --bench``: the budget gate's comparisons, one per layer) becomes one
:class:`LayerPerformance` per layer — bus bandwidth and p99 against the unencrypted baseline and the
budget fixed before enabling. :func:`headline` answers both questions at once, as the procedure
asks: *done* only when every control is proven and every layer is inside its budget.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ringfence.controls.interface import ControlResult, Verdict


class Headline(StrEnum):
    """The one-line answer to both questions."""

    DONE = "done"
    COMPLIANCE_GAP = "compliance gap"
    REGRESSION = "training-speed regression"
    NOT_PROVEN = "not proven"


@dataclass(frozen=True)
class SizePerformance:
    """One message size: the medians, the change and the limit for busbw and p99."""

    size: int
    verdict: str  # pass | fail | inconclusive
    busbw_baseline: float | None  # GB/s
    busbw_candidate: float | None
    busbw_loss_pct: float | None
    busbw_limit_pct: float
    p99_baseline: float | None  # µs
    p99_candidate: float | None
    p99_growth_pct: float | None
    p99_limit_pct: float


@dataclass(frozen=True)
class LayerPerformance:
    """One compared layer (the candidate arm) against its baseline."""

    layer: str
    baseline: str
    verdict: str  # pass | fail | inconclusive
    reasons: tuple[str, ...]
    sizes: tuple[SizePerformance, ...]
    evidence: tuple[str, ...] = ()


def _estimate(metric: Mapping[str, Any]) -> float | None:
    change = metric.get("change_pct")
    value = change.get("estimate") if isinstance(change, Mapping) else None
    return float(value) if isinstance(value, int | float) else None


def _num(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def layers(bench: Mapping[str, Any] | None, evidence: Sequence[str] = ()) -> tuple[LayerPerformance, ...]:
    """The per-layer performance rows of validated bench facts (``{"comparisons": [...]}``)."""
    if bench is None:
        return ()
    out = []
    for c in bench.get("comparisons", ()):
        sizes = tuple(
            SizePerformance(
                size=int(s["size"]), verdict=str(s["verdict"]),
                busbw_baseline=_num(s["busbw"].get("baseline")), busbw_candidate=_num(s["busbw"].get("candidate")),
                busbw_loss_pct=_estimate(s["busbw"]), busbw_limit_pct=float(s["busbw"]["limit_pct"]),
                p99_baseline=_num(s["p99"].get("baseline")), p99_candidate=_num(s["p99"].get("candidate")),
                p99_growth_pct=_estimate(s["p99"]), p99_limit_pct=float(s["p99"]["limit_pct"]),
            )
            for s in c.get("sizes", ())
        )
        out.append(LayerPerformance(layer=str(c["candidate"]["label"]), baseline=str(c["baseline"]["label"]),
                                    verdict=str(c["verdict"]), reasons=tuple(str(r) for r in c.get("reasons", ())),
                                    sizes=sizes, evidence=tuple(evidence)))
    return tuple(out)


def security_side(controls: Iterable[ControlResult]) -> str:
    """``proven`` (every control pass/exempt), ``gap`` (some fail) or ``not proven``."""
    verdicts = [c.verdict for c in controls]
    if Verdict.FAIL in verdicts:
        return "gap"
    return "not proven" if not verdicts or Verdict.UNKNOWN in verdicts else "proven"


def performance_side(perf: Sequence[LayerPerformance]) -> str:
    """``within budget`` (every layer passes the gate), ``regression`` (one fails) or ``not proven``
    (none measured, or inconclusive: the noise is wider than the budget)."""
    verdicts = {p.verdict for p in perf}
    if "fail" in verdicts:
        return "regression"
    return "within budget" if perf and verdicts == {"pass"} else "not proven"


def headline(controls: Sequence[ControlResult], perf: Sequence[LayerPerformance]) -> tuple[Headline, str]:
    """The headline and its explanation in words, naming both sides."""
    sec, speed = security_side(controls), performance_side(perf)
    text = f"security: {sec}; performance: {speed if perf else 'not measured (pass --bench)'}"
    if sec == "gap":
        return Headline.COMPLIANCE_GAP, text
    if speed == "regression":
        return Headline.REGRESSION, text
    if sec == "proven" and speed == "within budget":
        return Headline.DONE, text
    return Headline.NOT_PROVEN, text


__all__ = ["Headline", "LayerPerformance", "SizePerformance", "headline", "layers", "performance_side",
           "security_side"]
