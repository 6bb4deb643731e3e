"""The canary rollout: five recorded steps from TLS to fleet-wide collective encryption, gated by the benchmark.

See :mod:`ringfence.rollout.machine` for the procedure and ``docs/rollout.md`` for its use.
"""

from ringfence.rollout.interface import (
    ArmSettings,
    Benchmarker,
    CollectiveLayer,
    EvidenceSink,
    Outcome,
    RolloutError,
    RolloutRefused,
    StepAction,
)
from ringfence.rollout.layers import LAYERS, AllReduceBenchmarker, NoopLayer, load_layer
from ringfence.rollout.machine import Rollout, StepTools
from ringfence.rollout.state import STEP_TITLES, RolloutState, StepRecord, StepStatus, load_state

__all__ = [
    "LAYERS",
    "STEP_TITLES",
    "AllReduceBenchmarker",
    "ArmSettings",
    "Benchmarker",
    "CollectiveLayer",
    "EvidenceSink",
    "NoopLayer",
    "Outcome",
    "Rollout",
    "RolloutError",
    "RolloutRefused",
    "RolloutState",
    "StepAction",
    "StepRecord",
    "StepStatus",
    "StepTools",
    "load_layer",
    "load_state",
]
