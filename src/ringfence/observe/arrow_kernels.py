"""Arrow compute kernels without ``import pyarrow.compute`` on the capture path.

``import pyarrow.compute`` builds a Python wrapper, with its docstring, for every compute function:
~30 ms here, a tenth of the whole ``ringfence flows`` command on a 1 GB capture. The capture path needs
one kernel (the hash grouping of flow keys), so it calls it through ``call_function`` of the compiled
``pyarrow._compute``, which loads in ~5 ms. Readers of text logs use dozens of kernels and take
:data:`pc`, which imports ``pyarrow.compute`` on first use.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

import pyarrow as pa

try:  # the compiled core of pyarrow.compute, present in every pyarrow release we support (>= 15)
    from pyarrow._compute import call_function as _call_function
except ImportError:  # pragma: no cover - a future layout: the public module has the same function
    from pyarrow.compute import call_function as _call_function


def dictionary_encode(values: pa.Array | pa.ChunkedArray) -> Any:
    """``pyarrow.compute.dictionary_encode``: distinct values (in order of first appearance) and their indices."""
    return _call_function("dictionary_encode", [values])


class _LazyModule(ModuleType):
    """A module that is imported when one of its attributes is first read."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self._module: ModuleType | None = None

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):  # copy, pickle and introspection probe dunders: no import for them
            raise AttributeError(attr)
        if self._module is None:
            self._module = importlib.import_module(self.__name__)
        return getattr(self._module, attr)


#: ``pyarrow.compute``, imported on first use (a reader that never runs never pays for it).
pc: Any = _LazyModule("pyarrow.compute")
