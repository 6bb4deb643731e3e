"""How much memory a DuckDB connection may use, and where it spills what does not fit.

Every connection ringfence opens for analysis gets both, so an analysis over a flow dataset larger than
memory streams its Parquet input and spills its hash tables and sorts to disk instead of being killed:

* **memory limit** — ``--memory-limit`` on the verbs that analyse flows, else ``RINGFENCE_DUCKDB_MEMORY``,
  else half of this machine's memory (or of the cgroup's limit, in a container). Half, not DuckDB's own
  80 %: the same process also holds the Arrow tables the analysis starts from and returns.
* **spill directory** — ``--spill-dir``, else ``RINGFENCE_DUCKDB_SPILL``, else the system temporary
  directory. Each connection spills into its own fresh subdirectory there, removed when it closes, so
  concurrent analyses never share files and nothing is left behind.
* **threads** — ``RINGFENCE_THREADS``, else one per core, but never more than the limit gives 125 MB each:
  under a small limit each thread's own hash tables would exhaust it rather than spill.

Sizes are written the way DuckDB writes them: ``64MB``, ``1.5GB`` (powers of 1000), ``512MiB``, ``4GiB``
(powers of 1024), or ``40%`` of the machine's memory.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

from ringfence.errors import InputError

#: Environment variables that set the defaults for every connection (a flag on a verb overrides them).
MEMORY_ENV = "RINGFENCE_DUCKDB_MEMORY"
SPILL_ENV = "RINGFENCE_DUCKDB_SPILL"

#: Share of the machine's memory a connection may use when nothing says otherwise.
DEFAULT_SHARE = 0.5
#: Below this DuckDB cannot run even a small aggregation with a couple of threads.
MIN_LIMIT = 16 * 1000**2
#: Memory each DuckDB thread needs to spill rather than fail (DuckDB's tuning guide: at least 125 MB a thread;
#: measured here: a 64 MB limit with 2 threads failed a text-keyed group-by one run in two, with 1 never).
PER_THREAD = 125 * 1000**2

_UNITS = {
    "b": 1, "kb": 1000, "mb": 1000**2, "gb": 1000**3, "tb": 1000**4,
    "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4,
}  # fmt: skip
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*|%)\s*$", re.IGNORECASE)


#: Where a container's memory limit is read: cgroup v2, then v1 ("max" or a huge number mean none).
_CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


def machine_memory() -> int:
    """Bytes of memory this process can have: physical memory, capped by a cgroup limit if one is set."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for path in _CGROUP_LIMITS:
        try:
            raw = Path(path).read_text().strip()
        except OSError:
            continue
        return min(total, int(raw)) if raw.isdigit() else total
    return total


def parse_size(text: str, where: str) -> int:
    """``64MB``, ``4GiB``, ``40%`` … → bytes. ``where`` names the flag or variable for the error."""
    m = _SIZE.match(text)
    unit = m.group(2).lower() if m else ""
    if m is None or (unit != "%" and unit not in _UNITS) or not unit:
        raise InputError(
            where, f"not a memory size: {text!r}", hint="write e.g. 64MB, 512MiB, 8GB or 40% (of this machine's memory)"
        )
    value = float(m.group(1))
    if unit == "%":
        if not 0 < value <= 100:
            raise InputError(where, f"a share of memory must lie in (0, 100]%, not {text!r}")
        size = int(machine_memory() * value / 100)
    else:
        size = int(value * _UNITS[unit])
    if size < MIN_LIMIT:
        raise InputError(where, f"{text!r} is too little memory for the analysis", hint="give at least 16MB")
    return size


def memory_limit(explicit: int | None) -> int:
    """The limit in bytes: ``explicit``, else ``RINGFENCE_DUCKDB_MEMORY``, else half of the machine's memory."""
    if explicit is not None:
        return explicit
    raw = os.environ.get(MEMORY_ENV, "").strip()
    if raw:
        return parse_size(raw, MEMORY_ENV)
    return max(MIN_LIMIT, int(machine_memory() * DEFAULT_SHARE))


def threads_for(limit: int, wanted: int) -> int:
    """How many threads a connection with ``limit`` bytes runs: ``wanted``, but no more than the limit
    gives each its :data:`PER_THREAD` share (at least one). Each thread keeps its own hash tables and
    buffers; too many threads under a small limit run out of memory instead of spilling."""
    return max(1, min(wanted, limit // PER_THREAD))


class SpillDir:
    """A fresh directory for one connection's spill files, under ``parent`` (or the variable's, or the
    system temporary directory); :meth:`remove` deletes it and everything in it."""

    def __init__(self, parent: str | None, *, engine: str = "duckdb") -> None:
        where = "--spill-dir" if parent else SPILL_ENV
        base = parent or os.environ.get(SPILL_ENV, "").strip() or tempfile.gettempdir()
        try:
            Path(base).mkdir(parents=True, exist_ok=True)
            self.path = Path(tempfile.mkdtemp(prefix=f"ringfence-{engine}-", dir=base))
        except OSError as exc:
            raise InputError(
                f"{where} {base}", f"cannot make a spill directory there: {exc.strerror or exc}",
                hint="give a writable directory on a disk with room for the analysis's overflow",
            ) from exc

    def remove(self) -> None:
        """Delete the directory (the connection is closed: its files are no longer in use)."""
        shutil.rmtree(self.path, ignore_errors=True)


def duckdb_size(size: int) -> str:
    """Bytes as DuckDB's ``SET memory_limit`` takes them."""
    return f"{max(1, size // 1024)}KiB"


__all__ = [
    "MEMORY_ENV",
    "SPILL_ENV",
    "SpillDir",
    "duckdb_size",
    "machine_memory",
    "memory_limit",
    "parse_size",
    "threads_for",
]
