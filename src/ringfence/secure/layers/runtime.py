"""What the encryption layers enabled on a site, and how they start and stop things on its hosts.

:class:`StateStore` is the controller's record, one JSON file per site (``<root>/<site>/state.json``,
rewritten atomically): every process a layer started (pid, node, label, argv), every nftables table
it added (node, family, name) and which layer protects which class, so ``disable`` — from any
process — undoes it. :class:`Runtime` acts on the site's hosts through their executors only
(:mod:`ringfence.targets.ops`): a lab namespace, an SSH host and this machine are driven alike.

On each host a layer's files live under ``<root>/<site>/hosts/<node>/`` (:meth:`Runtime.host_dir`);
every process's command line names ``<root>/<site>/``, and a process is signalled only while it
still does — a recycled pid is never touched.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from ringfence.atomic import write_atomic
from ringfence.secure.layers.interface import LayerError
from ringfence.targets import ops
from ringfence.targets.interface import Executor, Site, TargetError

#: Where layer state of sites lives (tmpfs, next to the labs' own state).
SECURE_ROOT = Path("/run/ringfence/secure")


@dataclass(frozen=True)
class LayerProcess:
    """A process a layer started on a node."""

    pid: int
    node: str
    label: str
    layer: str
    argv: tuple[str, ...]


@dataclass(frozen=True)
class NftTable:
    """An nftables table a layer added on a node."""

    node: str
    family: str
    name: str
    layer: str


@dataclass(frozen=True)
class LayerState:
    """Everything enabled on one site."""

    lab: str  # the site's name (the key kept for state files written before sites)
    classes: dict[str, str] = field(default_factory=dict)  # class -> layer
    nodes: dict[str, list[str]] = field(default_factory=dict)  # layer -> nodes it runs on
    processes: tuple[LayerProcess, ...] = ()
    tables: tuple[NftTable, ...] = ()
    info: dict[str, Any] = field(default_factory=dict)  # per-layer public facts (fingerprints, public keys)


class StateStore:
    """Read and rewrite one site's layer record; the directory also holds the controller's layer files."""

    def __init__(self, site: str, root: Path = SECURE_ROOT) -> None:
        self.lab = site
        self.root = root
        self.directory = root / site
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
        try:
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
        except (KeyError, TypeError, AttributeError) as exc:
            raise LayerError(f"layer state {self.path} is malformed ({exc!r}); remove it after checking the hosts") \
                from exc

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

    def forget(self) -> None:
        """Remove the record and the controller's layer files (after everything was stopped)."""
        if self.read().processes:
            raise LayerError(f"{self.lab} still has layer processes; disable its layers first")
        shutil.rmtree(self.directory, ignore_errors=True)


class Runtime:
    """Start, stop and configure on the hosts of ``site``, recording everything in ``store``."""

    def __init__(self, site: Site, store: StateStore | None = None) -> None:
        self.site = site
        self.store = store or StateStore(site.name)
        self.marker = self.store.marker

    def host_dir(self, node: str) -> str:
        """The directory on ``node`` that holds the layers' files there (named by every process we start)."""
        return f"{self.store.directory}/hosts/{node}"

    def executor(self, node: str) -> Executor:
        """The executor reaching ``node``."""
        return self.site.executor(node)

    def python(self, node: str, module: str, *args: str) -> tuple[list[str], dict[str, str]]:
        """(argv, env) that run ``python -m module args`` on ``node``."""
        host = self.site.host(node)
        return [*host.python, "-m", module, *args], dict(host.env)

    def put(self, node: str, path: str, data: bytes, *, mode: int = 0o600) -> None:
        """Write a file on ``node`` (atomically, ``mode`` before it appears)."""
        try:
            ops.write_file(self.executor(node), path, data, mode=mode)
        except TargetError as exc:
            raise LayerError(exc.message) from exc

    def get(self, node: str, path: str) -> bytes | None:
        """A file's bytes on ``node`` (None when it does not exist)."""
        try:
            return ops.read_file(self.executor(node), path)
        except TargetError as exc:
            raise LayerError(exc.message) from exc

    def run(self, node: str, argv: Sequence[str], *, what: str, stdin: bytes | None = None,
            timeout: float = 20.0) -> str:
        """Run a helper on ``node``; :class:`LayerError` naming ``what`` when it fails. Returns stdout."""
        try:
            res = self.executor(node).run(list(argv), stdin=stdin, timeout=timeout, env={"LC_ALL": "C"})
        except TargetError as exc:
            raise LayerError(f"{what}: {exc.message}") from exc
        if res.timed_out or res.returncode != 0:
            why = "timed out" if res.timed_out else res.stderr.decode(errors="replace").strip()
            raise LayerError(f"{what}: {' '.join(list(argv)[:6])} failed on {node}: {why}")
        return res.stdout.decode(errors="replace")

    def spawn(self, node: str, label: str, layer: str, argv: list[str], env: Mapping[str, str] | None = None) -> int:
        """Start ``argv`` detached on ``node`` (its command line must name the site's directory) and record it."""
        if not any(self.marker in a for a in argv):
            raise LayerError(f"refusing to start {label}: its command line must name {self.store.directory}")
        base = self.host_dir(node)
        try:
            pid = ops.start_daemon(self.executor(node), argv, marker=self.marker, pidfile=f"{base}/pids/{label}.pid",
                                   log=f"{base}/logs/{label}.log", env={**self.site.host(node).env, **(env or {})})
        except TargetError as exc:
            raise LayerError(exc.message) from exc
        st = self.store.read()
        self.store.write(replace(st, processes=(*st.processes, LayerProcess(pid, node, label, layer, tuple(argv)))))
        return pid

    def log_tail(self, node: str, label: str, size: int = 800) -> str:
        """The end of a process's log on its node."""
        try:
            data = self.get(node, f"{self.host_dir(node)}/logs/{label}.log")
        except LayerError as exc:
            return f"(log unreadable: {exc.message})"
        return "(no log)" if data is None else data.decode(errors="replace")[-size:]

    def stop(self, *, layer: str | None = None, labels: set[str] | None = None) -> list[str]:
        """Stop recorded processes (of ``layer`` / with ``labels``, or all); returns the labels stopped."""
        st = self.store.read()
        chosen = [
            p for p in st.processes if (layer is None or p.layer == layer) and (labels is None or p.label in labels)
        ]
        left: set[tuple[str, int]] = set()
        for node in sorted({p.node for p in chosen}):
            pids = [p.pid for p in chosen if p.node == node]
            try:
                left |= {(node, pid) for pid in ops.stop_daemons(self.executor(node), pids, marker=self.marker)}
            except TargetError as exc:
                raise LayerError(f"cannot stop {layer or 'layer'} processes on {node}: {exc.message}") from exc
        if left:
            raise LayerError(f"processes {sorted(left)} of {self.site.name}'s layers did not stop")
        gone = {(p.node, p.pid) for p in chosen}
        st = self.store.read()
        self.store.write(replace(st, processes=tuple(p for p in st.processes if (p.node, p.pid) not in gone)))
        return [p.label for p in chosen]

    def alive(self, label: str) -> int | None:
        """The pid of the recorded process ``label`` if it still runs, else None."""
        for p in self.store.read().processes:
            if p.label == label:
                try:
                    running = ops.alive(self.executor(p.node), [p.pid], marker=self.marker)
                except TargetError as exc:
                    raise LayerError(exc.message) from exc
                return p.pid if running else None
        return None

    def add_table(self, table: NftTable, ruleset: str) -> None:
        """Load ``ruleset`` (which must create ``table``) on its node in one transaction and record the table."""
        st = self.store.read()
        self.store.write(replace(st, tables=(*[t for t in st.tables if t != table], table)))  # recorded first
        self.run(table.node, ["nft", "-f", "-"], stdin=ruleset.encode(), what=f"nft on {table.node} refused the "
                 "ruleset")

    def drop_tables(self, *, layer: str | None = None) -> None:
        """Delete the recorded tables (of ``layer``, or all); a table already gone is fine."""
        st = self.store.read()
        for t in st.tables:
            if layer is None or t.layer == layer:
                try:
                    self.executor(t.node).run(["nft", "delete", "table", t.family, t.name], timeout=20)
                except TargetError as exc:
                    raise LayerError(f"cannot remove table {t.name} on {t.node}: {exc.message}") from exc
        self.store.write(replace(st, tables=tuple(t for t in st.tables if layer is not None and t.layer != layer)))

    def forget(self) -> None:
        """Remove the hosts' layer directories, then the record (after everything was stopped)."""
        if self.store.read().processes:
            raise LayerError(f"{self.site.name} still has layer processes; disable its layers first")
        for node in sorted(self.site.hosts):
            try:
                ops.remove_tree(self.executor(node), self.host_dir(node))
            except TargetError as exc:
                raise LayerError(f"cannot remove the layer files on {node}: {exc.message}") from exc
        self.store.forget()


def run_local(argv: list[str], *, what: str, timeout: float = 20.0, stdin: bytes | None = None) -> str:
    """Run a helper on the controller itself (key generation); :class:`LayerError` naming ``what``."""
    from ringfence.targets.local import LocalExecutor

    try:
        res = LocalExecutor(name="controller").run(argv, stdin=stdin, timeout=timeout, env={"LC_ALL": "C"})
    except TargetError as exc:
        raise LayerError(f"{what}: {exc.message}") from exc
    if res.timed_out or res.returncode != 0:
        raise LayerError(f"{what}: {' '.join(argv[:6])} failed: {res.stderr.decode(errors='replace').strip()}")
    return res.stdout.decode(errors="replace")


__all__ = ["SECURE_ROOT", "LayerProcess", "LayerState", "NftTable", "Runtime", "StateStore", "run_local"]
