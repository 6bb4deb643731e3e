"""tinyproxy's log (``LogFile``, ``LogLevel Info``; 1.11) → egress gateway decisions.

tinyproxy writes one line per step of a connection, each ``LEVEL MON DD HH:MM:SS.mmm [PID]: MESSAGE``::

    CONNECT   Dec 01 15:51:26.945 [28999]: Connect (file descriptor 5): 127.0.0.3
    NOTICE    Dec 01 15:51:26.948 [28999]: Unauthorized connection from "127.0.0.3".
    CONNECT   Dec 01 15:51:26.977 [28999]: Request (file descriptor 5): CONNECT 10.1.2.3:19000 HTTP/1.1
    NOTICE    Dec 01 15:51:26.978 [28999]: Proxying refused on filtered domain "10.1.2.3"
    INFO      Dec 01 15:51:34.983 [29207]: Refused CONNECT method on port 22
    CONNECT   Dec 01 15:51:26.992 [28999]: Established connection to host "127.0.0.1" using file descriptor 6.

The client's address is on the ``Connect`` line only, the destination on the ``Request`` line (keyed by the
client's file descriptor), and the decision on a later line that names neither fd nor client (except the
``Unauthorized`` one, which names the client). One thread per connection interleaves them, so the reader
follows each fd's open connection and ties a decision to the newest open request it names (host, or CONNECT
port). A decision is ``deny`` (``unauthorized client``: no ``Allow`` for it — tinyproxy refuses before reading
a request, so no destination; ``filtered destination``; ``port not allowed``) or ``allow`` (``established``).

**tinyproxy logs no byte counts**: ``bytes`` is always null here; the volume of an egress comes from the site's
capture (payload bytes between client, gateway and destination) or conntrack accounting.

The time has no year and is the host's local time, taken as UTC (as for dnsmasq): the year is the file's last
change's, a month after that one meaning the year before. Lines of no tinyproxy log are skipped with a warning
naming them; tinyproxy's own chatter (start-up, ``opensock``, ``Closed connection``) is known and kept quiet.
Memory is bounded: blocks of lines, and at most :data:`MAX_OPEN` open connections followed at once.
"""

from __future__ import annotations

import ipaddress
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import pyarrow as pa

from ringfence.observe.flows._common import WarningLog, iter_line_blocks
from ringfence.observe.flows.events._logfile import start_log, warn_skipped
from ringfence.observe.flows.events.interface import GATEWAY_SCHEMA, EventResult

MONTHS: Final = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
#: open connections followed at once; a log that opens more without ending them drops the oldest, said so
MAX_OPEN: Final = 4096
HEAD: Final = re.compile(
    r"^(?P<level>CONNECT|NOTICE|INFO|WARNING|ERROR|CRITICAL|DEBUG) {1,12}(?P<mon>[A-Z][a-z]{2}) (?P<day>[0-9]{2}) "
    r"(?P<hms>[0-9]{2}:[0-9]{2}:[0-9]{2})\.(?P<ms>[0-9]{3}) \[(?P<pid>[0-9]{1,10})\]: (?P<msg>.{0,2000})$")
_ADDR = r"[0-9A-Fa-f.:]{2,45}"
CONNECT: Final = re.compile(rf"^Connect \(file descriptor (?P<fd>[0-9]{{1,9}})\): (?P<client>{_ADDR})$")
REQUEST: Final = re.compile(r"^Request \(file descriptor (?P<fd>[0-9]{1,9})\): (?P<method>[A-Z]{1,16}) "
                            r"(?P<target>\S{1,1000}) HTTP/[0-9]\.[0-9]$")
UNAUTHORIZED: Final = re.compile(rf'^Unauthorized connection from "(?P<client>{_ADDR})"\.$')
FILTERED: Final = re.compile(r'^Proxying refused on filtered domain "(?P<host>[^"\s]{1,255})"$')
BAD_PORT: Final = re.compile(r"^Refused CONNECT method on port (?P<port>[0-9]{1,5})$")
ESTABLISHED: Final = re.compile(
    r'^Established connection to host "(?P<host>[^"\s]{1,255})" using file descriptor [0-9]{1,9}\.$')
CLOSED: Final = re.compile(r"^Closed connection between local client \(fd:(?P<fd>[0-9]{1,9})\)")
_URL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]{0,15}://(?P<host>\[[0-9A-Fa-f:.]{2,45}\]|[^/:\s]{1,255})"
                  r"(?::(?P<port>[0-9]{1,5}))?(?:/|$)")
_HOSTPORT = re.compile(r"^(?P<host>\[[0-9A-Fa-f:.]{2,45}\]|[^/:\s]{1,255}):(?P<port>[0-9]{1,5})$")


def _target(method: str, target: str) -> tuple[str, int] | None:
    """(host, port) a request asks for: ``host:port`` for CONNECT, an absolute URL otherwise."""
    m = (_HOSTPORT if method == "CONNECT" else _URL).match(target)
    if m is None:
        return None
    port = int(m["port"]) if m["port"] else (443 if target.lower().startswith("https:") else 80)
    return (m["host"].strip("[]"), port) if 0 < port <= 65535 else None


def _canonical(address: str) -> str | None:
    try:
        return str(ipaddress.ip_address(address))
    except ValueError:
        return None


class TinyproxyReader:
    """Reads a tinyproxy log into :data:`GATEWAY_SCHEMA` decisions (one per refused or established request)."""

    name = "tinyproxy"
    schema = GATEWAY_SCHEMA

    def __init__(self, year: int | None = None) -> None:
        self.year = year

    def read(self, path: Path, *, node: str | None = None) -> EventResult:
        """Every decision; lines of no tinyproxy log are skipped with a warning naming them."""
        start = start_log(path, self.year)  # our error, naming the file, on an unreadable one
        warnings = WarningLog()
        rows: list[dict[str, Any]] = []
        open_: dict[int, dict[str, Any]] = {}  # client fd → its connection (dicts keep insertion order)
        bad: list[int] = []
        records = 0
        dropped = 0
        for first, block in iter_line_blocks(path, warnings=warnings):
            for i, raw in enumerate(block.split(b"\n")):
                if not raw.strip():
                    continue
                records += 1
                number = first + i
                try:
                    text = raw.rstrip(b"\r").decode("utf-8")
                except UnicodeDecodeError:
                    bad.append(number)
                    continue
                head = HEAD.match(text)
                if head is None or head["mon"] not in MONTHS:
                    bad.append(number)
                    continue
                mon = MONTHS.index(head["mon"]) + 1
                hh, mm, ss = (int(x) for x in head["hms"].split(":"))
                try:
                    when = datetime(start.year_of(mon), mon, int(head["day"]), hh, mm, ss,
                                    int(head["ms"]) * 1000, tzinfo=UTC)
                except ValueError:
                    bad.append(number)
                    continue
                dropped += _step(head["msg"], when, number, open_, rows)
        warn_skipped(warnings, path, bad, "not a tinyproxy log line")
        if dropped:
            warnings.add(f"{path}: {dropped} connection(s) forgotten unfinished: more than {MAX_OPEN} open at once")
        n = len(rows)
        table = pa.table({
            "time": pa.array([r["time"] for r in rows], pa.timestamp("ns", tz="UTC")),
            "client": pa.array([r.get("client") for r in rows], pa.string()),
            "host": pa.array([r.get("host") for r in rows], pa.string()),
            "port": pa.array([r.get("port") for r in rows], pa.int32()),
            "method": pa.array([r.get("method") for r in rows], pa.string()),
            "decision": pa.array([r["decision"] for r in rows], pa.string()),
            "reason": pa.array([r["reason"] for r in rows], pa.string()),
            "bytes": pa.array([None] * n, pa.int64()),  # tinyproxy logs none (see the module docstring)
            "node": pa.array([node] * n, pa.string()),
            "line": pa.array([r["line"] for r in rows], pa.int64()),
            "source": pa.array([str(path)] * n, pa.string()),
        })
        return EventResult(table.cast(GATEWAY_SCHEMA), warnings.freeze(), records)


def _newest(open_: dict[int, dict[str, Any]], **want: Any) -> int | None:
    """The fd of the newest open connection whose request matches ``want`` (host=…, port=…, method=…)."""
    for fd in reversed(open_):
        c = open_[fd]
        if all(c.get(k) == v for k, v in want.items()):
            return int(fd)
    return None


def _step(msg: str, when: datetime, number: int, open_: dict[int, dict[str, Any]],
          rows: list[dict[str, Any]]) -> int:
    """Follow one message; append a decision when it is one. Returns connections forgotten (over the bound)."""
    if m := CONNECT.match(msg):
        open_.pop(int(m["fd"]), None)  # a reused fd: the connection it held has ended
        open_[int(m["fd"])] = {"client": _canonical(m["client"])}
        if len(open_) > MAX_OPEN:
            del open_[next(iter(open_))]
            return 1
        return 0
    if m := UNAUTHORIZED.match(msg):
        client = _canonical(m["client"])
        fd = _newest(open_, client=client, method=None)
        if fd is not None:
            del open_[fd]
        rows.append({"time": when, "client": client, "decision": "deny", "reason": "unauthorized client",
                     "line": number})
        return 0
    if m := REQUEST.match(msg):
        fd = int(m["fd"])
        conn = open_.setdefault(fd, {"client": None})
        conn["method"] = m["method"]
        target = _target(m["method"], m["target"])
        conn["host"], conn["port"] = target if target is not None else (None, None)
        return 0
    decided: tuple[dict[str, Any], str, str] | None = None
    if m := FILTERED.match(msg):
        decided = ({"host": m["host"]}, "deny", "filtered destination")
    elif m := BAD_PORT.match(msg):
        decided = ({"method": "CONNECT", "port": int(m["port"])}, "deny", "port not allowed")
    elif m := ESTABLISHED.match(msg):
        decided = ({"host": m["host"], "decided": None}, "allow", "established")
    elif m := CLOSED.match(msg):
        open_.pop(int(m["fd"]), None)
        return 0
    if decided is not None:
        want, decision, reason = decided
        fd = _newest(open_, **want)
        conn = open_.pop(fd) if fd is not None and decision == "deny" else (open_.get(fd, {}) if fd is not None
                                                                          else {})
        if fd is not None and decision == "allow":
            conn["decided"] = True
        rows.append({"time": when, "client": conn.get("client"), "host": conn.get("host") or want.get("host"),
                     "port": conn.get("port") or want.get("port"), "method": conn.get("method"),
                     "decision": decision, "reason": reason, "line": number})
    return 0  # anything else with a tinyproxy head is tinyproxy's own chatter


__all__ = ["MAX_OPEN", "MONTHS", "TinyproxyReader"]
