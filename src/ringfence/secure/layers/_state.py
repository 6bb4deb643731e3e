"""What the lab layer drivers enabled: one JSON record per lab, so ``disable`` (from any process) undoes it.

``<root>/<lab>/state.json`` (rewritten atomically) lists every process a layer started (pid, node,
label, argv), every nftables table it added (namespace, family, name) and which layer protects
which class. Processes are started through the lab's own spawner, and stopped only while their
command line still names ``<root>/<lab>/`` — a recycled pid is never signalled.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from ringfence.atomic import write_atomic
from ringfence.lab import procs
from ringfence.lab.topology import LabError
from ringfence.secure.layers.interface import LayerError

#: Where layer state of labs lives (tmpfs, next to the labs' own state).
SECURE_ROOT = Path("/run/ringfence/secure")


@dataclass(frozen=True)
class LayerProcess:
    """A process a layer driver started in a lab node."""

    pid: int
    node: str
    label: str
    layer: str
    argv: tuple[str, ...]


@dataclass(frozen=True)
class NftTable:
    """An nftables table a layer driver added in a namespace."""

    namespace: str
    family: str
    name: str
    layer: str


@dataclass(frozen=True)
class LayerState:
    """Everything enabled in one lab."""

    lab: str
    classes: dict[str, str] = field(default_factory=dict)  # class -> layer
    nodes: dict[str, list[str]] = field(default_factory=dict)  # layer -> nodes it runs on
    processes: tuple[LayerProcess, ...] = ()
    tables: tuple[NftTable, ...] = ()
    info: dict[str, Any] = field(default_factory=dict)  # per-layer public facts (fingerprints, public keys)


class StateStore:
    """Read and rewrite one lab's layer state; the directory also holds the layers' files."""

    def __init__(self, lab: str, root: Path = SECURE_ROOT) -> None:
        self.lab = lab
        self.directory = root / lab
        self.path = self.directory / "state.json"
        self.marker = f"{self.directory}/"

    def read(self) -> LayerState:
        """The current record (empty when nothing was enabled)."""
        try:
            raw = json.loads(self.path.read_text())
        except FileNotFoundError:
            return LayerState(self.lab)
        except (OSError, ValueError) as exc:
            raise LayerError(f"cannot read layer state {self.path}: {exc}") from exc
        return LayerState(
            lab=raw["lab"],
            classes=dict(raw.get("classes", {})),
            nodes={k: list(v) for k, v in raw.get("nodes", {}).items()},
            processes=tuple(
                LayerProcess(p["pid"], p["node"], p["label"], p["layer"], tuple(p["argv"]))
                for p in raw.get("processes", [])
            ),
            tables=tuple(NftTable(**t) for t in raw.get("tables", [])),
            info=dict(raw.get("info", {})),
        )

    def write(self, state: LayerState) -> None:
        """Replace the record atomically."""
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        data = asdict(state)
        write_atomic(self.path, json.dumps(data, indent=1, sort_keys=True).encode())

    def update(self, **changes: Any) -> LayerState:
        """Read, replace fields, write; returns the new record."""
        state = replace(self.read(), **changes)
        self.write(state)
        return state

    def spawn(
        self, namespace: str, node: str, label: str, layer: str, argv: list[str], env: dict[str, str] | None = None
    ) -> int:
        """Start ``argv`` in ``namespace`` (its command line must name this directory) and record it."""
        if not any(self.marker in a for a in argv):
            raise LayerError(f"refusing to start {label}: its command line must name {self.directory}")
        logs = self.directory / "logs"
        try:
            pid = procs.spawn(
                namespace, argv, pidfile=self.directory / "pids" / f"{label}.pid", log=logs / f"{label}.log", env=env
            )
        except LabError as exc:
            raise LayerError(exc.message) from exc
        st = self.read()
        self.write(replace(st, processes=(*st.processes, LayerProcess(pid, node, label, layer, tuple(argv)))))
        return pid

    def stop(self, *, layer: str | None = None, labels: set[str] | None = None) -> list[str]:
        """Stop recorded processes (of ``layer`` / with ``labels``, or all); returns the labels stopped."""
        st = self.read()
        chosen = [
            p for p in st.processes if (layer is None or p.layer == layer) and (labels is None or p.label in labels)
        ]
        _, left = procs.stop({p.pid for p in chosen}, self.marker)
        if left:
            raise LayerError(f"processes {sorted(left)} of lab {self.lab}'s layers did not stop")
        gone = {p.pid for p in chosen}
        self.write(replace(st, processes=tuple(p for p in st.processes if p.pid not in gone)))
        return [p.label for p in chosen]

    def alive(self, label: str) -> int | None:
        """The pid of the recorded process ``label`` if it still runs, else None."""
        for p in self.read().processes:
            if p.label == label and procs.is_ours(p.pid, self.marker):
                return p.pid
        return None

    def add_table(self, table: NftTable, ruleset: str) -> None:
        """Load ``ruleset`` (which must create ``table``) into the namespace atomically and record the table."""
        st = self.read()
        self.write(replace(st, tables=(*[t for t in st.tables if t != table], table)))  # recorded before it exists
        run_nft(table.namespace, ruleset)

    def drop_tables(self, *, layer: str | None = None) -> None:
        """Delete the recorded tables (of ``layer``, or all); a table already gone is fine."""
        st = self.read()
        for t in st.tables:
            if layer is None or t.layer == layer:
                subprocess.run(
                    ["ip", "netns", "exec", t.namespace, "nft", "delete", "table", t.family, t.name],
                    capture_output=True,
                    check=False,
                )
        self.write(replace(st, tables=tuple(t for t in st.tables if layer is not None and t.layer != layer)))

    def forget(self) -> None:
        """Remove the record and the layers' files of this lab (after everything was stopped)."""
        if self.read().processes:
            raise LayerError(f"lab {self.lab} still has layer processes; disable its layers first")
        shutil.rmtree(self.directory, ignore_errors=True)


def run_nft(namespace: str, ruleset: str) -> None:
    """Apply an nftables script in ``namespace`` in one transaction; :class:`LayerError` with nft's message."""
    res = subprocess.run(
        ["ip", "netns", "exec", namespace, "nft", "-f", "-"], input=ruleset.encode(), capture_output=True, check=False
    )
    if res.returncode != 0:
        raise LayerError(f"nft in {namespace} refused the ruleset: {res.stderr.decode(errors='replace').strip()}")


def run(argv: list[str], *, what: str, timeout: float = 20.0, stdin: bytes | None = None) -> str:
    """Run a helper command; :class:`LayerError` naming ``what`` when it fails. Returns stdout."""
    try:
        res = subprocess.run(
            argv, capture_output=True, timeout=timeout, check=False, input=stdin, env={**os.environ, "LC_ALL": "C"}
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LayerError(f"{what}: cannot run {argv[0]}: {exc}") from exc
    if res.returncode != 0:
        raise LayerError(f"{what}: {' '.join(argv[:6])} failed: {res.stderr.decode(errors='replace').strip()}")
    return res.stdout.decode(errors="replace")


__all__ = ["SECURE_ROOT", "LayerProcess", "LayerState", "NftTable", "StateStore", "run", "run_nft"]
