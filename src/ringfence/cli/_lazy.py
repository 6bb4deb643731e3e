"""Argument values checked against a registry the parser must not import while it is built.

The parser is built on every start (``ringfence --version`` included); the registries behind some
arguments (report renderers, enforcement targets, key algorithms) pull in pydantic, pyarrow or
cryptography. argparse's ``choices=`` would have to hold the names at build time (and ``--help``
iterates them), so :class:`OneOf` is a ``type=`` instead: it reads the registry only when a value is
converted — that is, when the verb is about to run — and rejects an unknown name with the full list.
"""

from __future__ import annotations

import argparse
import importlib


class OneOf:
    """``type=`` for argparse: the value must be a name in ``attribute`` of ``module`` (read on first use).

    ``attribute`` may be a mapping (its keys) or any iterable of names; ``exclude`` drops names that
    are not valid on the command line (e.g. the terminal renderer, which is always on).
    """

    def __init__(self, module: str, attribute: str, *, exclude: frozenset[str] = frozenset()) -> None:
        self._module = module
        self._attribute = attribute
        self._exclude = exclude
        self._names: tuple[str, ...] | None = None
        # argparse names the type in its "invalid VALUE value" message; keep that message useful.
        self.__name__ = attribute.lower()

    def names(self) -> tuple[str, ...]:
        """The valid names, sorted (imports the registry's module)."""
        if self._names is None:
            source = getattr(importlib.import_module(self._module), self._attribute)
            self._names = tuple(sorted(str(n) for n in source if str(n) not in self._exclude))
        return self._names

    def __call__(self, value: str) -> str:
        names = self.names()
        if value not in names:
            raise argparse.ArgumentTypeError(f"invalid choice: {value!r} (choose from {', '.join(names)})")
        return value


__all__ = ["OneOf"]
