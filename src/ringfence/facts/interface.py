"""The facts family: strict schemas for every kind of gathered fact, and the one boundary that reads them.

A facts file is JSON written by the verb that gathers it (``probe``, ``contain``, ``verify keys``,
``bench compare``). Each kind has one module with its pydantic schema (strict, frozen,
``extra="forbid"``, timezone-aware times) and a loader returning :class:`Loaded`: the value the
controls read and when it was gathered. This module is the boundary: unreadable files, bad JSON,
nesting too deep for any fact, and schema violations all become :class:`FactsFileError` naming
``file: field: problem`` (exit 2), never a traceback.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from ringfence.bounded import BoundedInputError, loads_json
from ringfence.errors import InputError

#: No facts document nests deeper than this; deeper input is refused before any parser recurses.
MAX_DEPTH = 64
#: Largest facts file read (a ruleset with thousands of drops is a few MB).
MAX_BYTES = 256 * 1024 * 1024


M = TypeVar("M", bound=BaseModel)


class FactsFileError(InputError):
    """A facts file that cannot be used: unreadable, not JSON, the wrong format, or a bad field."""


class Strict(BaseModel):
    """Base of every facts schema: strict types, frozen, unknown fields refused."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


@dataclass(frozen=True)
class Loaded:
    """A validated facts file: the value for :class:`~ringfence.controls.interface.Facts` and its time."""

    kind: str
    path: str
    value: Any
    taken: datetime | None  # when the facts were gathered (aware), None if the file does not say


def read_bytes(path: str | Path, what: str) -> bytes:
    """The file's bytes, or :class:`FactsFileError` (unreadable, too large)."""
    p = Path(path)
    try:
        size = p.stat().st_size
        if size > MAX_BYTES:
            raise FactsFileError(str(p), f"the {what} file is {size} bytes, over the facts limit of {MAX_BYTES}")
        return p.read_bytes()
    except OSError as exc:
        raise FactsFileError(str(p), f"cannot read the {what} file: {exc.strerror or exc}") from exc


def where(loc: tuple[int | str, ...], doc: Any = None) -> str:
    """``probes[3].outcome`` from a pydantic error location.

    pydantic also puts union members and discriminator tags into locations (``at.datetime``,
    ``inventory[0].certificate``); walking the document keeps only the keys and indexes the user wrote.
    """
    text, obj = "", doc
    for n, part in enumerate(loc):
        if isinstance(part, int):
            text += f"[{part}]"
            obj = obj[part] if isinstance(obj, list) and -len(obj) <= part < len(obj) else None
            continue
        if doc is not None and not (isinstance(obj, dict) and part in obj) and n != len(loc) - 1:
            continue  # not a key of the document here: a type tag
        if doc is not None and not isinstance(obj, dict) and n == len(loc) - 1 and text:
            continue  # the last part names the type that did not match, under a value that is no object
        text += f".{part}" if text else str(part)
        obj = obj.get(part) if isinstance(obj, dict) else None
    return text or "document"


def validation(path: str | Path, exc: ValidationError, doc: Any = None) -> FactsFileError:
    """``file: field: problem`` for the first schema violation (and how many more there are)."""
    errors = exc.errors(include_url=False)
    err = errors[0]
    more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
    value = err.get("input")
    shown = f" (got {value!r:.60})" if isinstance(value, str | int | float | bool) or value is None else ""
    return FactsFileError(f"{path}: {where(tuple(err['loc']), doc)}", f"{err['msg']}{shown}{more}")


def parse(path: str | Path, model: type[M], what: str, hint: str, *, fmt: str | None = None,
          data: bytes | None = None) -> M:
    """Read, depth-check and validate ``path`` as ``model`` (whose ``format`` tag must be ``fmt``, if given);
    every problem is a :class:`FactsFileError`."""
    raw = read_bytes(path, what) if data is None else data
    try:  # the one bounded JSON loader: depth, size, NaN, duplicate keys and digit limits, each named
        doc = loads_json(raw, str(path), max_depth=MAX_DEPTH)
    except BoundedInputError as exc:
        raise FactsFileError(exc.where, exc.message.removeprefix(f"{exc.where}: "), hint=hint) from exc
    if not isinstance(doc, dict):
        raise FactsFileError(str(path), f"expected one JSON object ({what})", hint=hint)
    if fmt is not None and doc.get("format") != fmt:
        raise FactsFileError(f"{path}: format", f"is {doc.get('format')!r}, expected {fmt!r}", hint=hint)
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        err = validation(path, exc, doc)
        err.hint = hint
        raise err from exc


Loader = Callable[[str | Path], Loaded]

__all__ = [
    "MAX_BYTES",
    "MAX_DEPTH",
    "FactsFileError",
    "Loaded",
    "Loader",
    "Strict",
    "parse",
    "read_bytes",
    "validation",
    "where",
]
