"""Host-load readings: /proc parsing, busy share between samples, the run-queue share, the load slack."""

from __future__ import annotations

import pytest

from ringfence.bench.load import LoadError, LoadSample, RepeatLoad, busy_fraction, parse_proc
from ringfence.bench.paired import PairLoad, load_slack

PROC = """0.52 0.58 0.59 3/612 12345
cpu  100 10 50 800 40 0 5 0 0 0
cpu0 50 5 25 400 20 0 2 0 0 0
cpu1 50 5 25 400 20 0 3 0 0 0
intr 1 2 3
procs_running 3
procs_blocked 0
"""


def test_parse_proc_reads_load_jiffies_run_queue_and_cpus() -> None:
    s = parse_proc(PROC)
    assert s == LoadSample(0.52, 165, 1005, 2, 2)  # busy: user+nice+system+irq+softirq; the reader not counted


def test_busy_fraction_between_two_samples() -> None:
    a, b = LoadSample(0.0, 100, 1000), LoadSample(0.0, 150, 1100)
    assert busy_fraction(a, b) == pytest.approx(0.5)
    assert busy_fraction(a, a) is None


@pytest.mark.parametrize("text", ["", "garbage\n", "0.1 0.1 0.1 1/1 1\ncpu  a b c\n"])
def test_malformed_proc_text_is_a_load_error(text: str) -> None:
    with pytest.raises(LoadError, match="/proc"):
        parse_proc(text)


def test_a_hog_on_a_saturated_host_still_shows_in_the_slack() -> None:
    """Busy reads 100 % on both arms; the run queue (16 → 17 others on 2 CPUs) still moves the slack."""
    def load(runnable: float) -> tuple[RepeatLoad, ...]:
        return (RepeatLoad("h", 1.0, 1.0, 1.0, 16.0, 16.0, runnable, 2),)

    assert load_slack(PairLoad("AB", load(16), load(16))) == pytest.approx(0.0)
    assert load_slack(PairLoad("AB", load(16), load(17))) == pytest.approx(0.0572, abs=1e-3)  # log(18/17)
    # idle → one hog on 2 CPUs: the busy share (2 % → 50 %) is the larger reading
    idle = (RepeatLoad("h", 0.02, 0.02, 0.9, 0.1, 0.1, 0.0, 2),)
    hog = (RepeatLoad("h", 0.5, 0.5, 1.0, 1.0, 1.0, 1.0, 2),)
    assert load_slack(PairLoad("AB", idle, hog)) == pytest.approx(0.6729, abs=1e-3)  # log(0.98 / 0.5)
