"""Start-up stays light: ``--version`` and every ``VERB [CMD] --help`` import no heavy dependency.

Checked in a fresh interpreter (``sys.modules`` after each call), because an import made by an
earlier test in this process would hide one made by the CLI.
"""

from __future__ import annotations

import json
import subprocess
import sys

#: What start-up must never pay for: the analytical engine, Arrow, numpy, torch, and the pydantic policy models.
HEAVY = ("duckdb", "pyarrow", "numpy", "torch", "pydantic", "ringfence.policy", "ringfence.lab", "cryptography")

_PROBE = r"""
import argparse, contextlib, io, json, sys
HEAVY = json.loads(sys.argv[1])

def loaded():
    return sorted(m for m in HEAVY if m in sys.modules)

from ringfence.cli import build_parser, main

def call(argv):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            main(argv)
        except SystemExit:
            pass
    return loaded()

report = {"version": call(["--version"])}

def leaves(parser, path):
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path
        return
    for name, child in subs[0].choices.items():
        yield from leaves(child, [*path, name])

paths = list(leaves(build_parser(), []))
for path in paths:
    report[" ".join(path)] = call([*path, "--help"])
# The parser was built above too: building it must not have imported anything heavy either.
report["(parser)"] = loaded()
print(json.dumps({"report": report, "count": len(paths)}))
"""


def _probe() -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(HEAVY)], capture_output=True, text=True, timeout=300, check=False
    )
    assert out.returncode == 0, out.stderr
    doc: dict[str, object] = json.loads(out.stdout)
    return doc


def test_version_and_every_help_import_nothing_heavy() -> None:
    doc = _probe()
    report = doc["report"]
    assert isinstance(report, dict)
    heavy = {cmd: mods for cmd, mods in report.items() if mods}
    assert heavy == {}, f"start-up imported heavy modules: {heavy}"
    # Every verb was reached (the probe walked the real parser, not an empty one).
    assert isinstance(doc["count"], int) and doc["count"] >= 15
    assert "assess" in report and "bench allreduce" in report and "lab up" in report


def test_version_runs_as_a_process_without_heavy_imports() -> None:
    code = (
        "import runpy, sys, json\n"
        "sys.argv = ['ringfence', '--version']\n"
        "try:\n"
        "    runpy.run_module('ringfence.cli', run_name='__main__')\n"
        "except SystemExit as e:\n"
        "    assert e.code in (0, None), e.code\n"
        f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)), file=sys.stderr)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ringfence 0.1.0" or out.stdout.startswith("ringfence ")
    assert json.loads(out.stderr.strip().splitlines()[-1]) == []


def test_a_wrong_registry_name_is_a_usage_error_listing_the_choices() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "ringfence.cli", "compile", "p.yaml", "--to", "iptables", "-o", "out"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert out.returncode == 2
    assert "invalid choice: 'iptables'" in out.stderr and "nftables" in out.stderr
    assert "Traceback" not in out.stderr
