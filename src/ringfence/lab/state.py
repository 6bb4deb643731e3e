"""The lab's state file: everything a lab created and every process it started, so ``down`` can undo it.

``<root>/<prefix>.json`` is rewritten atomically after every change, and a namespace is recorded
*before* it is created, so the file always covers at least what exists — also after the creating
process was killed. Processes additionally leave ``<root>/<prefix>/pids/<label>.pid``, written by the
process itself before it becomes the service, which covers the instant between start and record.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ringfence.atomic import write_atomic
from ringfence.errors import InputError
from ringfence.lab.topology import NAME_PATTERN, LabError

#: Where labs keep their state unless told otherwise (tmpfs: gone after a reboot, like the namespaces).
DEFAULT_ROOT = Path("/run/ringfence/labs")
STATE_VERSION = 1


class LabStateError(InputError):
    """A state file that cannot be read; ``where`` is its path."""


@dataclass(frozen=True)
class TlsPaths:
    """Certificate, key and CA bundle a node's agents use for TLS 1.3 with mutual authentication."""

    cert: str
    key: str
    ca: str


@dataclass(frozen=True)
class ProcessRecord:
    """A process the lab started: ``kind`` is ``service``, ``scheduler`` (munged, slurmctld, slurmd),
    ``traffic`` (clients, and the ranks Slurm started) or ``capture``."""

    pid: int
    label: str
    node: str
    kind: str
    argv: tuple[str, ...]


@dataclass(frozen=True)
class LabState:
    """The contents of one state file."""

    prefix: str
    workers: int
    jobs: int
    created: str
    phase: str = "creating"  # creating | up | deleting
    namespaces: tuple[str, ...] = ()
    processes: tuple[ProcessRecord, ...] = ()
    tls: dict[str, TlsPaths] = field(default_factory=dict)
    scheduler: bool = True  # the training ranks run under the lab's Slurm (False: started directly)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "version": STATE_VERSION,
            "prefix": self.prefix,
            "workers": self.workers,
            "jobs": self.jobs,
            "created": self.created,
            "phase": self.phase,
            "namespaces": list(self.namespaces),
            "processes": [
                {"pid": p.pid, "label": p.label, "node": p.node, "kind": p.kind, "argv": list(p.argv)}
                for p in self.processes
            ],
            "tls": {k: {"cert": v.cert, "key": v.key, "ca": v.ca} for k, v in self.tls.items()},
            "scheduler": self.scheduler,
        }

    @classmethod
    def from_json(cls, data: Any, where: str) -> LabState:
        """Parse the dict :meth:`to_json` wrote; :class:`LabStateError` naming ``where`` otherwise."""
        try:
            if data["version"] != STATE_VERSION:
                raise LabStateError(where, f"state version {data['version']!r}, this ringfence reads {STATE_VERSION}")
            return cls(
                prefix=str(data["prefix"]),
                workers=int(data["workers"]),
                jobs=int(data["jobs"]),
                created=str(data["created"]),
                phase=str(data["phase"]),
                namespaces=tuple(str(n) for n in data["namespaces"]),
                processes=tuple(
                    ProcessRecord(int(p["pid"]), str(p["label"]), str(p["node"]), str(p["kind"]),
                                  tuple(str(a) for a in p["argv"]))
                    for p in data["processes"]
                ),
                tls={str(k): TlsPaths(str(v["cert"]), str(v["key"]), str(v["ca"])) for k, v in data["tls"].items()},
                scheduler=bool(data.get("scheduler", True)),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise LabStateError(where, f"malformed lab state: {exc!r}") from exc


@dataclass(frozen=True)
class StatePaths:
    """Where one lab keeps its things."""

    root: Path
    prefix: str

    @property
    def state_file(self) -> Path:
        """The JSON record."""
        return self.root / f"{self.prefix}.json"

    @property
    def lock_file(self) -> Path:
        """Serialises read-modify-write of the record between processes."""
        return self.root / f".{self.prefix}.lock"

    @property
    def directory(self) -> Path:
        """Keys, configs, logs, pid files, agent status files."""
        return self.root / self.prefix

    @property
    def pid_dir(self) -> Path:
        """Pid files written by the started processes themselves."""
        return self.directory / "pids"

    @property
    def log_dir(self) -> Path:
        """One log per started process."""
        return self.directory / "logs"

    @property
    def status_dir(self) -> Path:
        """Agents' counters (``<node>-<agent>.json``), read without touching the network."""
        return self.directory / "status"


def now_iso() -> str:
    """Current UTC time, ISO 8601."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def _write(paths: StatePaths, state: LabState) -> None:
    write_atomic(paths.state_file, (json.dumps(state.to_json(), indent=2) + "\n").encode())


def create_state(paths: StatePaths, state: LabState) -> None:
    """Claim the prefix: fails if a lab of that name already has a state file."""
    try:
        paths.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(paths.state_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError as exc:
        raise LabError(f"a lab named {paths.prefix} already exists ({paths.state_file})",
                       hint=f"ringfence lab down --name {paths.prefix}") from exc
    except OSError as exc:
        raise LabError(f"cannot create {paths.state_file}: {exc.strerror or exc}") from exc
    os.close(fd)
    _write(paths, state)


def read_state(paths: StatePaths) -> LabState:
    """The recorded state; :class:`LabError` if there is no such lab."""
    try:
        text = paths.state_file.read_text()
    except FileNotFoundError as exc:
        raise LabError(f"no lab named {paths.prefix} (no {paths.state_file})",
                       hint="ringfence lab status lists running labs") from exc
    except OSError as exc:
        raise LabError(f"cannot read {paths.state_file}: {exc.strerror or exc}") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise LabStateError(f"{paths.state_file}:{exc.lineno}", f"not JSON: {exc.msg}") from exc
    return LabState.from_json(data, str(paths.state_file))


@contextmanager
def _locked(paths: StatePaths) -> Iterator[None]:
    paths.root.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(paths.lock_file, "a+b") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def update_state(paths: StatePaths, change: Callable[[LabState], LabState]) -> LabState:
    """Read, change and rewrite the record under an exclusive lock; returns the new state."""
    with _locked(paths):
        new = change(read_state(paths))
        _write(paths, new)
        return new


def add_namespace(paths: StatePaths, namespace: str) -> None:
    """Record a namespace about to be created."""
    update_state(paths, lambda s: replace(s, namespaces=(*s.namespaces, namespace)))


def add_process(paths: StatePaths, record: ProcessRecord) -> None:
    """Record a started process."""
    update_state(paths, lambda s: replace(s, processes=(*s.processes, record)))


def remove_processes(paths: StatePaths, pids: set[int]) -> None:
    """Forget processes that are gone."""
    update_state(paths, lambda s: replace(s, processes=tuple(p for p in s.processes if p.pid not in pids)))


def set_phase(paths: StatePaths, phase: str) -> None:
    """Record the lab's phase."""
    update_state(paths, lambda s: replace(s, phase=phase))


def set_tls(paths: StatePaths, tls: dict[str, TlsPaths]) -> None:
    """Record which nodes' agents run with TLS (empty: plaintext)."""
    update_state(paths, lambda s: replace(s, tls=dict(tls)))


def pidfile_pids(paths: StatePaths) -> dict[int, str]:
    """Pids from the pid files the processes wrote themselves, with their labels."""
    found: dict[int, str] = {}
    if not paths.pid_dir.is_dir():
        return found
    for f in paths.pid_dir.glob("*.pid"):
        try:
            found[int(f.read_text().strip())] = f.stem
        except (OSError, ValueError):
            continue  # a pid file being written right now, or one the process never finished: nothing to kill
    return found


def list_lab_names(root: Path = DEFAULT_ROOT) -> tuple[str, ...]:
    """Names of every lab with a state file under ``root``."""
    if not root.is_dir():
        return ()
    return tuple(sorted(p.stem for p in root.glob("*.json") if NAME_PATTERN.match(p.stem)))


def forget(paths: StatePaths) -> None:
    """Remove the record itself (the very last step of ``down``), and temp files a crash left mid-write."""
    leftovers = list(paths.root.glob(f".{paths.state_file.name}.*.tmp")) if paths.root.is_dir() else []
    for p in (*leftovers, paths.state_file, paths.lock_file):
        p.unlink(missing_ok=True)


__all__ = [
    "DEFAULT_ROOT",
    "LabState",
    "LabStateError",
    "ProcessRecord",
    "StatePaths",
    "TlsPaths",
    "add_namespace",
    "add_process",
    "create_state",
    "forget",
    "list_lab_names",
    "now_iso",
    "pidfile_pids",
    "read_state",
    "remove_processes",
    "set_phase",
    "set_tls",
    "update_state",
]
