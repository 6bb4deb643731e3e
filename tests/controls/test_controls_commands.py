"""Every ``ringfence …`` command a control tells the user to run exists: it parses with the real parser.

Collected from each control's remediation (every target), its requirements' gather commands, the
unknown texts of ``GATHER``, and the findings of a run with no facts and a run with all of them.
"""

from __future__ import annotations

import re
import shlex

import pytest
from ctl_kit import NOW, by_control
from test_controls_requirements import POLICY, complete

from ringfence.cli import build_parser
from ringfence.controls._common import GATHER
from ringfence.controls.interface import Facts
from ringfence.controls.registry import REGISTRY

_QUOTED = re.compile(r"`(ringfence [^`]+)`")


def _texts() -> list[tuple[str, str]]:
    out = [(f"{cid} remediation {t}", text) for cid, c in REGISTRY.items() for t, text in c.meta.remediation.items()]
    out += [(f"{cid} requirement {r.id}", f"`{r.gather}`") for cid, c in REGISTRY.items() for r in c.meta.requirements]
    out += [(f"GATHER[{k}]", v) for k, v in GATHER.items()]
    for label, facts in (("no facts", Facts(now=NOW)), ("all facts", complete())):
        out += [(f"{label}: {f.control} {f.subject}", f"{f.message} {f.remediation}")
                for r in by_control(POLICY, facts).values() for f in r.findings]
    return out


_FIRST: dict[str, str] = {}
for _where, _text in _texts():
    for _cmd in _QUOTED.findall(_text):
        _FIRST.setdefault(_cmd, _where)
COMMANDS = sorted(_FIRST.items())


def test_commands_are_found() -> None:
    verbs = {shlex.split(cmd)[1] for cmd, _ in COMMANDS}
    assert {"probe", "verify", "contain", "apply", "encrypt", "assess", "lab"} <= verbs


@pytest.mark.parametrize(("command", "where"), COMMANDS)
def test_every_named_command_parses(command: str, where: str) -> None:
    parser = build_parser()
    try:
        args = parser.parse_args(shlex.split(command)[1:])
    except SystemExit as exc:
        pytest.fail(f"{where}: `{command}` does not parse with ringfence's parser (exit {exc.code})")
    assert callable(args.func)
