"""Fixtures of the inventory tests: the real recorded samples in ../shared/samples, read in place."""

from __future__ import annotations

from pathlib import Path

import pytest

SAMPLES = Path(__file__).resolve().parents[3] / "shared" / "samples"


@pytest.fixture(scope="session")
def samples() -> Path:
    """The shared samples directory (skips where this checkout has none beside it)."""
    if not SAMPLES.is_dir():
        pytest.skip(f"no shared samples at {SAMPLES}")
    return SAMPLES
