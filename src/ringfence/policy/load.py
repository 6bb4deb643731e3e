"""Load a policy file: YAML → strict models, with errors as ``file:line: field: what is wrong``.

The only module that knows the file format. It keeps each YAML node's line so that a pydantic error
location (``nodes.3.addresses.0``) can be turned back into the line the user has to fix.
"""

from __future__ import annotations

import json
from datetime import date, datetime
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ringfence.errors import InputError
from ringfence.policy.model import Policy
from ringfence.policy.refs import check_references


class PolicyError(InputError):
    """A policy file that cannot be used; ``where`` is ``file:line``."""


def _construct(node: yaml.Node, lines: dict[tuple[str | int, ...], int], path: tuple[str | int, ...]) -> Any:
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for knode, vnode in node.value:
            key = _scalar(knode)
            if key in out:
                raise PolicyError(f"line {knode.start_mark.line + 1}", f"duplicate key {key!r}")
            lines[(*path, str(key))] = knode.start_mark.line + 1
            out[key] = _construct(vnode, lines, (*path, str(key)))
        return out
    if isinstance(node, yaml.SequenceNode):
        # Sequences become tuples: the models are frozen and strict.
        return tuple(_construct(v, lines, (*path, i)) for i, v in enumerate(node.value))
    return _scalar(node)


def _scalar(node: yaml.Node) -> Any:
    loader = yaml.SafeLoader("")
    try:
        return loader.construct_object(node, deep=True)
    finally:
        loader.dispose()


def _json_default(value: object) -> str:
    if isinstance(value, date | datetime):
        return value.isoformat()
    raise TypeError(f"a YAML value of type {type(value).__name__} has no meaning in a policy")


def _line_of(lines: dict[tuple[str | int, ...], int], loc: tuple[str | int, ...]) -> int:
    # The deepest prefix of the error location that we saw in the file.
    for n in range(len(loc), -1, -1):
        if loc[:n] in lines:
            return lines[loc[:n]]
    return 1


def parse_policy(text: str, source: str = "<policy>") -> Policy:
    """Parse policy text. Raises :class:`PolicyError` naming ``source:line: field: problem``."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 1
        raise PolicyError(f"{source}:{line}", f"not valid YAML: {getattr(exc, 'problem', exc)}") from exc
    if root is None:
        raise PolicyError(f"{source}:1", "the policy file is empty")
    lines: dict[tuple[str | int, ...], int] = {}
    try:
        data = _construct(root, lines, ())
    except PolicyError as exc:
        raise PolicyError(f"{source}:{exc.where.removeprefix('line ')}", exc.message.split(": ", 1)[-1]) from exc
    except yaml.YAMLError as exc:
        raise PolicyError(f"{source}:1", f"not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise PolicyError(f"{source}:1", "the policy must be a mapping (zones:, nodes:, …)")
    try:
        # Validate in JSON mode: strict there still accepts strings for enums and dates and arrays for
        # tuples, which is exactly what a YAML file can say; Python-mode strict would demand objects.
        policy = Policy.model_validate_json(json.dumps(data, default=_json_default))
    except TypeError as exc:
        raise PolicyError(f"{source}:1", str(exc)) from exc
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = tuple(err["loc"])
            field = ".".join(str(p) for p in loc) or "(top level)"
            problems.append((_line_of(lines, loc), field, err["msg"]))
        problems.sort()
        line, field, msg = problems[0]
        more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
        raise PolicyError(
            f"{source}:{line}", f"{field}: {msg}{more}", hint="see `ringfence policy schema` for the format"
        ) from exc
    ref_problems = check_references(policy)
    if ref_problems:
        loc, msg = ref_problems[0]
        field = ".".join(str(p) for p in loc)
        more = f" (and {len(ref_problems) - 1} more problem(s))" if len(ref_problems) > 1 else ""
        raise PolicyError(f"{source}:{_line_of(lines, loc)}", f"{field}: {msg}{more}")
    return policy


def load_policy(path: str | Path) -> Policy:
    """Load and validate a policy file. Raises :class:`PolicyError` (exit 2 in the CLI)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise PolicyError(str(p), f"cannot read the policy: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise PolicyError(f"{p}@{exc.start}", "the policy is not UTF-8 text") from exc
    return parse_policy(text, str(p))


def policy_schema() -> str:
    """The JSON Schema of the policy file format, as pretty JSON text."""
    return json.dumps(Policy.model_json_schema(by_alias=True), indent=2, sort_keys=True)


__all__ = ["PolicyError", "load_policy", "parse_policy", "policy_schema"]
