"""Probe facts (``ringfence probe -o probes.json``): reachability probes of permitted and denied paths."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import AwareDatetime

from ringfence.controls.interface import ProbeResult
from ringfence.facts.interface import Loaded, Strict, parse

PROBES_FORMAT = "ringfence-probes/1"
HINT = "write it with: ringfence probe POLICY --target lab -o probes.json"


class ProbeModel(Strict):
    """One probe as written: the fields of :class:`~ringfence.controls.interface.ProbeResult`."""

    source: str
    destination: str
    proto: Literal["tcp", "udp"]
    port: int
    expected: Literal["allow", "deny"]
    outcome: Literal["connected", "timeout", "reset", "refused", "error", "unreachable"]
    by_policy: bool | None
    detail: str = ""
    evidence: list[str] = []
    rule: str | None = None

    def result(self) -> ProbeResult:
        """The probe as the controls read it."""
        return ProbeResult(self.source, self.destination, self.proto, self.port, self.expected, self.outcome,
                           self.by_policy, self.detail, tuple(self.evidence), self.rule)


class ProbesDoc(Strict):
    """The probes facts file."""

    format: Literal["ringfence-probes/1"]
    target: str
    taken: AwareDatetime
    evidence: str | None = None
    probes: list[ProbeModel]


def probe_to_json(result: ProbeResult) -> dict[str, Any]:
    """One probe result as a JSON-ready dict (the keys of :class:`ProbeResult`)."""
    data = dataclasses.asdict(result)
    data["evidence"] = list(result.evidence)
    return data


def probes_document(results: Sequence[ProbeResult], *, target: str, evidence: str | None = None,
                    taken: datetime | None = None) -> dict[str, Any]:
    """The probes facts file: ``{"format", "target", "taken", "evidence", "probes": [...]}``."""
    return {"format": PROBES_FORMAT, "target": target, "taken": (taken or datetime.now(UTC)).isoformat(),
            "evidence": evidence, "probes": [probe_to_json(r) for r in results]}


def load(path: str | Path, data: bytes | None = None) -> Loaded:
    """``Facts.probes`` (a tuple of :class:`ProbeResult`) and when they were taken;
    ``data``: the file's bytes, if already read."""
    doc = parse(path, ProbesDoc, "probes", HINT, fmt=PROBES_FORMAT, data=data)
    return Loaded("probes", str(path), tuple(p.result() for p in doc.probes), doc.taken)


def load_probe_facts(path: str | Path) -> tuple[ProbeResult, ...]:
    """``Facts.probes`` from a file written by ``ringfence probe -o``; :class:`FactsFileError` if unusable."""
    value: tuple[ProbeResult, ...] = load(path).value
    return value


__all__ = ["PROBES_FORMAT", "ProbeModel", "ProbesDoc", "load", "load_probe_facts", "probe_to_json", "probes_document"]
