"""Fetch every enforcement point's telemetry logs through its executor, into one local directory.

Works over any executor (a lab namespace, an SSH host): each log is read with ``head -c`` so a host
can never send more than :data:`MAX_LOG_BYTES` of one log, and a missing log is simply absent (a
point without DNS has no dnsmasq log). The local copies are named ``<point>.<file>``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from ringfence.observe.flows.events.deploy import FILES
from ringfence.targets.interface import Executor, TargetError

MAX_LOG_BYTES: Final = 512 << 20
_READ = '[ -e "$0" ] || exit 3; head -c "$1" "$0"'


@dataclass(frozen=True)
class Collected:
    """Local copies: (point, reader name, path), and the points that could not be read (with why)."""

    files: tuple[tuple[str, str, Path], ...]
    problems: tuple[str, ...]


def collect(executors: Mapping[str, Executor], directories: Mapping[str, str], into: Path, *,
            timeout: float = 60.0) -> Collected:
    """Every point's logs (``directories``: point → its telemetry directory there) copied under ``into``."""
    files: list[tuple[str, str, Path]] = []
    problems: list[str] = []
    into.mkdir(parents=True, exist_ok=True)
    for point, ex in sorted(executors.items()):
        directory = directories.get(point)
        if directory is None:
            continue
        for reader, name in FILES.items():
            try:
                res = ex.run(["sh", "-c", _READ, f"{directory}/{name}", str(MAX_LOG_BYTES)], timeout=timeout)
            except TargetError as exc:
                problems.append(f"{point}: {exc.message}")
                break
            if res.returncode == 3 and not res.timed_out:
                continue
            if res.returncode != 0 or res.timed_out:
                problems.append(f"{point}: reading {directory}/{name} failed: "
                                f"{res.stderr.decode(errors='replace').strip()[-200:]}")
                continue
            local = into / f"{point}.{name}"
            local.write_bytes(res.stdout)
            files.append((point, reader, local))
    return Collected(tuple(files), tuple(problems))


__all__ = ["MAX_LOG_BYTES", "Collected", "collect"]
