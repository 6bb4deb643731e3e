"""Every parser survives mutated real inputs: a result or a clear error, never a crash or a hang.

A small fixed budget per target runs in every ``make test``, each input through a file and the whole
public reader; ``make fuzz`` is the long coverage-guided campaign (test_fuzz_campaign.py, BENCHMARKS.md).
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from fuzz_kit import mutate, run_one, targets
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

TARGETS = targets()
#: Crashes found by the fuzzer in code this suite does not own, reported to its owner (see the
#: BENCHMARKS.md fuzz section): tolerated here by exact signature only, so any *other* crash of the
#: same target still fails. Remove an entry when its fix lands.
KNOWN: dict[str, tuple[str, ...]] = {}
#: Inputs per target in CI: 15 targets x 60 inputs stays well under a minute on 2 cores.
CI_EXAMPLES = 60


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_target_has_a_seed_corpus_and_reads_it(name: str, tmp_path: Path) -> None:
    target = TARGETS[name]
    assert target.seeds, f"no seed corpus for {name}: is ../shared present?"
    outcomes = [run_one(target, seed, tmp_path) for seed in target.seeds[:5]]
    assert all(o.kind == "ok" for o in outcomes), [o.detail for o in outcomes if o.kind != "ok"]


@pytest.mark.parametrize("name", sorted(TARGETS))
@settings(max_examples=CI_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), pick=st.integers(0, 10_000))
def test_mutated_inputs_never_crash_or_hang(name: str, seed: int, pick: int, tmp_path: Path) -> None:
    target = TARGETS[name]
    rng = random.Random(seed)
    data = mutate(rng, target.seeds[pick % len(target.seeds)], target.seeds)
    outcome = run_one(target, data, tmp_path)
    if outcome.kind == "crash" and outcome.detail.startswith(KNOWN.get(name, ("\0",))):
        return
    assert outcome.kind == "ok", f"{name}: {outcome.kind}: {outcome.detail} (seed {seed}, pick {pick})"
