"""Fetch every enforcement point's telemetry logs through its executor, into one local directory.

Works over any executor (a lab namespace, an SSH host): each log is read with ``head -c`` so a host
can never send more than :data:`MAX_LOG_BYTES` of one log, and a missing log is simply absent (a
point without DNS has no dnsmasq log). The local copies are named ``<point>.<file>``.

The TLS sidecars keep their connection logs with the TLS layer's state, not in the telemetry directory:
:func:`sidecar_logs` finds each one from the layer's record of its nodes and the path the sidecar's own
configuration names (``events``), and :func:`collect` fetches them as ``extra`` files.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Final

from ringfence.observe.flows.events.deploy import FILES
from ringfence.targets.interface import Executor, TargetError

MAX_LOG_BYTES: Final = 512 << 20
#: Largest TLS sidecar configuration read back (it is a few kB; it names the sidecar's events log).
MAX_CONFIG_BYTES: Final = 1 << 20
_READ = '[ -e "$0" ] || exit 3; head -c "$1" "$0"'


@dataclass(frozen=True)
class Collected:
    """Local copies: (point, reader name, path), and the points that could not be read (with why)."""

    files: tuple[tuple[str, str, Path], ...]
    problems: tuple[str, ...]


def collect(executors: Mapping[str, Executor], directories: Mapping[str, str], into: Path, *,
            timeout: float = 60.0, extra: Mapping[str, Mapping[str, str]] | None = None) -> Collected:
    """Every point's logs (``directories``: point → its telemetry directory there) copied under ``into``;
    ``extra``: point → {reader name: absolute path} of logs kept elsewhere (the TLS sidecars')."""
    files: list[tuple[str, str, Path]] = []
    problems: list[str] = []
    into.mkdir(parents=True, exist_ok=True)
    for point, ex in sorted(executors.items()):
        directory = directories.get(point)
        wanted = {r: f"{directory}/{n}" for r, n in FILES.items()} if directory is not None else {}
        wanted.update((extra or {}).get(point, {}))
        for reader, remote in wanted.items():
            try:
                res = ex.run(["sh", "-c", _READ, remote, str(MAX_LOG_BYTES)], timeout=timeout)
            except TargetError as exc:
                problems.append(f"{point}: {exc.message}")
                break
            if res.returncode == 3 and not res.timed_out:
                continue
            if res.returncode != 0 or res.timed_out:
                problems.append(f"{point}: reading {remote} failed: "
                                f"{res.stderr.decode(errors='replace').strip()[-200:]}")
                continue
            local = into / f"{point}.{PurePosixPath(remote).name}"
            local.write_bytes(res.stdout)
            files.append((point, reader, local))
    return Collected(tuple(files), tuple(problems))


def sidecar_logs(site: str, executors: Mapping[str, Executor], *, timeout: float = 30.0,
                 root: Path | None = None) -> tuple[dict[str, dict[str, str]], tuple[str, ...]]:
    """(point → {"tls": its TLS sidecar's connection log}, problems) for ``site``: the nodes the TLS layer's
    state lists, each log where that node's sidecar configuration says it writes (none without the layer)."""
    from ringfence.errors import RingfenceError
    from ringfence.policy.model import Layer
    from ringfence.secure.layers.runtime import StateStore

    state = StateStore(site) if root is None else StateStore(site, root)
    try:
        nodes = sorted(state.read().nodes.get(Layer.TLS.value, []))
    except RingfenceError as exc:
        return {}, (f"TLS layer state: {exc}",)
    logs: dict[str, dict[str, str]] = {}
    problems: list[str] = []
    for node in nodes:
        ex = executors.get(node)
        config = state.directory / "tls" / f"{node}.json"
        if ex is None:
            problems.append(f"{node}: a TLS sidecar node that is no enforcement point here; its log is not read")
            continue
        try:
            res = ex.run(["sh", "-c", _READ, str(config), str(MAX_CONFIG_BYTES)], timeout=timeout)
        except TargetError as exc:
            problems.append(f"{node}: {exc.message}")
            continue
        try:
            events = json.loads(res.stdout).get("events") if res.returncode == 0 else None
        except (ValueError, AttributeError):
            events = None
        if not isinstance(events, str) or not events.startswith("/") or len(events) > 4096:
            problems.append(f"{node}: the TLS sidecar configuration {config} names no events log; its identities "
                            "are not read")
            continue
        logs[node] = {"tls": events}
    return logs, tuple(problems)


__all__ = ["MAX_CONFIG_BYTES", "MAX_LOG_BYTES", "Collected", "collect", "sidecar_logs"]
