"""Bounded JSON and YAML loading: every input costs time and memory proportional to its bytes.

The one place that turns untrusted JSON or YAML text into Python values. The stock loaders recurse
per nesting level (``RecursionError`` on 1,000 ``[``), expand YAML aliases without a bound (a
"billion laughs" file of a few hundred bytes becomes gigabytes), accept ``NaN`` and duplicate keys,
and raise bare ``ValueError``/``TypeError`` for impossible dates or 5,000-digit integers. Here each of
those is an :class:`~ringfence.errors.InputError` naming the source and the line (YAML) or the byte
offset and line (JSON), and the limits are explicit:

========================  ==========  ===================================================
limit                     default     why
========================  ==========  ===================================================
``max_bytes``             64 MiB      a policy or facts file is configuration, not data
``max_depth``             64          real documents nest < 10 deep; recursion stays bounded
``max_nodes`` (YAML)      2,000,000   counts alias expansions too: billion laughs is refused
``max_scalar`` (YAML)     1 MiB       one value; a key or address is a few dozen bytes
integer digits            4,300       Python's own int/str conversion limit
========================  ==========  ===================================================

YAML is read from the parser's event stream (libyaml when present), never through PyYAML's
recursive composer or constructor; the tree is built iteratively. Each mapping key must be a plain
scalar (``? [a, b]`` is refused), and every node's line is recorded so that a later validation
error can name the line the user has to fix.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from itertools import accumulate, repeat
from operator import sub
from pathlib import Path
from typing import Any, Final

import yaml

from ringfence.errors import InputError

MAX_BYTES: Final = 64 << 20
MAX_DEPTH: Final = 64
MAX_NODES: Final = 2_000_000
MAX_SCALAR: Final = 1 << 20

Loc = tuple[str | int, ...]

_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class BoundedInputError(InputError):
    """A JSON or YAML document that is malformed or exceeds a documented bound."""


# --------------------------------------------------------------------------------------------- JSON


def _bounded_text(data: bytes | str, source: str, max_bytes: int) -> str:
    """``data`` as text, refusing more than ``max_bytes`` and invalid UTF-8 (naming the line and offset)."""
    if len(data) > max_bytes:
        raise BoundedInputError(source, f"{len(data)} bytes is more than the limit of {max_bytes} bytes")
    if isinstance(data, str):
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise BoundedInputError(f"{source}:{line}@{exc.start}", "not UTF-8 text") from exc


def loads_json(
    data: bytes | str,
    source: str,
    *,
    max_bytes: int = MAX_BYTES,
    max_depth: int = MAX_DEPTH,
) -> Any:
    """Parse one JSON document; :class:`BoundedInputError` names ``source:line`` (and ``@offset``).

    ``NaN``/``Infinity`` and duplicate object keys are refused: both are ambiguous, and a verdict
    must not hinge on which of two values a parser kept.
    """
    text = _bounded_text(data, source, max_bytes)
    _check_json_depth(text, source, max_depth)
    try:
        return json.loads(text, parse_constant=_no_constant, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as exc:
        raise BoundedInputError(f"{source}:{exc.lineno}@{exc.pos}", f"not JSON: {exc.msg}") from exc
    except _JsonValueError as exc:
        raise BoundedInputError(source, str(exc)) from exc
    except ValueError as exc:  # an integer beyond Python's digit limit
        raise BoundedInputError(source, f"unusable JSON value: {_first_line(exc)}") from exc
    except RecursionError as exc:  # pragma: no cover - the depth check above runs first
        raise BoundedInputError(source, f"nested deeper than {max_depth} levels") from exc


class _JsonValueError(ValueError):
    """Raised by the hooks; carries a message for the user."""


def _no_constant(name: str) -> Any:
    raise _JsonValueError(f"{name} is not a JSON number (NaN and Infinity are refused)")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _JsonValueError(f"duplicate key {key[:80]!r} in one JSON object")
        out[key] = value
    return out


def _check_json_depth(text: str, source: str, max_depth: int) -> None:
    """Refuse nesting beyond ``max_depth`` before the recursive parser sees it (linear, in C).

    Brackets inside strings do not count. The common case never loops in Python: escapes and strings
    are cut out and everything but brackets deleted (``str.replace``/``split``, ``bytes.translate``),
    and the deepest point is the running sum of +1 per opener and -1 per closer (``accumulate``). A
    Python loop per bracket cost 3-7x the parse itself on a facts file (and far more instrumented, as
    when fuzzed). Only a document found too deep is scanned again, bracket by bracket, to name the
    offset of the first opener past the limit.
    """
    if "[" not in text and "{" not in text:
        return
    # Escapes first: `\\` then `\"` (left to right, as a lexer pairs a run of backslashes), so every
    # quote left delimits a string; the even pieces between quotes are outside strings.
    plain = text.replace("\\\\", "").replace('\\"', "")
    outside = "".join(plain.split('"')[::2]).encode("utf-8", "surrogatepass")  # any str, as given
    steps = outside.translate(_JSON_STEP, _JSON_NOT_BRACKET)  # opener 2, closer 0, the rest deleted
    if steps.count(2) <= max_depth:
        return
    if max(accumulate(map(sub, steps, repeat(1)))) <= max_depth:  # the running depth: step minus 1
        return
    _locate_json_depth(text, source, max_depth)
    # The two scans lex alike up to the first token that is not JSON; past it they may differ.
    raise BoundedInputError(source, f"JSON nested deeper than {max_depth} levels")


def _locate_json_depth(text: str, source: str, max_depth: int) -> None:
    """Raise naming ``line@offset`` of the first opener nested past ``max_depth`` (one visit per bracket)."""
    depth = 0
    in_string = False
    for m in _JSON_SPECIAL.finditer(text):
        ch = m.group()
        if ch[0] == "\\":
            continue  # an escape (only valid inside a string) never opens, closes or nests
        if ch == '"':
            in_string = not in_string
        elif in_string:
            continue
        elif ch in "[{":
            depth += 1
            if depth > max_depth:
                pos = m.start()
                line = text.count("\n", 0, pos) + 1
                raise BoundedInputError(f"{source}:{line}@{pos}", f"JSON nested deeper than {max_depth} levels")
        else:
            depth -= 1


_JSON_STEP: Final = bytes.maketrans(b"[{]}", b"\x02\x02\x00\x00")
_JSON_NOT_BRACKET: Final = bytes(sorted(set(range(256)) - set(b"[]{}")))
_JSON_SPECIAL: Final = re.compile(r'\\.|["\[\]{}]', re.DOTALL)


def read_bounded(path: Path, max_bytes: int = MAX_BYTES) -> bytes:
    """The bytes of ``path``, refusing a file larger than ``max_bytes`` before reading it all."""
    try:
        with path.open("rb") as fh:
            data = fh.read(max_bytes + 1)
    except OSError as exc:
        raise BoundedInputError(str(path), f"cannot read: {exc.strerror or exc}") from exc
    if len(data) > max_bytes:
        raise BoundedInputError(str(path), f"larger than the limit of {max_bytes} bytes")
    return data


# --------------------------------------------------------------------------------------------- YAML


@dataclass
class YamlDocument:
    """A loaded YAML document: its value, and the 1-based line of every node by location."""

    value: Any
    lines: dict[Loc, int] = field(default_factory=dict)

    def line_of(self, loc: Loc) -> int:
        """The line of the deepest prefix of ``loc`` that is in the document (1 when none)."""
        for n in range(len(loc), -1, -1):
            line = self.lines.get(loc[:n])
            if line is not None:
                return line
        return 1


@dataclass
class _Frame:
    """A mapping or sequence being built."""

    container: dict[Any, Any] | list[Any]
    loc: Loc
    anchor: str | None
    nodes_at_start: int
    is_map: bool
    key: Any = None
    has_key: bool = False
    pending_key_line: int = 0


_SENTINEL: Final = object()
_STR: Final = "tag:yaml.org,2002:str"


class _YamlBuilder:
    """Builds plain Python values (dict / tuple / scalars) from YAML events, iteratively."""

    def __init__(self, source: str, max_depth: int, max_nodes: int, max_scalar: int) -> None:
        self.source = source
        self.max_depth = max_depth
        self.max_nodes = max_nodes
        self.max_scalar = max_scalar
        self.nodes = 0
        self.stack: list[_Frame] = []
        self.anchors: dict[str, tuple[Any, int]] = {}  # anchor → (value, nodes it stands for)
        self.lines: dict[Loc, int] = {}
        self.root: Any = _SENTINEL
        self._constructor = yaml.SafeLoader("")  # one resolver/constructor for every scalar: cheap per node

    def close(self) -> None:
        self._constructor.dispose()

    def _where(self, line: int) -> str:
        return f"{self.source}:{line}"

    def _count(self, n: int, line: int) -> None:
        self.nodes += n
        if self.nodes > self.max_nodes:
            raise BoundedInputError(
                self._where(line),
                f"more than {self.max_nodes} YAML nodes (counting alias expansions): refused as an alias bomb "
                "or an oversized document",
            )

    def _child_loc(self) -> Loc:
        if not self.stack:
            return ()
        top = self.stack[-1]
        if top.is_map:
            return (*top.loc, str(top.key))
        return (*top.loc, len(top.container))

    def _add(self, value: Any, line: int, *, is_scalar: bool) -> None:
        """Place a finished value in its parent (as key or value) or make it the root."""
        if not self.stack:
            self.root = value
            return
        top = self.stack[-1]
        if top.is_map:
            if not top.has_key:
                if not is_scalar or isinstance(value, dict | tuple | list):
                    raise BoundedInputError(self._where(line), "a mapping key must be a plain scalar, not a collection")
                if not isinstance(value, str | int | float | bool) and value is not None:
                    raise BoundedInputError(
                        self._where(line), f"a mapping key must be text or a number, not {type(value).__name__}"
                    )
                assert isinstance(top.container, dict)
                if value in top.container:
                    raise BoundedInputError(self._where(line), f"duplicate key {str(value)[:80]!r}")
                top.key, top.has_key, top.pending_key_line = value, True, line
                self.lines[(*top.loc, str(value))] = line
                return
            assert isinstance(top.container, dict)
            top.container[top.key] = value
            top.has_key = False
            return
        assert isinstance(top.container, list)
        top.container.append(value)

    def event(self, ev: yaml.Event) -> None:
        """Take one parser event."""
        mark = ev.start_mark
        line = mark.line + 1 if mark is not None else 1
        if type(ev) is yaml.ScalarEvent:
            self._count(1, line)
            if len(ev.value) > self.max_scalar:
                raise BoundedInputError(self._where(line), f"a YAML value longer than {self.max_scalar} characters")
            # A scalar's line is recorded only as a key (in _add): a value sits on its key's line or
            # in a sequence whose line is known, and a tuple per value would double the cost per node.
            value = self._scalar(ev, line)
            if ev.anchor is not None:
                self.anchors[ev.anchor] = (value, 1)
            self._add(value, line, is_scalar=True)
        elif isinstance(ev, yaml.MappingStartEvent | yaml.SequenceStartEvent):
            self._count(1, line)
            if self.stack and self.stack[-1].is_map and not self.stack[-1].has_key:
                raise BoundedInputError(self._where(line), "a mapping key must be a plain scalar, not a collection")
            if len(self.stack) >= self.max_depth:
                raise BoundedInputError(self._where(line), f"YAML nested deeper than {self.max_depth} levels")
            loc = self._child_loc()
            self.lines.setdefault(loc, line)
            is_map = isinstance(ev, yaml.MappingStartEvent)
            tag = ev.tag
            if tag is not None and tag not in ("!", "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"):
                raise BoundedInputError(self._where(line), f"YAML tag {tag} is not allowed here")
            container: dict[Any, Any] | list[Any] = {} if is_map else []
            self.stack.append(_Frame(container, loc, ev.anchor, self.nodes, is_map))
        elif isinstance(ev, yaml.MappingEndEvent | yaml.SequenceEndEvent):
            frame = self.stack.pop()
            built: Any = frame.container if frame.is_map else tuple(frame.container)
            if frame.anchor is not None:
                self.anchors[frame.anchor] = (built, self.nodes - frame.nodes_at_start)
            self._add(built, line, is_scalar=False)
        elif isinstance(ev, yaml.AliasEvent):
            found = self.anchors.get(ev.anchor or "")
            if found is None:
                # An anchor still open on the stack is a self-reference: an infinite value.
                open_anchor = any(f.anchor == ev.anchor for f in self.stack)
                what = "refers to the node that contains it" if open_anchor else "names no earlier anchor"
                raise BoundedInputError(self._where(line), f"YAML alias *{ev.anchor} {what}")
            target, size = found
            # An alias costs what it expands to: that is what every consumer of the value will walk.
            self._count(size, line)
            self._add(target, line, is_scalar=not isinstance(target, dict | tuple))

    def _scalar(self, ev: yaml.ScalarEvent, line: int) -> Any:
        tag = ev.tag
        if tag is None and ev.style in ("'", '"'):
            return ev.value  # a quoted scalar without a tag is text: no resolver, no constructor
        if tag is None or tag == "!":
            tag = str(self._constructor.resolve(yaml.ScalarNode, ev.value, ev.implicit))  # type: ignore[no-untyped-call]
        if not tag.startswith("tag:yaml.org,2002:") or tag.endswith((":map", ":seq", ":omap", ":pairs", ":set")):
            raise BoundedInputError(self._where(line), f"YAML tag {tag} is not allowed here")
        if tag == _STR:
            return ev.value
        make = yaml.SafeLoader.yaml_constructors.get(tag)
        if make is None:
            raise BoundedInputError(self._where(line), f"YAML tag {tag} is not allowed here")
        node = yaml.ScalarNode(tag, ev.value, None, None, ev.style)
        try:
            # The constructor function itself, not construct_object: that one caches every node it saw.
            value = make(self._constructor, node)
        except (ValueError, TypeError, OverflowError, yaml.YAMLError) as exc:
            raise BoundedInputError(
                self._where(line), f"unusable value {ev.value[:60]!r}: {_first_line(exc)}"
            ) from exc
        if isinstance(value, float) and not math.isfinite(value):
            raise BoundedInputError(self._where(line), f"{ev.value[:60]!r} is not a finite number")
        return value


def load_yaml(
    data: str | bytes,
    source: str,
    *,
    max_bytes: int = MAX_BYTES,
    max_depth: int = MAX_DEPTH,
    max_nodes: int = MAX_NODES,
    max_scalar: int = MAX_SCALAR,
) -> YamlDocument:
    """Parse one YAML document (safe types only) within the bounds; :class:`BoundedInputError` otherwise.

    Sequences become tuples (the models are frozen). An empty document is an error: a file that says
    nothing must not be mistaken for one that says "no zones, no nodes".
    """
    text = _bounded_text(data, source, max_bytes)
    builder = _YamlBuilder(source, max_depth, max_nodes, max_scalar)
    documents = 0
    try:
        for ev in yaml.parse(text, Loader=_Loader):
            if isinstance(ev, yaml.DocumentStartEvent):
                documents += 1
                if documents > 1:
                    line = ev.start_mark.line + 1 if ev.start_mark is not None else 1
                    raise BoundedInputError(f"{source}:{line}", "more than one YAML document in the file")
            builder.event(ev)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 1
        raise BoundedInputError(f"{source}:{line}", f"not valid YAML: {getattr(exc, 'problem', None) or exc}") from exc
    finally:
        builder.close()
    if builder.root is _SENTINEL or builder.root is None:
        raise BoundedInputError(f"{source}:1", "the file is empty")
    return YamlDocument(builder.root, builder.lines)


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    text = lines[0] if lines else type(exc).__name__
    return text if len(text) <= 200 else text[:200] + "…"


__all__ = [
    "MAX_BYTES",
    "MAX_DEPTH",
    "MAX_NODES",
    "MAX_SCALAR",
    "BoundedInputError",
    "YamlDocument",
    "load_yaml",
    "loads_json",
    "read_bounded",
]
