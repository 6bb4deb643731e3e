"""The flow-input helper shared by ``flows`` and ``discover``: progress only on a terminal, one table."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from ringfence.cli.flow_inputs import read_flow_inputs, terminal_progress

SAMPLES = Path(__file__).resolve().parents[2].parent / "shared" / "samples"
VPC = SAMPLES / "vpc" / "otel_valid_vpc_flow_log_multi.log"


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_redraws_only_on_change_and_ends_the_line(monkeypatch: pytest.MonkeyPatch) -> None:
    err = _Tty()
    monkeypatch.setattr("sys.stderr", err)
    show = terminal_progress()
    assert show is not None
    for done in (0, 1, 1, 50, 100):
        show(done, 100)
    assert err.getvalue() == "\rreading flows:   0%\rreading flows:   1%\rreading flows:  50%\rreading flows: 100%\n"


def test_no_progress_off_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stderr", io.StringIO())
    assert terminal_progress() is None


def test_reads_inputs_into_one_table_with_progress_unless_asked_not_to(monkeypatch: pytest.MonkeyPatch) -> None:
    err = _Tty()
    monkeypatch.setattr("sys.stderr", err)
    twice = read_flow_inputs([VPC, VPC], progress=False)
    assert err.getvalue() == ""
    once = read_flow_inputs([VPC])
    assert once.num_rows > 0 and twice.num_rows == 2 * once.num_rows
    assert err.getvalue().endswith("reading flows: 100%\n")
