"""Load a policy file: YAML → strict models, with errors as ``file:line: field: what is wrong``.

The only module that knows the file format. It keeps each YAML node's line so that a pydantic error
location (``nodes.3.addresses.0``) can be turned back into the line the user has to fix.
"""

from __future__ import annotations

import json
from datetime import date, datetime
from pathlib import Path
from typing import Final

from pydantic import ValidationError

from ringfence.bounded import BoundedInputError, load_yaml, read_bounded
from ringfence.errors import InputError
from ringfence.policy.model import Policy
from ringfence.policy.refs import check_references

#: The largest policy file accepted. A 100,000-node inventory is about 12 MB (~1 s per MB to load
#: on 2 cores); beyond this a typo'd path (a capture, a log) is likelier than a real policy.
MAX_POLICY_BYTES: Final = 16 << 20
#: YAML nodes (alias expansions included) a policy may have: ~8 per inventory node, with headroom.
MAX_POLICY_NODES: Final = 2_000_000


class PolicyError(InputError):
    """A policy file that cannot be used; ``where`` is ``file:line``."""


def _json_default(value: object) -> str:
    if isinstance(value, date | datetime):
        return value.isoformat()
    raise TypeError(f"a YAML value of type {type(value).__name__} has no meaning in a policy")


def parse_policy(text: str, source: str = "<policy>") -> Policy:
    """Parse policy text. Raises :class:`PolicyError` naming ``source:line: field: problem``."""
    try:
        doc = load_yaml(text, source, max_bytes=MAX_POLICY_BYTES, max_nodes=MAX_POLICY_NODES)
    except BoundedInputError as exc:
        raise PolicyError(exc.where, exc.message.removeprefix(f"{exc.where}: "), hint=exc.hint) from exc
    data = doc.value
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
            problems.append((doc.line_of(loc), field, err["msg"]))
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
        raise PolicyError(f"{source}:{doc.line_of(loc)}", f"{field}: {msg}{more}")
    return policy


def load_policy(path: str | Path) -> Policy:
    """Load and validate a policy file. Raises :class:`PolicyError` (exit 2 in the CLI)."""
    p = Path(path)
    try:
        data = read_bounded(p, MAX_POLICY_BYTES)
    except BoundedInputError as exc:
        message = exc.message.removeprefix(f"{exc.where}: ").replace("cannot read:", "cannot read the policy:", 1)
        raise PolicyError(str(p), message) from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise PolicyError(f"{p}:{line}@{exc.start}", "the policy is not UTF-8 text") from exc
    return parse_policy(text, str(p))


def policy_schema() -> str:
    """The JSON Schema of the policy file format, as pretty JSON text."""
    return json.dumps(Policy.model_json_schema(by_alias=True), indent=2, sort_keys=True)


__all__ = ["MAX_POLICY_BYTES", "MAX_POLICY_NODES", "PolicyError", "load_policy", "parse_policy", "policy_schema"]
