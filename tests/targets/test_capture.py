"""Site capture: every host's egress merged into one pcap; a missing part refuses the whole capture."""

from __future__ import annotations

import os
import struct
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from ringfence.targets.capture import _LEAVE_OUT_OWN_SESSION, capture_site
from ringfence.targets.interface import Host, RunResult, Site, TargetError
from ringfence.targets.ssh import SshExecutor


def _pcap(*stamps: int) -> bytes:
    head = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)
    frame = bytes(60)
    return head + b"".join(struct.pack("<IIII", t, 0, len(frame), len(frame)) + frame for t in stamps)


class TcpdumpHost:
    """Answers the capture command with a pcap (or fails as told); records the argv."""

    def __init__(self, name: str, data: bytes | None = None, code: int = 124, error: str | None = None) -> None:
        self.name, self.data, self.code, self.error = name, data, code, error
        self.argv: list[str] = []

    def run(self, argv: Sequence[str], *, timeout: float = 30.0, stdin: bytes | None = None,
            env: Mapping[str, str] | None = None) -> RunResult:
        if self.error:
            raise TargetError(f"{self.name}: {self.error}")
        self.argv = list(argv)
        return RunResult(tuple(argv), self.code, self.data or b"", b"3 packets captured", 1.0)

    def spawn(self, *a: Any, **k: Any) -> Any:
        raise AssertionError("not used")

    def copy_to(self, local: Path, remote: str) -> None:
        raise AssertionError("not used")

    def copy_from(self, remote: str, local: Path) -> None:
        raise AssertionError("not used")


def _site(**hosts: TcpdumpHost) -> Site:
    return Site("s1", "ssh", {n: Host(n, "192.0.2.1", h, interface="eth0") for n, h in hosts.items()})


def test_every_hosts_egress_is_merged_by_time(tmp_path: Path) -> None:
    a, b = TcpdumpHost("a", _pcap(10, 30)), TcpdumpHost("b", _pcap(20))
    out = capture_site(_site(a=a, b=b), 2, tmp_path / "c.pcap")
    assert out.nodes == ("a", "b") and out.bytes_per_node["a"] > out.bytes_per_node["b"] > 0
    data = out.path.read_bytes()
    stamps, off = [], 24
    while off < len(data):
        sec, _, incl, _ = struct.unpack_from("<IIII", data, off)
        stamps.append(sec)
        off += 16 + incl
    assert stamps == [10, 20, 30]
    # not streamed over SSH: the command as it is, nothing left out
    assert a.argv[:4] == ["timeout", "-s", "INT", "2"] and ["-Q", "out"] == a.argv[7:9] and "eth0" in a.argv
    assert out.left_out == {}


class SshTcpdump(SshExecutor):
    """An SSH host whose session runs the capture's wrapper as sshd would, with $SSH_CONNECTION set."""

    def __init__(self, tmp: Path) -> None:
        super().__init__("192.0.2.7", user="root", key=tmp / "key", known_hosts=tmp / "known", name="n1")
        self.argv: list[str] = []

    def run(self, argv: Sequence[str], *, timeout: float = 30.0, stdin: bytes | None = None,
            env: Mapping[str, str] | None = None) -> RunResult:
        self.argv = list(argv)
        # the wrapper as the host's shell runs it, its command (tcpdump) replaced by `true`; the pcap made here
        res = subprocess.run([*argv[:4], "true"], capture_output=True, timeout=30, check=True,
                             env={"PATH": os.environ["PATH"], "SSH_CONNECTION": "192.0.2.1 40000 192.0.2.7 22"})
        return RunResult(tuple(argv), 124, _pcap(1), res.stderr, 1.0)


def test_over_ssh_the_stream_is_left_out_and_recorded(tmp_path: Path) -> None:
    host = SshTcpdump(tmp_path)
    site = Site("s1", "ssh", {"n1": Host("n1", "192.0.2.7", host, interface="eth0")})
    out = capture_site(site, 2, tmp_path / "c.pcap")
    assert host.argv[:2] == ["sh", "-c"] and host.argv[4:8] == ["timeout", "-s", "INT", "2"]
    expression = "not (tcp and src host 192.0.2.7 and src port 22 and dst host 192.0.2.1 and dst port 40000)"
    assert out.left_out == {"n1": expression}


@pytest.mark.parametrize(
    ("connection", "expression"),
    [
        ("10.77.0.5 50123 10.77.1.10 22",
         "not (tcp and src host 10.77.1.10 and src port 22 and dst host 10.77.0.5 and dst port 50123)"),
        ("fd00::5 40000 fd00::10 2222",
         "not (tcp and src host fd00::10 and src port 2222 and dst host fd00::5 and dst port 40000)"),
        (None, None), ("", None), ("junk", None), ("a b c d", None), ("1 2 3", None), ("1 2 3 4 5", None),
    ],
)
def test_the_session_a_part_streams_back_on_is_left_out_of_it(connection: str | None,
                                                              expression: str | None) -> None:
    """The command each host runs, run here: sshd's $SSH_CONNECTION becomes a filter for that one connection
    (the host's side of it, as the host sends it); anything else leaves the capture whole."""
    env = {"PATH": os.environ["PATH"], **({"SSH_CONNECTION": connection} if connection is not None else {})}
    res = subprocess.run(["sh", "-c", _LEAVE_OUT_OWN_SESSION, "sh", "printf", "<%s>"], env=env,
                         capture_output=True, text=True, timeout=30, check=True)
    assert res.stdout == (f"<{expression}>" if expression else "<>")
    assert res.stderr == (f"ringfence-capture: left out {expression}\n" if expression else "")


def test_what_a_part_left_out_is_recorded(tmp_path: Path) -> None:
    said = ("ringfence-capture: left out not (tcp and src host 10.0.0.2 and src port 22 and dst host 10.0.0.1 and "
            "dst port 5)")

    class Said(TcpdumpHost):
        def run(self, argv: Sequence[str], **kw: Any) -> RunResult:
            got = super().run(argv, **kw)
            return RunResult(got.argv, got.returncode, got.stdout, f"{said}\n3 packets captured".encode(), 1.0)

    out = capture_site(_site(a=Said("a", _pcap(1)), b=TcpdumpHost("b", _pcap(2))), 1, tmp_path / "c.pcap")
    assert out.left_out == {"a": said.removeprefix("ringfence-capture: left out ")}


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        (TcpdumpHost("b", error="ssh to root@b failed: Connection refused"), "Connection refused"),
        (TcpdumpHost("b", b"not a pcap", code=1), "gave no capture"),
    ],
)
def test_a_missing_part_refuses_the_capture(tmp_path: Path, bad: TcpdumpHost, why: str) -> None:
    with pytest.raises(TargetError, match=f"incomplete, so it is not used: .*{why}"):
        capture_site(_site(a=TcpdumpHost("a", _pcap(1)), b=bad), 1, tmp_path / "c.pcap")
    assert not (tmp_path / "c.pcap").exists()


def test_a_host_without_an_interface_is_named(tmp_path: Path) -> None:
    site = Site("s1", "ssh", {"a": Host("a", "192.0.2.1", TcpdumpHost("a", _pcap(1)))})
    with pytest.raises(TargetError, match="a: no interface is known"):
        capture_site(site, 1, tmp_path / "c.pcap")
