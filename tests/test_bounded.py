"""Bounded JSON/YAML loading: hostile documents are clear errors naming the place, never tracebacks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringfence.bounded import BoundedInputError, load_yaml, loads_json, read_bounded

BOMB = "\n".join(
    ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    + [
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
        f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]"
        for i in range(8)
    ]
)


def test_json_depth_is_bounded_and_names_the_offset() -> None:
    with pytest.raises(BoundedInputError, match=r"f\.json:1@64: JSON nested deeper than 64"):
        loads_json("[" * 100_000 + "]" * 100_000, "f.json")
    assert loads_json(json.dumps({"a": "[" * 77}), "f") == {"a": "[" * 77}  # brackets in a string do not nest
    assert loads_json('["\\"[[["]', "f") == ['"[[[']


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ('{"count": NaN}', "NaN"),
        ('{"x": Infinity}', "Infinity"),
        ('{"a": 1, "a": 2}', "duplicate key 'a'"),
        ("[" + "9" * 5000 + "]", "unusable JSON value"),
        ('{"a": 1,\n "b": }', r"f:2@\d+: not JSON"),
    ],
)
def test_json_refuses_ambiguous_or_broken_values(text: str, match: str) -> None:
    with pytest.raises(BoundedInputError, match=match):
        loads_json(text, "f")


def test_json_not_utf8_names_line_and_offset() -> None:
    with pytest.raises(BoundedInputError, match=r"f:2@4: not UTF-8"):
        loads_json(b"[\n1,\xff]", "f")


def test_yaml_alias_bomb_is_refused_quickly() -> None:
    with pytest.raises(BoundedInputError, match="alias bomb"):
        load_yaml(BOMB, "p.yaml")


def test_yaml_self_referencing_alias_is_refused() -> None:
    with pytest.raises(BoundedInputError, match=r"p.yaml:1: YAML alias \*a refers to the node that contains it"):
        load_yaml("a: &a [*a]\n", "p.yaml")


@pytest.mark.parametrize(
    "text",
    [
        "[" * 1000 + "]" * 1000,
        "a:\n" + "".join(" " * i + "- \n" for i in range(5000)),
        "".join(" " * i + f"k{i}:\n" for i in range(2000)),
    ],
)
def test_yaml_deep_nesting_is_refused(text: str) -> None:
    with pytest.raises(BoundedInputError, match="nested deeper than 64"):
        load_yaml(text, "p.yaml")


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("? [a, b]\n: c\n", r"p.yaml:1: a mapping key must be a plain scalar"),
        ("a: 1\nexpires: 2024-02-30\n", r"p.yaml:2: unusable value '2024-02-30'"),
        ("n: " + "9" * 5000 + "\n", r"p.yaml:1: unusable value"),
        ("a: 1\na: 2\n", r"p.yaml:2: duplicate key 'a'"),
        ("a: !!python/object:os.system x\n", "not allowed"),
        ("a: .nan\n", "not a finite number"),
        ("", "empty"),
        ("a: 1\n---\nb: 2\n", "more than one YAML document"),
        ("a: [1,\n", r"p.yaml:\d+: not valid YAML"),
    ],
)
def test_yaml_hostile_values_are_clear_errors(text: str, match: str) -> None:
    with pytest.raises(BoundedInputError, match=match):
        load_yaml(text, "p.yaml")


def test_yaml_records_lines_of_keys_and_collections() -> None:
    doc = load_yaml("a: 1\nb:\n  - x\n  - {c: 2}\n", "p")
    assert doc.value == {"a": 1, "b": ("x", {"c": 2})}
    assert doc.line_of(("a",)) == 1 and doc.line_of(("b", 1, "c")) == 4 and doc.line_of(("b", 0)) == 2


def test_read_bounded_refuses_before_reading_it_all(tmp_path: Path) -> None:
    big = tmp_path / "big"
    with big.open("wb") as fh:
        fh.truncate(1 << 30)  # sparse: 1 GB that costs nothing on disk
    with pytest.raises(BoundedInputError, match="larger than the limit"):
        read_bounded(big, 1 << 20)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=4), kids, max_size=4),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_json_round_trips_what_the_stock_parser_reads(value: object) -> None:
    assert loads_json(json.dumps(value), "f") == value


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_any_bytes_are_a_value_or_a_bounded_error(data: bytes) -> None:
    for load in (loads_json, load_yaml):
        try:
            load(data, "f")
        except BoundedInputError as exc:
            assert exc.where.startswith("f")


def _depth(value: object) -> int:
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    return 0


# Strings full of the characters the depth check must see through: brackets, quotes, backslashes.
tricky_text = st.text(alphabet='[]{}"\\ax\n\u00e9', max_size=8)
nested_values = st.recursive(
    st.none() | st.integers() | tricky_text,
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(tricky_text, kids, max_size=3),
    max_leaves=30,
)


@settings(max_examples=400, deadline=None)
@given(nested_values, st.integers(min_value=0, max_value=6), st.booleans())
def test_json_depth_check_counts_exactly_the_nesting(value: object, limit: int, indent: bool) -> None:
    """The C-speed depth check (strings and escapes cut out) refuses exactly the documents nested past the
    limit, naming an offset, whatever brackets, quotes and backslashes their strings hold."""
    text = json.dumps(value, indent=1 if indent else None, ensure_ascii=False)
    if _depth(value) > limit:
        with pytest.raises(BoundedInputError, match=rf"f:\d+@\d+: JSON nested deeper than {limit} levels"):
            loads_json(text, "f", max_depth=limit)
    else:
        assert loads_json(text, "f", max_depth=limit) == value


def test_json_depth_check_sees_through_escapes_and_open_strings() -> None:
    assert loads_json('["\\\\", "\\\\\\"[[", {"\\"{": []}]', "f", max_depth=3) == ["\\", '\\"[[', {'"{': []}]
    with pytest.raises(BoundedInputError, match=r"f:1@8: JSON nested deeper than 2"):
        loads_json('["\\\\", [[', "f", max_depth=2)  # the string ends after its escaped backslash
    for open_string in ('["' + "\\" * 100_001, '["' + "[" * 100_000, '["' + '\\"[' * 100_000):
        with pytest.raises(BoundedInputError, match="not JSON"):  # brackets in an unclosed string do not nest
            loads_json(open_string, "f")
