"""Atomic file writes: a failure never leaves half a report or policy behind."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from ringfence.errors import RingfenceError


def write_atomic(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temp file in the same directory, fsync, rename."""
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=".tmp")
        try:
            # mkstemp creates 0600; a report or policy should get the usual umask-based mode.
            umask = os.umask(0)
            os.umask(umask)
            os.fchmod(fd, 0o666 & ~umask)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, p)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise RingfenceError(f"cannot write {p}: {exc.strerror or exc}") from exc


__all__ = ["write_atomic"]
