"""The layers' runtime drives hosts only through their executors: a fake records it, local processes prove it."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from ringfence.secure.layers.interface import LayerError
from ringfence.secure.layers.runtime import NftTable, Runtime, StateStore
from ringfence.targets.interface import Executor, Host, RunResult, Site
from ringfence.targets.local import LocalExecutor, LocalProcess


class RecordingExecutor:
    """Answers every command with ``returncode`` and records it (argv, stdin) — no host is touched."""

    def __init__(self, name: str, returncode: int = 0) -> None:
        self.name = name
        self.returncode = returncode
        self.calls: list[tuple[tuple[str, ...], bytes | None]] = []

    def run(self, argv: Sequence[str], *, timeout: float = 30.0, stdin: bytes | None = None,
            env: Mapping[str, str] | None = None) -> RunResult:
        self.calls.append((tuple(argv), stdin))
        return RunResult(tuple(argv), self.returncode, b"", b"refused" if self.returncode else b"", 0.0)

    def spawn(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, stdout: Path | None = None,
              stderr: Path | None = None) -> LocalProcess:
        raise AssertionError("the runtime starts daemons through run(), never spawn()")

    def copy_to(self, local: Path, remote: str) -> None:
        raise AssertionError("not used")

    def copy_from(self, remote: str, local: Path) -> None:
        raise AssertionError("not used")


def _site(executors: Mapping[str, Executor]) -> Site:
    return Site("t1", "test", {n: Host(n, f"192.0.2.{i + 1}", e) for i, (n, e) in enumerate(executors.items())})


def test_tables_are_loaded_and_removed_through_the_nodes_executor(tmp_path: Path) -> None:
    a, b = RecordingExecutor("a"), RecordingExecutor("b")
    rt = Runtime(_site({"a": a, "b": b}), StateStore("t1", root=tmp_path))
    rt.add_table(NftTable("b", "inet", "rf_x", "wireguard"), "table inet rf_x {}\n")
    assert a.calls == [] and b.calls == [(("nft", "-f", "-"), b"table inet rf_x {}\n")]
    assert rt.store.read().tables == (NftTable("b", "inet", "rf_x", "wireguard"),)
    rt.drop_tables(layer="wireguard")
    assert b.calls[-1] == (("nft", "delete", "table", "inet", "rf_x"), None)
    assert rt.store.read().tables == ()


def test_a_refused_ruleset_is_a_layer_error_naming_the_node(tmp_path: Path) -> None:
    rt = Runtime(_site({"n": RecordingExecutor("n", returncode=1)}), StateStore("t1", root=tmp_path))
    with pytest.raises(LayerError, match="nft on n refused the ruleset.*refused"):
        rt.add_table(NftTable("n", "ip", "rf_tls", "tls"), "table ip rf_tls {}\n")


def test_files_go_to_the_host_atomically_with_their_mode(tmp_path: Path) -> None:
    ex = RecordingExecutor("n")
    rt = Runtime(_site({"n": ex}), StateStore("t1", root=tmp_path))
    rt.put("n", "/run/x/key.pem", b"KEY")
    (argv, stdin), = ex.calls
    assert argv[:2] == ("sh", "-c") and argv[3:] == ("/run/x/key.pem", "600") and stdin == b"KEY"


def test_daemons_on_two_hosts_are_recorded_per_node_and_stopped_by_layer(tmp_path: Path) -> None:
    site = _site({"a": LocalExecutor(name="a"), "b": LocalExecutor(name="b")})
    rt = Runtime(site, StateStore("t1", root=tmp_path))
    marker = rt.marker
    pa = rt.spawn("a", "wg-a", "wireguard", ["sh", "-c", "sleep 60", marker])
    pb = rt.spawn("b", "tls-b", "tls", ["sh", "-c", "sleep 60", marker])
    procs = {p.label: p for p in rt.store.read().processes}
    assert procs["wg-a"].node == "a" and procs["wg-a"].pid == pa and procs["tls-b"].pid == pb
    assert rt.alive("wg-a") == pa and rt.alive("tls-b") == pb
    assert (Path(rt.host_dir("a")) / "pids" / "wg-a.pid").read_text().strip() == str(pa)
    assert rt.stop(layer="wireguard") == ["wg-a"]
    deadline = time.monotonic() + 10
    while rt.alive("wg-a") is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert rt.alive("wg-a") is None and rt.alive("tls-b") == pb
    with pytest.raises(LayerError, match="still has layer processes"):
        rt.forget()
    rt.stop()
    rt.forget()
    assert not (tmp_path / "t1").exists()


def test_a_daemon_must_name_the_sites_directory(tmp_path: Path) -> None:
    rt = Runtime(_site({"a": LocalExecutor(name="a")}), StateStore("t1", root=tmp_path))
    with pytest.raises(LayerError, match="must name"):
        rt.spawn("a", "x", "tls", ["sleep", "60"])
    assert rt.store.read().processes == ()


def test_a_malformed_state_file_is_an_error_not_a_guess(tmp_path: Path) -> None:
    store = StateStore("t1", root=tmp_path)
    store.directory.mkdir(parents=True)
    store.path.write_text('{"lab": "t1", "processes": [{"pid": 1}]}')
    with pytest.raises(LayerError, match="malformed"):
        store.read()
