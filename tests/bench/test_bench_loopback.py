"""A real 2-rank gloo all-reduce on loopback (tiny), and the gate on real measurements."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from ringfence.bench.driver import BenchError, BenchSpec, RankSpec, run_allreduce
from ringfence.bench.placement import local_ranks
from ringfence.bench.run import BenchRun, load_run, save_run
from ringfence.targets.local import LocalExecutor, LocalProcess

TINY = BenchSpec(sizes=(1 << 20, 2 << 20), warmup=1, iterations=5, repeats=3, timeout_s=120)


PROGRESS: list[tuple[int, int, int]] = []


@pytest.fixture(scope="session")
def plain_run() -> BenchRun:
    """One real gloo run (2 ranks, 2 sizes, 3 repeats), shared by the tests of this file."""
    return run_allreduce(local_ranks(["n0", "n1"]), TINY, progress=lambda p: PROGRESS.append((p.repeat, p.done,
                                                                                              p.result.size)))


def test_real_allreduce_sums_and_format(plain_run: BenchRun, tmp_path: Path) -> None:
    run = plain_run
    assert run.config.world_size == 2 and run.config.nodes == ("n0", "n1") and run.config.backend == "gloo"
    assert dict(run.config.versions)["torch"].startswith("2.")
    # torch's OpenMP threads would spin into the timed collectives: one, unless the caller chose otherwise
    assert dict(run.config.versions)["intra_op_threads"] == (os.environ.get("OMP_NUM_THREADS") or "1")
    assert len(run.repeats) == 3
    for rep in run.repeats:
        assert [r.size for r in rep.results] == [1 << 20, 2 << 20]
        for r in rep.results:
            assert r.wrong == 0  # every element summed exactly, every iteration
            assert len(r.times_us) == 5 and r.p99_us == max(r.times_us)
            assert r.busbw == pytest.approx(r.algbw)  # n = 2
            assert r.algbw == pytest.approx(r.size / r.time_us / 1e3)
    save_run(run, tmp_path / "run.json")
    assert load_run(tmp_path / "run.json") == run


def test_progress_is_reported_per_size(plain_run: BenchRun) -> None:
    assert PROGRESS == [(k, i + 1, s) for k in range(3) for i, s in enumerate(TINY.sizes)]


class _HangingRank:
    """Rank 1 never joins (it sleeps instead), so the driver must time out and stop both by pid."""

    name = "hang"

    def __init__(self) -> None:
        self.inner = LocalExecutor()
        self.started: list[LocalProcess] = []

    def run(self, argv: Sequence[str], **kw: object) -> object:
        raise AssertionError("not used")

    def spawn(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, stdout: Path | None = None,
              stderr: Path | None = None) -> LocalProcess:
        proc = self.inner.spawn(["sleep", "60"] if "1" == argv[argv.index("--rank") + 1] else argv, env=env,
                                stdout=stdout, stderr=stderr)
        self.started.append(proc)
        return proc

    def copy_to(self, local: Path, remote: str) -> None:
        raise AssertionError("not used")

    def copy_from(self, remote: str, local: Path) -> None:
        raise AssertionError("not used")


def test_timeout_stops_every_rank() -> None:
    ex = _HangingRank()
    ranks = [RankSpec("n0", ex, "127.0.0.1"), RankSpec("n1", ex, "127.0.0.1")]  # type: ignore[arg-type]
    t0 = time.monotonic()
    with pytest.raises(BenchError, match="did not finish within 3 s"):
        run_allreduce(ranks, replace(TINY, timeout_s=3))
    assert time.monotonic() - t0 < 20
    assert len(ex.started) == 2 and all(p.poll() is not None for p in ex.started)


def test_a_failing_rank_is_reported() -> None:
    with pytest.raises(BenchError, match="rank .* (failed|exited)"):
        run_allreduce(local_ranks(["n0", "n1"]), replace(TINY, backend="no-such-backend", repeats=1))


def test_bad_specs_are_refused_before_starting() -> None:
    with pytest.raises(BenchError, match="multiples of 4"):
        run_allreduce(local_ranks(["n0", "n1"]), replace(TINY, sizes=(1001,)))
    with pytest.raises(BenchError, match="at least 2 ranks"):
        run_allreduce(local_ranks(["n0"]), TINY)
