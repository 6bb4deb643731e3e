"""The CLI's last line of defence: a foreign exception is one line on stderr and exit 2."""

from __future__ import annotations

import pytest


def test_cli_turns_a_foreign_exception_into_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    from argparse import Namespace

    from ringfence.cli import run_verb

    def broken(_: Namespace) -> int:
        raise KeyError("algbw\nsecond line")

    assert run_verb(broken, Namespace(), verbose=False) == 2
    err = capsys.readouterr().err
    assert err.startswith("internal error: KeyError:") and err.count("\n") == 1 and "Traceback" not in err
    assert run_verb(broken, Namespace(), verbose=True) == 2
    assert "Traceback" in capsys.readouterr().err


def test_cli_reports_runaway_recursion_without_a_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    from argparse import Namespace

    from ringfence.cli import run_verb

    def deep(_: Namespace) -> int:
        raise RecursionError("maximum recursion depth exceeded")

    assert run_verb(deep, Namespace(), verbose=False) == 2
    assert "internal error: RecursionError" in capsys.readouterr().err
