"""tinyproxy log reader: each refused or established request with its client, destination and reason; the
year tinyproxy does not write; hostile input skipped with a warning naming the line."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ringfence.observe.flows.events.interface import GATEWAY_SCHEMA
from ringfence.observe.flows.events.registry import reader
from ringfence.observe.flows.events.tinyproxy import MAX_OPEN, TinyproxyReader
from ringfence.observe.flows.interface import FlowSourceError

# As tinyproxy 1.11.1 (Debian tinyproxy-bin) wrote them here, LogLevel Info, on loopback: an unauthorized
# client, a filtered CONNECT, a refused CONNECT port, an established CONNECT, a forwarded PUT and its end.
LOG = """NOTICE    Dec 01 15:51:34.288 [29207]: Initializing tinyproxy ...
INFO      Dec 01 15:51:34.288 [29207]: Added address [127.0.0.1] to listen addresses.
INFO      Dec 01 15:51:34.289 [29207]: Adding Port [19000] to the list allowed by CONNECT
WARNING   Dec 01 15:51:26.157 [28999]: You SHOULD set a UserName in the config file. Using current user instead.
INFO      Dec 01 15:51:34.289 [29207]: Starting main loop. Accepting connections.
CONNECT   Dec 01 15:51:34.981 [29207]: Connect (file descriptor 5): 127.0.0.3
NOTICE    Dec 01 15:51:34.982 [29207]: Unauthorized connection from "127.0.0.3".
INFO      Dec 01 15:51:34.982 [29207]: Read request entity of 59 bytes
CONNECT   Dec 01 15:51:26.972 [28999]: Connect (file descriptor 5): 127.0.0.2
CONNECT   Dec 01 15:51:26.977 [28999]: Request (file descriptor 5): CONNECT 10.1.2.3:19000 HTTP/1.1
NOTICE    Dec 01 15:51:26.978 [28999]: Proxying refused on filtered domain "10.1.2.3"
CONNECT   Dec 01 15:51:34.983 [29207]: Connect (file descriptor 5): 127.0.0.2
CONNECT   Dec 01 15:51:34.983 [29207]: Request (file descriptor 5): CONNECT 127.0.0.1:22 HTTP/1.1
INFO      Dec 01 15:51:34.983 [29207]: Refused CONNECT method on port 22
CONNECT   Dec 01 15:51:26.985 [28999]: Connect (file descriptor 5): 127.0.0.2
CONNECT   Dec 01 15:51:26.987 [28999]: Request (file descriptor 5): CONNECT 127.0.0.1:19000 HTTP/1.1
CONNECT   Dec 01 15:51:26.992 [28999]: Established connection to host "127.0.0.1" using file descriptor 6.
CONNECT   Dec 01 15:51:34.983 [29207]: Connect (file descriptor 7): 127.0.0.2
CONNECT   Dec 01 15:51:34.983 [29207]: Request (file descriptor 7): PUT http://127.0.0.1:19000/replica/x HTTP/1.1
INFO      Dec 01 15:51:34.984 [29207]: No upstream proxy for 127.0.0.1
INFO      Dec 01 15:51:34.984 [29207]: opensock: opening connection to 127.0.0.1:19000
CONNECT   Dec 01 15:51:34.984 [29207]: Established connection to host "127.0.0.1" using file descriptor 8.
INFO      Dec 01 15:51:34.985 [29207]: Closed connection between local client (fd:7) and remote client (fd:8)
NOTICE    Dec 01 15:51:35.505 [29207]: Shutting down.
"""


def _log(tmp_path: Path, text: str, mtime: float = 1796169600.0) -> Path:  # 2026-12-01
    path = tmp_path / "tinyproxy.log"
    path.write_text(text)
    os.utime(path, (mtime, mtime))
    return path


def test_every_decision_with_client_destination_and_reason(tmp_path: Path) -> None:
    res = TinyproxyReader().read(_log(tmp_path, LOG), node="mgmt")
    assert res.events.schema == GATEWAY_SCHEMA and res.warnings == ()
    rows = [(r["client"], r["host"], r["port"], r["method"], r["decision"], r["reason"])
            for r in res.events.to_pylist()]
    assert rows == [
        ("127.0.0.3", None, None, None, "deny", "unauthorized client"),
        ("127.0.0.2", "10.1.2.3", 19000, "CONNECT", "deny", "filtered destination"),
        ("127.0.0.2", "127.0.0.1", 22, "CONNECT", "deny", "port not allowed"),
        ("127.0.0.2", "127.0.0.1", 19000, "CONNECT", "allow", "established"),
        ("127.0.0.2", "127.0.0.1", 19000, "PUT", "allow", "established"),
    ]
    first = res.events.to_pylist()[0]
    assert first["time"] == datetime(2026, 12, 1, 15, 51, 34, 982000, tzinfo=UTC)
    assert first["node"] == "mgmt" and first["line"] == 7 and first["bytes"] is None  # tinyproxy logs no bytes
    assert res.records == LOG.count("\n")
    assert reader("tinyproxy").name == "tinyproxy"


def test_interleaved_threads_are_tied_by_file_descriptor_and_destination(tmp_path: Path) -> None:
    text = """CONNECT   Dec 01 10:00:00.001 [9]: Connect (file descriptor 5): 10.77.2.10
CONNECT   Dec 01 10:00:00.002 [9]: Connect (file descriptor 6): 10.77.1.13
CONNECT   Dec 01 10:00:00.003 [9]: Request (file descriptor 6): CONNECT 10.77.8.8:443 HTTP/1.0
CONNECT   Dec 01 10:00:00.004 [9]: Request (file descriptor 5): CONNECT 10.77.9.10:9000 HTTP/1.1
NOTICE    Dec 01 10:00:00.005 [9]: Proxying refused on filtered domain "10.77.8.8"
CONNECT   Dec 01 10:00:00.006 [9]: Established connection to host "10.77.9.10" using file descriptor 7.
"""
    rows = TinyproxyReader().read(_log(tmp_path, text)).events.to_pylist()
    assert [(r["client"], r["host"], r["decision"]) for r in rows] == [
        ("10.77.1.13", "10.77.8.8", "deny"), ("10.77.2.10", "10.77.9.10", "allow")]


def test_the_year_is_the_files_and_december_in_january_is_last_year(tmp_path: Path) -> None:
    line = 'NOTICE    Dec 31 23:59:59.000 [1]: Unauthorized connection from "10.0.0.1".\n'
    res = TinyproxyReader().read(_log(tmp_path, line, mtime=1799020800.0))  # 2027-01-04
    assert res.events.column("time")[0].as_py().year == 2026
    assert TinyproxyReader(year=2030).read(_log(tmp_path, line)).events.column("time")[0].as_py().year == 2030


def test_hostile_lines_are_skipped_and_named(tmp_path: Path) -> None:
    text = LOG.splitlines()[5] + "\n" + "GET / HTTP/1.1\n" + "NOTICE    Feb 30 10:00:00.000 [1]: x\n"
    path = _log(tmp_path, text)
    path.write_bytes(path.read_bytes() + b"\xff\xfe not text\n" +
                     b'NOTICE    Dec 01 15:51:34.982 [1]: Unauthorized connection from "10.0.0.999".\n')
    res = TinyproxyReader().read(path)
    assert res.warnings == (f"{path}: 3 line(s) skipped, lines 2, 3, 4: not a tinyproxy log line",)
    # a client address that is none is kept as the decision it is, with no client (never a made-up one)
    assert [(r["client"], r["decision"]) for r in res.events.to_pylist()] == [(None, "deny")]


def test_open_connections_are_bounded(tmp_path: Path) -> None:
    text = "".join(f"CONNECT   Dec 01 10:00:00.000 [9]: Connect (file descriptor {i}): 10.0.0.1\n"
                   for i in range(MAX_OPEN + 3))
    res = TinyproxyReader().read(_log(tmp_path, text))
    assert res.events.num_rows == 0 and any("3 connection(s) forgotten" in w for w in res.warnings)


def test_a_missing_file_is_our_error(tmp_path: Path) -> None:
    with pytest.raises(FlowSourceError, match="nosuch"):
        TinyproxyReader().read(tmp_path / "nosuch.log")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=400))
def test_any_bytes_never_crash(tmp_path: Path, junk: bytes) -> None:
    path = tmp_path / "t.log"
    path.write_bytes(LOG.encode()[: len(junk) % len(LOG)] + junk)
    try:
        res = TinyproxyReader().read(path)
    except FlowSourceError:
        return  # refused as a whole (a file of CR-only lines): our error, naming it
    assert res.events.schema == GATEWAY_SCHEMA
