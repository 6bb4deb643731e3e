"""Atomic file writes: a failure never leaves half a report or policy behind.

Only a regular file (or a path that does not exist yet) is replaced by rename: renaming over a
device node or a FIFO would turn ``-o /dev/null`` into a regular file for every later user of the
machine. Those are written in place instead. A symlink is followed only while its target stays in
the directory the user named, so ``-o out/report.json`` cannot be redirected to ``/etc/…`` by a
link someone planted there.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from ringfence.errors import RingfenceError


def write_atomic(path: str | Path, data: bytes, *, mode: int | None = None) -> None:
    """Write ``data`` to ``path``: temp file, fsync, rename for files; in place for devices and FIFOs.

    ``mode`` (e.g. ``0o600`` for key material) is the new file's permission; default: 0666 less the umask.
    """
    p = Path(path)
    try:
        target = _resolve_target(p)
        try:
            st = os.stat(target)
        except FileNotFoundError:
            st = None
        if st is not None and not stat.S_ISREG(st.st_mode):
            if stat.S_ISDIR(st.st_mode):
                raise RingfenceError(f"cannot write {p}: it is a directory", hint="name a file, not a directory")
            _write_in_place(target, data)
            return
        _replace(target, data, mode)
    except OSError as exc:
        raise RingfenceError(f"cannot write {p}: {exc.strerror or exc}") from exc


def _resolve_target(p: Path) -> Path:
    """The path to write: ``p`` itself, or the file its symlink names inside ``p``'s directory.

    A link is resolved (so the rename replaces the link's target, not the link) only when the target
    lies in the link's own directory or below it; a link leading elsewhere is refused. Special files
    such as ``/dev/stdout`` → ``/proc/self/fd/1`` are written in place, so they are allowed.
    """
    if not p.is_symlink():
        return p
    real = p.resolve()
    base = p.parent.resolve()
    if real == base or base in real.parents:
        return real
    try:
        st = os.stat(real)
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode):
        return real  # /dev/stdout and the like: written in place, nothing is replaced
    raise RingfenceError(
        f"cannot write {p}: it is a symlink to {real}, outside {base}",
        hint="remove the link or name the file it points to directly",
    )


def _write_in_place(target: Path, data: bytes) -> None:
    """Write to an existing device or FIFO without truncating or replacing the node."""
    # O_WRONLY without O_CREAT/O_TRUNC: a character device or FIFO is opened, never re-created.
    fd = os.open(target, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
    finally:
        os.close(fd)


def _replace(p: Path, data: bytes, mode: int | None) -> None:
    """Temp file in the same directory, fsync, rename over ``p`` (a regular file or a new path)."""
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=".tmp")
    try:
        # mkstemp creates 0600; a report or policy should get the usual umask-based mode.
        if mode is None:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


__all__ = ["write_atomic"]
