"""The rollout's actions bound to a lab: the zero-argument factories ``rollout advance`` loads.

The actions themselves are executor-generic (:mod:`ringfence.rollout.site_actions`); this module only
says which cluster they act on — the lab given, else the one named by ``$RINGFENCE_LAB``, else the
only running lab, found when a step first runs (so a refused step never touches a lab).

* ``--actions ringfence.lab.rollout:lab_actions`` — steps 1 and 2;
* ``LAYERS["wireguard"]`` — :class:`WireguardLabLayer`, steps 3 and 5;
* :class:`LabBenchmarker` — the benchmark on the lab's nodes, with the lab's own job paused.
"""

from __future__ import annotations

import os
from pathlib import Path

from ringfence.bench.driver import BenchSpec
from ringfence.evidence import EvidenceStore
from ringfence.lab.lab import Lab
from ringfence.rollout.site_actions import Benchmarker, ClusterRef, StepActions, WireguardLayer, step_actions


def lab_ref(lab: Lab | None = None, name: str | None = None) -> ClusterRef:
    """``lab``, or the lab found on first use: by ``name``, else ``$RINGFENCE_LAB``, else the only one running."""
    chosen = name or os.environ.get("RINGFENCE_LAB") or None
    return ClusterRef(lab, resolve=lambda: Lab.attach(chosen))


def lab_actions(lab: Lab | None = None, *, evidence: EvidenceStore | None = None,
                workdir: Path | None = None) -> StepActions:
    """Steps 1–2 on ``lab`` (default: found when a step runs)."""
    return step_actions(lab_ref(lab), evidence=evidence, workdir=workdir)


class WireguardLabLayer(WireguardLayer):
    """The ``wireguard`` collective layer on a lab (with no arguments: the lab found on first use)."""

    def __init__(self, lab: Lab | None = None, *, evidence: EvidenceStore | None = None, verify_s: float = 3.0,
                 workdir: Path | None = None) -> None:
        super().__init__(lab_ref(lab), evidence=evidence, verify_s=verify_s, workdir=workdir)


class LabBenchmarker(Benchmarker):
    """The all-reduce benchmark on the lab's nodes (the lab's own traffic paused while measuring)."""

    def __init__(self, spec: BenchSpec, lab: Lab | None = None, *, quiet: bool = True,
                 traffic_timeout_s: float = 90.0) -> None:
        super().__init__(spec, lab_ref(lab), quiet=quiet, traffic_timeout_s=traffic_timeout_s)


__all__ = ["LabBenchmarker", "WireguardLabLayer", "lab_actions", "lab_ref"]
