"""Egress-gateway facts: the gateway's own access log (tinyproxy ``LogFile``), one decision per request.

The log is read with :class:`ringfence.observe.flows.events.tinyproxy.TinyproxyReader` (hostile lines skipped
with a warning); the decisions are judged by the ``egress`` control against the policy's gateway
(:mod:`ringfence.enforce.egress_gateway`). The facts' age is the newest decision's time: a log whose last
record is old proves nothing about today's egress.
"""

from __future__ import annotations

import os
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

from ringfence.facts.interface import FactsFileError, Loaded, read_bytes
from ringfence.observe.flows.events.interface import TelemetryError
from ringfence.observe.flows.interface import FlowSourceError

HINT = ("give the egress gateway's access log, e.g. the lab's: ringfence assess POLICY --captures C "
        "--gateway-log /run/ringfence/labs/NAME/telemetry/mgmt/tinyproxy.log")


def _rows(path: Path, name: str) -> tuple[list[dict[str, Any]], tuple[str, ...]]:
    from ringfence.observe.flows.events.tinyproxy import TinyproxyReader

    try:
        result = TinyproxyReader().read(path)
    except (TelemetryError, FlowSourceError) as exc:
        raise FactsFileError(name, exc.message.removeprefix(f"{path}: "), hint=HINT) from exc
    rows = result.events.to_pylist()
    for r in rows:
        t = r["time"]
        r["time"] = t.isoformat() if isinstance(t, datetime) else str(t)
        r["source"] = name  # the file the user gave, not the spooled copy
    return rows, tuple(w.replace(str(path), name) for w in result.warnings)


def load(path: str | Path, data: bytes | None = None) -> Loaded:
    """``Facts.gateway``: the log's decisions (``time``, ``client``, ``host``, ``port``, ``decision``, ``reason``,
    ``bytes`` — always null, tinyproxy logs none); its age is the newest decision's time."""
    raw = read_bytes(path, "egress gateway log") if data is None else data
    # the reader wants a file (it streams blocks and dates lines by the file's year): bytes from a store
    # are spooled to a private temporary one
    fd, tmp = tempfile.mkstemp(prefix="ringfence-gateway-", suffix=".log")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(raw)
        if data is None:
            st = Path(path).stat()
            os.utime(tmp, (st.st_atime, st.st_mtime))  # the year of the lines is the original file's
        rows, warnings = _rows(Path(tmp), str(path))
    except OSError as exc:
        raise FactsFileError(str(path), f"cannot read the egress gateway log: {exc.strerror or exc}") from exc
    finally:
        Path(tmp).unlink(missing_ok=True)
    if raw.strip() and not rows and warnings:
        raise FactsFileError(str(path), f"no tinyproxy decision in it ({warnings[0]})", hint=HINT)
    times = [datetime.fromisoformat(r["time"]) for r in rows]
    return Loaded("gateway", str(path), rows, max(times) if times else None)


__all__ = ["HINT", "load"]
