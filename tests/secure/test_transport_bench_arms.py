"""The A/B arms of ``benchmarks/bench_transport.py``: ``--rf-env`` parsing and the ABBA order."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

# benchmarks/ is not a package: load the script as a module (by name, so mypy need not find it)
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
_bench = importlib.import_module("bench_transport")
arm_order, parse_rf_env = _bench.arm_order, _bench.parse_rf_env


def test_no_rf_env_is_the_one_plain_arm() -> None:
    assert parse_rf_env(None) == [("ringfence", {})]
    assert parse_rf_env([]) == [("ringfence", {})]


def test_rf_env_names_get_the_prefix_and_keep_their_label() -> None:
    arms = parse_rf_env(["SWITCH_INTERVAL=0.0002", "RINGFENCE_TRANSPORT_SWITCH_INTERVAL=0,CHUNK_BYTES=4194304"])
    assert arms == [
        ("ringfence SWITCH_INTERVAL=0.0002", {"RINGFENCE_TRANSPORT_SWITCH_INTERVAL": "0.0002"}),
        (
            "ringfence RINGFENCE_TRANSPORT_SWITCH_INTERVAL=0,CHUNK_BYTES=4194304",
            {"RINGFENCE_TRANSPORT_SWITCH_INTERVAL": "0", "RINGFENCE_TRANSPORT_CHUNK_BYTES": "4194304"},
        ),
    ]


@pytest.mark.parametrize("bad", ["SWITCH_INTERVAL", "=0", "SWITCH_INTERVAL=", "switch_interval=0", "A-B=1"])
def test_malformed_rf_env_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="--rf-env"):
        parse_rf_env([bad])


def test_the_same_arm_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="twice"):
        parse_rf_env(["SWITCH_INTERVAL=0", "SWITCH_INTERVAL=0"])


def test_ringfence_arms_swap_order_every_repeat_gloo_first_wireguard_last() -> None:
    assert arm_order(["a", "b"], False, 0) == ["gloo", "a", "b"]
    assert arm_order(["a", "b"], False, 1) == ["gloo", "b", "a"]
    assert arm_order(["a", "b"], True, 2) == ["gloo", "a", "b", "wireguard"]
    assert arm_order(["ringfence"], True, 1) == ["gloo", "ringfence", "wireguard"]
