"""The namespace executor against the running lab: commands run in the node's own network."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ringfence.lab import Lab

pytestmark = [pytest.mark.privileged]


def test_commands_run_inside_the_node_namespace(lab: Lab) -> None:
    ex = lab.executor("storage")
    assert ex.name == "storage" and ex.namespace == f"{lab.name}-storage"
    result = ex.run(["ip", "-o", "-4", "addr", "show"])
    assert result.returncode == 0
    assert b"10.77.2.10/24" in result.stdout and b"10.77.1." not in result.stdout
    assert ex.run(["sh", "-c", 'echo "$RF_X"'], env={"RF_X": "yes"}).stdout == b"yes\n"
    assert ex.run(["cat"], stdin=b"in").stdout == b"in"
    assert ex.run(["sh", "-c", "exit 4"]).returncode == 4
    slow = ex.run(["sleep", "5"], timeout=0.3)
    assert slow.timed_out


def test_zones_are_routed_through_the_fabric(lab: Lab) -> None:
    get = ("import http.client as h; c = h.HTTPConnection('10.77.3.10', 8000, timeout=5); "
           "c.request('GET', '/healthz'); r = c.getresponse(); print(r.status, r.read().decode())")
    result = lab.executor("user").run([sys.executable, "-c", get], timeout=20)
    assert result.stdout.decode().strip() == '200 {"ok": true}', result.stderr
    route = lab.executor("user").run(["ip", "route", "get", "10.77.3.10"]).stdout.decode()
    assert "via 10.77.4.1" in route


def test_spawned_process_stops(lab: Lab, tmp_path: Path) -> None:
    ex = lab.executor("aux")
    proc = ex.spawn(["sleep", "30"], stdout=tmp_path / "out", stderr=tmp_path / "err")
    assert proc.poll() is None
    assert proc.stop(timeout=2) is not None
    assert proc.poll() is not None
