"""The JSON ``ringfence recommend --format json`` writes, read back strictly (for ``rollout plan --from-recommend``).

A rollout started from a recommendation takes its layer and nodes from the file, so the file is an input
like a facts file: every field checked, nothing unknown accepted, and a clear error naming the field when
it is not what ``recommend`` writes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ringfence.bounded import BoundedInputError, loads_json
from ringfence.errors import InputError

_Name = Annotated[str, Field(min_length=1, max_length=200)]
_Text = Annotated[str, Field(max_length=4000)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RecommendedCost(_Strict):
    """The expected cost of the recommended option."""

    busbw_loss_pct: tuple[float, float]
    latency_us: tuple[float, float] | None
    source: Literal["prior", "measured"]
    basis: _Text


class RecommendationRow(_Strict):
    """One class on one link, as ``Recommendation.to_dict`` writes it."""

    class_: Annotated[Literal["storage", "management", "replication", "collective"], Field(alias="class")]
    link: _Name
    nodes: Annotated[tuple[_Name, ...], Field(max_length=100_000)]
    recommended: _Name
    layer: _Name | None
    cost: RecommendedCost
    within_budget: bool | None
    why: Annotated[tuple[_Text, ...], Field(max_length=100)]
    considered: Annotated[tuple[_Text, ...], Field(max_length=100)]
    plan: Annotated[tuple[_Text, ...], Field(max_length=100)]


class RecommendationDoc(_Strict):
    """The whole document."""

    policy: _Text
    budget_busbw_loss_pct: float
    recommendations: Annotated[tuple[RecommendationRow, ...], Field(max_length=100_000)]


def load_recommendations(path: str | Path) -> RecommendationDoc:
    """The recommendation file at ``path``; :class:`InputError` naming the field when it is not one."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise InputError(str(p), f"cannot read the recommendation: {exc.strerror or exc}") from exc
    try:
        raw = loads_json(data, str(p))
    except BoundedInputError as exc:
        raise InputError(exc.where, exc.message.removeprefix(f"{exc.where}: ")) from exc
    try:
        return RecommendationDoc.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        where = ".".join(str(x) for x in err["loc"]) or "document"
        raise InputError(f"{p}: {where}", f"{err['msg']} (not what `ringfence recommend --format json` writes)") \
            from exc


def collective_choice(doc: RecommendationDoc, link: str | None, *, source: str) -> RecommendationRow:
    """The collective recommendation to roll out: the one of ``link``, or the only one."""
    rows = [r for r in doc.recommendations if r.class_ == "collective"]
    if link is not None:
        rows = [r for r in rows if r.link == link]
    if len(rows) != 1:
        links = ", ".join(r.link for r in doc.recommendations if r.class_ == "collective") or "none"
        what = f"no collective recommendation for link {link!r}" if link is not None and not rows else (
            f"{len(rows)} collective recommendations")
        raise InputError(source, f"{what}; choose one with --link (collective links: {links})")
    row = rows[0]
    if row.layer is None:
        raise InputError(source, f"the recommendation for {row.link} is {row.recommended!r}, no layer to roll out: "
                                 f"{row.why[-1] if row.why else 'see the file'}")
    if len(row.nodes) < 2:
        raise InputError(source, f"the recommendation for {row.link} names {len(row.nodes)} node(s); a canary "
                                 "needs a pair")
    return row


__all__ = ["RecommendationDoc", "RecommendationRow", "collective_choice", "load_recommendations"]
