"""What apply asks change control: nothing where not required, an approved request or an emergency where it is."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from ringfence.change.decide import Refused
from ringfence.cli._apply_gate import change_gate
from ringfence.errors import InputError
from ringfence.evidence import EvidenceStore
from ringfence.policy import load_policy

POLICY = load_policy(Path(__file__).resolve().parents[2] / "examples" / "lab-policy.yaml")
REQUIRED = POLICY.model_copy(update={"change_control": POLICY.change_control.model_copy(update={"required": True})})


def _args(**kw: object) -> argparse.Namespace:
    base: dict[str, object] = {"request": None, "emergency": False, "by": None, "ticket": None}
    return argparse.Namespace(**{**base, **kw})


def test_not_required_keeps_todays_behaviour(tmp_path: Path) -> None:
    store = EvidenceStore.open(tmp_path / "ev", key=tmp_path / "k")
    assert change_gate(_args(), POLICY, store) is None


def test_required_refuses_a_deploy_without_an_approved_request(tmp_path: Path) -> None:
    store = EvidenceStore.open(tmp_path / "ev", key=tmp_path / "k")
    with pytest.raises(Refused, match="requires change control"):
        change_gate(_args(ticket="CHG-1"), REQUIRED, store)


def test_an_emergency_is_recorded_as_one_and_needs_who_and_why(tmp_path: Path) -> None:
    store = EvidenceStore.open(tmp_path / "ev", key=tmp_path / "k")
    assert change_gate(_args(emergency=True, by="oncall", ticket="INC-1"), REQUIRED, store) == {
        "emergency": True, "deployed_by": "oncall", "ticket": "INC-1"}
    with pytest.raises(InputError, match="needs --by"):
        change_gate(_args(emergency=True, ticket="INC-1"), REQUIRED, store)
    with pytest.raises(InputError, match="not both"):
        change_gate(_args(emergency=True, request="r.json", by="x", ticket="y"), REQUIRED, store)


def test_a_request_given_is_checked_even_where_not_required(tmp_path: Path) -> None:
    store = EvidenceStore.open(tmp_path / "ev", key=tmp_path / "k")
    bad = tmp_path / "req.json"
    bad.write_text("{}")
    with pytest.raises(InputError, match="req.json"):
        change_gate(_args(request=str(bad)), POLICY, store)
