"""Live ruleset facts (``ringfence probe --ruleset ruleset.json``): what each enforcement point enforces."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import AwareDatetime

from ringfence.facts.interface import Loaded, Strict, parse

RULESET_FORMAT = "ringfence-ruleset/1"
HINT = "write it with: ringfence probe POLICY --target lab -o probes.json --ruleset ruleset.json"


class PointModel(Strict):
    """One enforcement point's live rules, summarised against the approved matrix."""

    present: bool
    audit: bool
    rules: int
    flows: list[str]
    expected_flows: list[str]
    missing_flows: list[str]
    extra_flows: list[str]
    accepted_packets: dict[str, int]
    drop_packets: int
    drop_bytes: int
    contained: list[str]
    collectors: list[str]
    enforced: bool | None = None
    bridge: PointModel | None = None


class EgressModel(Strict):
    """One sampled connection leaving for an external-trust zone."""

    source: str
    source_node: str | None
    identity: str | None
    destination: str
    destination_node: str | None
    proto: str
    port: int
    packets: int
    bytes: int
    decision: Literal["accept", "drop"]
    flow: str | None


class DeniedModel(Strict):
    """Drops counted per (source, destination, proto, port), and where."""

    source: str
    destination: str
    proto: str
    port: int
    packets: int
    bytes: int
    where: list[str]


class RulesetDoc(Strict):
    """The ruleset facts file."""

    format: Literal["ringfence-ruleset/1"]
    target: str
    cluster: str
    taken: AwareDatetime
    points: dict[str, PointModel]
    egress: list[EgressModel]
    denied: list[DeniedModel]
    version: int | str | None = None
    raw_evidence: str | None = None


def load(path: str | Path, data: bytes | None = None) -> Loaded:
    """``Facts.ruleset`` (the validated document as plain JSON values) and when it was taken;
    ``data``: the file's bytes, if already read."""
    doc = parse(path, RulesetDoc, "ruleset", HINT, fmt=RULESET_FORMAT, data=data)
    value: dict[str, Any] = doc.model_dump(mode="json", exclude_none=False)
    return Loaded("ruleset", str(path), value, doc.taken)


def load_ruleset_facts(path: str | Path) -> dict[str, Any]:
    """``Facts.ruleset`` from a file written by ``ringfence probe --ruleset``."""
    value: dict[str, Any] = load(path).value
    return value


__all__ = ["RULESET_FORMAT", "DeniedModel", "EgressModel", "PointModel", "RulesetDoc", "load", "load_ruleset_facts"]
