"""Hostile nccl-tests output (issue 11 causes 13, 14): every value is checked, every error names its place."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringfence.bench.nccl_tests import NcclTestsError, parse_nccl_tests_json, parse_nccl_tests_text
from ringfence.cli import main

ASSETS = Path(__file__).parent / "assets"
HEADER = (
    "# nThread 1 nGpus 1 minBytes 1048576 maxBytes 1048576 step: 2(factor) warmup iters: 1 iters: 20 agg "
    "iters: 1 validation: 1 graph: 0\n#  Rank  0 Group  0 Pid  1 on  h0 device  0 [0009:01:00] GPU\n"
)
COLUMNS = (
    "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   "
    "busbw #wrong\n"
)
ROW = (
    "     1048576        262144     float     sum      -1   339.61    3.09    3.09      0   338.80    3.09    3.09"
    "      0\n"
)


def _text(row: str, columns: str = COLUMNS) -> str:
    return HEADER + columns + row


@pytest.mark.parametrize(
    ("old", "new", "match"),
    [
        ("262144", "nan", "count: 'nan' is not a non-negative integer"),
        ("262144", "inf", "count"),
        ("339.61", "nan", "time: 'nan' is not a finite number"),
        ("3.09    3.09      0   338.80", "3.09    3.09    nan   338.80", "#wrong: 'nan'"),
        ("1048576        262144", "9" * 400 + "        262144", "size"),
        ("339.61", "1e400", "time"),
    ],
)
def test_text_values_are_checked(old: str, new: str, match: str) -> None:
    with pytest.raises(NcclTestsError, match=match) as info:
        parse_nccl_tests_text(_text(ROW.replace(old, new, 1)), "x.txt").to_run()
    assert info.value.where == "x.txt:4"


def test_header_without_algbw_is_an_error_not_a_key_error() -> None:
    cols = COLUMNS.replace("algbw", "algbx")
    with pytest.raises(NcclTestsError, match="no algbw column"):
        parse_nccl_tests_text(_text(ROW, cols), "x.txt")


def _doc() -> dict[str, Any]:
    return json.loads((ASSETS / "nccl_tests_2x2.json").read_text())


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda d: d.__setitem__("args", 5), "args"),
        (lambda d: d["results"][0]["out_of_place"].__setitem__("nwrong", "__1e400__"), "nwrong"),
        (lambda d: d["results"][0]["out_of_place"].__setitem__("nwrong", 1.5), "nwrong"),
        (lambda d: d.__setitem__("out_of_bounds", {"count": "abc"}), "out_of_bounds"),
        (lambda d: d["config"]["devices"].__setitem__(0, {"rank": "x"}), r"devices\[0\]"),
        (lambda d: d["config"].__setitem__("devices", 7), "devices"),
        (lambda d: d["config"].__setitem__("iterations", "many"), "iterations"),
        (lambda d: d["results"][0].__setitem__("size", 10**400), "size"),
        (lambda d: d["results"][0]["out_of_place"].__setitem__("alg_bw", True), "alg_bw"),
    ],
)
def test_json_values_are_checked(edit: Any, match: str) -> None:
    doc = _doc()
    edit(doc)
    text = json.dumps(doc).replace('"__1e400__"', "1e400")  # a literal the JSON parser turns into inf
    with pytest.raises(NcclTestsError, match=match):
        parse_nccl_tests_json(text, "r.json").to_run()


@pytest.mark.parametrize("text", ['{"count": NaN}', "[" * 100_000 + "]" * 100_000])
def test_json_nan_and_deep_nesting_are_input_errors(text: str) -> None:
    with pytest.raises(NcclTestsError, match="NaN|nested deeper"):
        parse_nccl_tests_json(text, "r.json")


def test_cli_import_of_deep_json_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "deep.json"
    f.write_text("{" + '"a":[' * 100_000 + "]" * 100_000 + "}")
    assert main(["bench", "import", str(f)]) == 2
    err = capsys.readouterr().err
    assert "deep.json" in err and "nested deeper" in err and "Traceback" not in err


values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**30), 10**30),
    st.floats(allow_nan=False),
    st.text(max_size=5),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_any_json_field_replaced_is_a_report_or_an_input_error(data: st.DataObject) -> None:
    doc = _doc()
    target: Any = doc
    path = []
    while isinstance(target, dict | list) and target and data.draw(st.booleans()):
        key = data.draw(st.sampled_from(sorted(target) if isinstance(target, dict) else list(range(len(target)))))
        path.append(key)
        if not isinstance(target[key], dict | list):
            break
        target = target[key]
    if isinstance(target, dict | list) and target:
        key = data.draw(st.sampled_from(sorted(target) if isinstance(target, dict) else list(range(len(target)))))
        target[key] = data.draw(values)
    try:
        parse_nccl_tests_json(json.dumps(doc), "r.json").to_run()
    except NcclTestsError as exc:
        assert exc.where.startswith("r.json")


def test_in_place_only_row_whose_halves_differ_is_an_error() -> None:
    cols = COLUMNS.replace("busbw #wrong\n", "busbw #wrong   extra\n")  # the in-place half has one more column
    row = "     1048576        262144     float     sum      -1   339.61    3.09    3.09      0\n"
    with pytest.raises(NcclTestsError, match="expected 5 values") as info:
        parse_nccl_tests_text(_text(row, cols), "x.txt").to_run()
    assert info.value.where == "x.txt:4"
