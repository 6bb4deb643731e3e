"""nccl-tests import: real outputs read in place, and fixtures of the -I and -J layouts."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringfence.bench.nccl_tests import (
    NcclTestsError,
    import_nccl_tests,
    parse_nccl_tests_json,
    parse_nccl_tests_text,
)
from ringfence.bench.stats import busbw_factor

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO.parent / "shared" / "samples" / "nccl-tests"
ASSETS = Path(__file__).resolve().parent / "assets"
HEALTHY = SAMPLES / "cscs_gh200_2x4_all_reduce_perf_cxi_hook.txt"
DEGRADED = SAMPLES / "cscs_gh200_2x4_all_reduce_perf_no_cxi_hook.txt"
SARUS = SAMPLES / "cscs_gh200_2x1_all_reduce_perf_sarus.txt"
SUPERBENCH = SAMPLES / "superbench_a100x8_all_reduce_perf.txt"

needs_samples = pytest.mark.skipif(not SAMPLES.is_dir(), reason="shared nccl-tests samples not present")


@needs_samples
def test_gh200_2x4_exact_values() -> None:
    rep = import_nccl_tests(HEALTHY)
    assert len(rep.rows) == 25 and len(rep.ranks) == 8
    assert [r.host for r in rep.ranks] == ["nid005471"] * 4 + ["nid005487"] * 4
    assert (rep.warmup, rep.iterations, rep.avg_busbw, rep.out_of_bounds) == (1, 20, 19.7866, 0)
    last = rep.rows[-1]
    assert (last.size, last.count, last.dtype, last.redop, last.root) == (134217728, 33554432, "float", "sum", -1)
    assert last.out_of_place is not None and last.in_place is not None
    assert (last.out_of_place.time_us, last.out_of_place.algbw, last.out_of_place.busbw) == (1916.4, 70.04, 122.57)
    assert (last.in_place.time_us, last.in_place.algbw, last.in_place.busbw) == (1907.8, 70.35, 123.11)
    assert last.out_of_place.wrong == 0
    run = rep.to_run("in-place")
    assert run.config.world_size == 8 and run.config.dtype == "float32" and run.config.placement == "in-place"
    assert run.repeats[0].result(134217728).busbw == 123.11  # type: ignore[union-attr]


@needs_samples
def test_busbw_column_is_algbw_times_the_factor() -> None:
    for path in (HEALTHY, SARUS, SUPERBENCH):
        rep = import_nccl_tests(path)
        f = busbw_factor(len(rep.ranks))
        for row in rep.rows:
            for m in (row.out_of_place, row.in_place):
                assert m is not None
                # both columns are printed with 2 decimals, so allow their rounding
                assert m.busbw == pytest.approx(m.algbw * f, abs=0.005 * f + 0.006), (path.name, row.size)


@needs_samples
def test_new_layout_with_unalign_and_wide_wrong_column() -> None:
    rep = import_nccl_tests(SARUS)
    assert len(rep.rows) == 8 and len(rep.ranks) == 2
    assert dict(rep.params)["unalign"] == "0"
    first = rep.rows[0]
    assert first.out_of_place is not None and first.in_place is not None
    assert (first.size, first.out_of_place.time_us, first.out_of_place.busbw, first.in_place.time_us) == \
        (1048576, 339.61, 3.09, 335.85)
    assert rep.avg_busbw == 14.9966


@needs_samples
def test_old_layout_with_na_errors_and_nccl_info_lines() -> None:
    rep = import_nccl_tests(SUPERBENCH)
    assert len(rep.ranks) == 8 and len(rep.rows) == 34  # the NCCL INFO line is not a row
    assert rep.rows[0].root is None and rep.rows[0].out_of_place is not None
    assert rep.rows[0].out_of_place.wrong is None  # "N/A": validation off
    big = rep.rows[-1]
    assert big.out_of_place is not None and (big.size, big.out_of_place.time_us, big.out_of_place.busbw) == \
        (8589934592, 63896.0, 235.26)
    run = rep.to_run()
    assert 0 not in run.config.sizes and any("size-0" in n for n in run.notes)
    assert run.wrong_total() is None


@needs_samples
def test_healthy_and_degraded_runs_are_the_same_test() -> None:
    assert import_nccl_tests(HEALTHY).to_run().config_hash == import_nccl_tests(DEGRADED).to_run().config_hash
    assert import_nccl_tests(HEALTHY).to_run().config_hash != import_nccl_tests(SARUS).to_run().config_hash


def test_per_iteration_fixture() -> None:
    rep = import_nccl_tests(ASSETS / "nccl_tests_2x1_per_iter.txt")
    assert rep.per_iteration and dict(rep.versions) == {"nccl": "22703", "nccl-tests": "2.17.6"}
    row = rep.rows[2]
    assert row.out_of_place is not None and row.in_place is not None
    assert (row.out_of_place.i_min_us, row.out_of_place.i_max_us, row.out_of_place.i_p99_us,
            row.out_of_place.i_cv_pct) == (165.2, 230.6, 230.6, 6.48)
    assert (row.in_place.time_us, row.in_place.busbw, row.in_place.i_p99_us) == (170.9, 24.54, 187.1)
    run = rep.to_run()
    r = run.repeats[0].result(4194304)
    assert r is not None and r.p99_us == 230.6 and r.cv == pytest.approx(0.0648) and r.p50_us is None


def test_json_fixture() -> None:
    rep = import_nccl_tests(ASSETS / "nccl_tests_2x2.json")
    assert rep.collective == "all_reduce" and rep.per_iteration
    assert [r.host for r in rep.ranks] == ["gpu-a", "gpu-a", "gpu-b", "gpu-b"]
    assert (rep.warmup, rep.iterations, rep.avg_busbw, rep.out_of_bounds) == (2, 4, 21.177467, 0)
    row = rep.rows[1]
    assert row.root == -1 and row.out_of_place is not None
    assert (row.out_of_place.time_us, row.out_of_place.busbw, row.out_of_place.i_p50_us) == (140.0, 22.469486, 135.0)
    assert row.out_of_place.times_us == (130.0, 135.0, 160.0, 135.0)
    run = rep.to_run()
    r = run.repeats[0].result(2097152)
    assert r is not None and r.p99_us == 160.0 and r.times_us == (130.0, 135.0, 160.0, 135.0)
    assert run.config.world_size == 4 and dict(run.config.versions) == {"nccl": "22703"}


def test_errors_name_the_line() -> None:
    text = HEADER + COLUMNS + "     1048576        262144     float     sum      -1   339.61    3.09\n"
    with pytest.raises(NcclTestsError) as info:
        parse_nccl_tests_text(text, "x.txt")
    assert info.value.where == "x.txt:4"
    with pytest.raises(NcclTestsError, match="column header"):
        parse_nccl_tests_text("just words\n", "y.txt")
    with pytest.raises(NcclTestsError, match="not JSON"):
        parse_nccl_tests_json("{", "z.json")


HEADER = ("# nThread 1 nGpus 1 minBytes 1048576 maxBytes 1048576 step: 2(factor) warmup iters: 1 iters: 20 agg "
          "iters: 1 validation: 1 graph: 0\n#  Rank  0 Group  0 Pid  1 on  h0 device  0 [0009:01:00] GPU\n")
COLUMNS = ("#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   "
           "busbw #wrong\n")


@needs_samples
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_truncated_or_corrupted_input_gives_a_clear_error(data: st.DataObject) -> None:
    raw = SARUS.read_text()
    cut = data.draw(st.integers(0, len(raw)))
    pos = data.draw(st.integers(0, max(cut - 1, 0)))
    junk = data.draw(st.sampled_from(["", "x", "#", "\n", "-", "9"]))
    text = raw[:pos] + junk + raw[pos + 1:cut]
    try:
        rep = parse_nccl_tests_text(text, "cut.txt")
        rep.to_run()
    except NcclTestsError as exc:
        assert exc.where.startswith("cut.txt")
