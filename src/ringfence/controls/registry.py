"""The explicit registry of the ten control points, validated when it loads, and ``evaluate_all``.

Registration is this tuple — importing a control module registers nothing. Loading checks that each
module's ``meta.id`` equals its module name, that all ten ids are present exactly once, that the
acceptance and remediation (for every enforcement target) are filled in, and that the facts a
control declares are fields of :class:`~ringfence.controls.interface.Facts`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType, ModuleType

from ringfence.controls import (
    admin_paths,
    change_control,
    containment,
    egress,
    encryption_keys,
    storage_flows,
    telemetry,
    training_traffic,
    workload_identity,
    zones,
)
from ringfence.controls._common import CONTROL_IDS, cap_findings
from ringfence.controls.interface import ControlMeta, ControlResult, Facts, Finding, Side, aggregate
from ringfence.controls.requirements import enforce_requirements
from ringfence.errors import RingfenceError
from ringfence.policy import Policy

#: Enforcement targets every control must say how to remediate for.
TARGETS = ("nftables", "networkpolicy", "cilium", "process")

_MODULES: tuple[ModuleType, ...] = (
    zones,
    workload_identity,
    admin_paths,
    storage_flows,
    training_traffic,
    egress,
    encryption_keys,
    telemetry,
    change_control,
    containment,
)


class RegistryError(RingfenceError):
    """A control module that does not meet the control-point contract (a programming error)."""


@dataclass(frozen=True)
class Registered:
    """One control point: its metadata and its pure evaluation function."""

    meta: ControlMeta
    evaluate: Callable[[Policy, Facts], list[Finding]]


def validate(modules: tuple[ModuleType, ...]) -> Mapping[str, Registered]:
    """Check the contract of every module; return id → control in registry order."""
    fact_fields = {f.name for f in dataclasses.fields(Facts)}
    out: dict[str, Registered] = {}
    for module in modules:
        name = module.__name__.rsplit(".", 1)[-1]
        meta = getattr(module, "meta", None)
        fn = getattr(module, "evaluate", None)
        if not isinstance(meta, ControlMeta) or not callable(fn):
            raise RegistryError(f"control module {name} needs `meta: ControlMeta` and `evaluate(policy, facts)`")
        if meta.id != name:
            raise RegistryError(f"control module {name} declares id {meta.id!r}; the id must equal the module name")
        if meta.id in out:
            raise RegistryError(f"control {meta.id} is registered twice")
        for field_name in ("title", "objective", "acceptance"):
            if not getattr(meta, field_name).strip():
                raise RegistryError(f"control {meta.id} has an empty {field_name}")
        missing = [t for t in TARGETS if not meta.remediation.get(t, "").strip()]
        if missing:
            raise RegistryError(f"control {meta.id} lacks remediation for {', '.join(missing)}")
        unknown_facts = [f for f in meta.facts if f not in fact_fields]
        if unknown_facts or not meta.facts:
            raise RegistryError(f"control {meta.id} declares facts {unknown_facts or '(none)'} not in Facts")
        _check_requirements(meta)
        out[meta.id] = Registered(meta, fn)
    if tuple(out) != CONTROL_IDS:
        raise RegistryError(f"the registry must hold exactly {', '.join(CONTROL_IDS)} in order; has {', '.join(out)}")
    return MappingProxyType(out)


def _check_requirements(meta: ControlMeta) -> None:
    sides = {r.side for r in meta.requirements}
    if sides != set(Side):
        raise RegistryError(f"control {meta.id} must declare requirements for both the permitted and the denied side")
    ids = [r.id for r in meta.requirements]
    if len(set(ids)) != len(ids):
        raise RegistryError(f"control {meta.id} declares a requirement id twice: {sorted(ids)}")
    for r in meta.requirements:
        stray = [f for f in r.facts if f not in meta.facts]
        if stray:
            raise RegistryError(f"control {meta.id} requirement {r.id} needs facts {stray} the control does not read")
        if not r.text.strip() or not r.gather.startswith("ringfence "):
            raise RegistryError(f"control {meta.id} requirement {r.id} needs a text and a `ringfence …` gather command")


#: id → control, in report order; validated at import.
REGISTRY: Mapping[str, Registered] = validate(_MODULES)


def evaluate_all(policy: Policy, facts: Facts) -> list[ControlResult]:
    """Evaluate the ten controls; each result carries its owner from ``policy.controls``."""
    results = []
    for cid, control in REGISTRY.items():
        findings = cap_findings(cid, enforce_requirements(control.meta, policy, facts, control.evaluate(policy, facts)))
        owner = policy.controls.get(cid)
        results.append(
            ControlResult(
                id=cid,
                title=control.meta.title,
                verdict=aggregate(findings),
                findings=tuple(findings),
                owner=owner.owner if owner else "",
            )
        )
    return results


__all__ = ["REGISTRY", "TARGETS", "Registered", "RegistryError", "evaluate_all", "validate"]
