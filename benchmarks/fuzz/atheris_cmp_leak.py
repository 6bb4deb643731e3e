"""Reproducer: atheris's instrumented ``==`` keeps a reference to a comparison result that is not a bool.

Why the fuzz campaign's process grew (netflow-v9 115 → 634 MB over 10^6 inputs, zeek-json 1.27 GB at
329k) while the same readers stay flat in a plain interpreter: atheris (3.0.0 here) rewrites every
comparison in instrumented code into a call of its comparison hook, and for a rich comparison whose result
is an object — a numpy array from ``array == 7``, a pyarrow expression — one reference to that result is
never released. The array is not a gc container, so ``gc.get_objects()`` stays flat and only RSS shows
it, in proportion to the input's size. ``np.equal(a, 7)`` (a call, not an operator) does not leak; nor does
the same reader uninstrumented, on the corpus the instrumented run evolved.

Run: ``python benchmarks/fuzz/atheris_cmp_leak.py CORPUS_DIR -runs=10`` (any empty directory); it prints
whether each function's comparison result is still alive after the function returned, and exits 0.
"""

from __future__ import annotations

import os
import sys
import weakref
from typing import Any

import atheris
import numpy as np


@atheris.instrument_func
def _instrumented(a: Any) -> weakref.ref[Any]:
    m = a == 7
    return weakref.ref(m)


def _plain(a: Any) -> weakref.ref[Any]:
    m = a == 7
    return weakref.ref(m)


def _one(_data: bytes) -> None:
    a = np.arange(10, dtype=np.uint8)
    leaked, freed = _instrumented(a)(), _plain(a)()
    print(f"atheris-instrumented `a == 7`: result alive after return: {leaked is not None}")
    print(f"plain `a == 7`: result alive after return: {freed is not None}", flush=True)
    os._exit(0)  # libFuzzer's exit would skip the prints' flush


if __name__ == "__main__":
    atheris.Setup(sys.argv, _one)
    atheris.Fuzz()
