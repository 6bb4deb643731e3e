"""The registry: ten ids equal to module names, metadata complete, validation bites; the docs match."""

from __future__ import annotations

import dataclasses
import types
from pathlib import Path

import pytest

from ringfence.controls import zones
from ringfence.controls.docs import markdown
from ringfence.controls.registry import _MODULES, REGISTRY, TARGETS, RegistryError, validate

IDS = (
    "zones",
    "workload_identity",
    "admin_paths",
    "storage_flows",
    "training_traffic",
    "egress",
    "encryption_keys",
    "telemetry",
    "change_control",
    "containment",
)


def test_ten_controls_in_order() -> None:
    assert tuple(REGISTRY) == IDS
    for cid, control in REGISTRY.items():
        assert control.meta.id == cid
        assert set(TARGETS) <= set(control.meta.remediation)


def _fake(name: str, **meta_changes: object) -> types.ModuleType:
    mod = types.ModuleType(f"ringfence.controls.{name}")
    mod.meta = dataclasses.replace(zones.meta, **meta_changes)  # type: ignore[attr-defined]
    mod.evaluate = zones.evaluate  # type: ignore[attr-defined]
    return mod


def test_validation_rejects_broken_modules() -> None:
    with pytest.raises(RegistryError, match="must equal the module name"):
        validate((_fake("zonez"),))
    with pytest.raises(RegistryError, match="lacks remediation for cilium"):
        validate((_fake("zones", remediation={t: "x" for t in TARGETS if t != "cilium"}),))
    with pytest.raises(RegistryError, match="not in Facts"):
        validate((_fake("zones", facts=("flowz",)),))
    with pytest.raises(RegistryError, match="exactly"):
        validate(_MODULES[:-1])
    with pytest.raises(RegistryError, match="twice"):
        validate((*_MODULES, zones))


def test_docs_list_all_ten_and_are_current() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "controls.md").read_text(encoding="utf-8")
    for cid in IDS:
        assert f"## `{cid}`" in doc
    assert doc == markdown(), "regenerate: python -m ringfence.controls.docs > docs/controls.md"
