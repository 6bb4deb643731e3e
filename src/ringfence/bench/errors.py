"""The benchmark's error (its own module so the driver and the launchers share it without a cycle)."""

from __future__ import annotations

from ringfence.errors import RingfenceError

__all__ = ["BenchError"]


class BenchError(RingfenceError):
    """The benchmark could not run to completion (a rank failed, timed out, or spoke nonsense)."""
