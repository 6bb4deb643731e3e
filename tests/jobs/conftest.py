"""Fixtures of the job-identity tests: the shared recorded samples (read in place) and our lab recordings."""

from __future__ import annotations

from pathlib import Path

import pytest

SAMPLES = Path(__file__).resolve().parents[3] / "shared" / "samples"
ASSETS = Path(__file__).resolve().parents[1] / "assets" / "jobs"


@pytest.fixture(scope="session")
def samples() -> Path:
    """The shared samples directory (skips where this checkout has none beside it)."""
    if not SAMPLES.is_dir():
        pytest.skip(f"no shared samples at {SAMPLES}")
    return SAMPLES


@pytest.fixture(scope="session")
def assets() -> Path:
    """Slurm output recorded on the ringfence lab (tests/assets/jobs)."""
    return ASSETS
