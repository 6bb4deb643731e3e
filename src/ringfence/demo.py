"""``make demo``: the main job on a fresh machine, end to end, on real parts.

As root: bring the lab cluster up "as found" (plaintext everywhere, no segmentation), let traffic of
all four classes flow, capture it on the fabric, assess it against the lab's policy, print the
summary, write the reports, bring the lab down (also on failure). Not root: say so, and run the
same assessment on the capture shipped under ``examples/``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

from ringfence.assess import assess
from ringfence.errors import EnvironmentProblem, RingfenceError
from ringfence.evidence.report import exit_code
from ringfence.evidence.report.terminal import print_summary

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SHIPPED_CAPTURE = EXAMPLES / "lab-as-found.pcap"
SHIPPED_POLICY = EXAMPLES / "lab-policy.yaml"


def _lab_ready() -> str | None:
    """None if a lab can run here, else why not."""
    from ringfence.lab.netns import require_privileges

    try:
        require_privileges()
    except EnvironmentProblem as exc:
        return exc.message
    return None


def run(output: Path, seconds: float, workers: int, err: Console, why_not: str | None) -> int:
    """Run the demo; returns the assessment's exit code (1 is expected: the lab starts as found).

    ``why_not`` is None when a lab can run here, else the reason it cannot (then the shipped
    capture is assessed instead).
    """
    # A fresh evidence chain per demo run: the demo's store records this run only.
    shutil.rmtree(output / "evidence", ignore_errors=True)
    output.mkdir(parents=True, exist_ok=True)
    if why_not is None:
        from ringfence.lab import Lab

        err.print(f"[bold]ringfence demo[/bold]: bringing up the lab ({workers} workers) …")
        with Lab.up(workers=workers) as lab:
            status = lab.status()
            err.print(f"lab {lab.name}: {len(status.nodes)} nodes, traffic of all four classes flowing")
            policy_path = output / "lab-policy.yaml"
            policy_path.write_text(lab.policy_yaml())
            capture = output / "lab.pcap"
            err.print(f"capturing {seconds:.0f} s on the fabric …")
            lab.capture(seconds, capture)
        err.print("lab down")
    else:
        err.print(f"[yellow]not running the lab:[/yellow] {why_not}")
        err.print(f"assessing the capture shipped in {SHIPPED_CAPTURE.relative_to(EXAMPLES.parent)} instead")
        policy_path, capture = SHIPPED_POLICY, SHIPPED_CAPTURE
    result = assess(
        policy_path,
        [capture],
        store_dir=output / "evidence",
        output=output,
        formats=("json", "html", "junit", "sarif"),
        progress=lambda m: err.print(f"[dim]{m}[/dim]"),
    )
    print_summary(result.assessment, Console(file=sys.stdout))
    for path in result.reports:
        err.print(f"wrote {path}")
    code = exit_code(result.assessment)
    if code == 1:
        err.print("findings failed — expected for a lab 'as found'; see the report for each flow")
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m ringfence.demo``: exit 0 when the demo ran (whatever the findings), 2 on error."""
    ap = argparse.ArgumentParser(prog="ringfence-demo", description=__doc__)
    ap.add_argument("--output", default="out")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    err = Console(stderr=True)
    try:
        run(Path(args.output), args.seconds, args.workers, err, _lab_ready())
    except RingfenceError as exc:
        err.print(exc.diagnostics(), markup=False)
        return 2
    # The demo succeeded if it produced its reports; the findings are the point, not a failure.
    return 0 if os.path.exists(Path(args.output) / "report.json") else 2


if __name__ == "__main__":
    sys.exit(main())
