"""``enable_wireguard``'s wait for every tunnel's first handshake: prompted, bounded, and always put back."""

from __future__ import annotations

from typing import Any

import pytest

from ringfence.secure.layers import wireguard_run
from ringfence.secure.layers.wireguard_run import WgEnabled, WgPeerState, await_handshakes, tunnel_name

KEYS = {"worker-0": "K0", "worker-1": "K1", "worker-2": "K2"}


class Scripted:
    """A node whose peers report a handshake from the ``after``-th look on, for the peers in ``shakes``."""

    def __init__(self, name: str, shakes: set[str], after: int) -> None:
        self.node, self.ifname, self.shakes, self.after = name, "rf-wg", shakes, after
        self.looks = 0
        self.calls: list[tuple[str, ...]] = []

    def wg(self, *args: str, stdin: bytes | None = None) -> str:
        self.calls.append(args)
        return ""

    def peers(self) -> list[WgPeerState]:
        self.looks += 1
        return [WgPeerState(KEYS[m], "", "", 1700000000 if m in self.shakes and self.looks >= self.after else 0, 0, 0)
                for m in KEYS if m != self.node and m in self.peers_of]

    peers_of: set[str] = set()


def _nodes(names: list[str], shakes: dict[str, set[str]], after: int) -> dict[str, Any]:
    out = {}
    for n in names:
        s = Scripted(n, shakes.get(n, set()), after)
        s.peers_of = set(names) - {n}
        out[n] = s
    return out


@pytest.fixture(autouse=True)
def _no_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wireguard_run.time, "sleep", lambda s: None)


def test_a_tunnel_counts_once_both_ends_saw_its_handshake_and_the_keepalive_is_put_back() -> None:
    nodes = _nodes(["worker-0", "worker-1"], {"worker-0": {"worker-1"}, "worker-1": {"worker-0"}}, after=3)
    got = await_handshakes(nodes, {n: KEYS[n] for n in nodes}, timeout=30)
    assert list(got) == ["worker-0<->worker-1"] and got["worker-0<->worker-1"] is not None
    for n in nodes.values():
        assert n.looks >= 3
        # prompted first, switched off last
        assert n.calls[0][-2:] == ("persistent-keepalive", "1") and n.calls[-1][-2:] == ("persistent-keepalive", "0")


def test_one_end_alone_is_not_a_handshake_and_a_silent_tunnel_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter(float(i) for i in range(1000))
    monkeypatch.setattr(wireguard_run.time, "monotonic", lambda: next(clock))
    names = ["worker-0", "worker-1", "worker-2"]
    # 0 and 1 handshook; 2 saw 0, but 0 never saw 2; nobody reached 1<->2
    nodes = _nodes(names, {"worker-0": {"worker-1"}, "worker-1": {"worker-0"}, "worker-2": {"worker-0"}}, after=1)
    got = await_handshakes(nodes, {n: KEYS[n] for n in names}, timeout=10)
    assert got["worker-0<->worker-1"] is not None
    assert got["worker-0<->worker-2"] is None and got["worker-1<->worker-2"] is None
    assert all(n.calls[-1][-2:] == ("persistent-keepalive", "0") for n in nodes.values())
    enabled = WgEnabled(tuple(names), "rf-wg", KEYS, got)
    assert enabled.silent() == ["worker-0<->worker-2", "worker-1<->worker-2"]


def test_the_keepalive_is_put_back_when_the_wait_fails() -> None:
    nodes = _nodes(["worker-0", "worker-1"], {}, after=1)

    def broken() -> list[WgPeerState]:
        raise RuntimeError("wg show failed")

    nodes["worker-1"].peers = broken
    with pytest.raises(RuntimeError):
        await_handshakes(nodes, {n: KEYS[n] for n in nodes}, timeout=10)
    assert all(n.calls[-1][-2:] == ("persistent-keepalive", "0") for n in nodes.values())


def test_tunnel_names_do_not_depend_on_which_end_is_named_first() -> None:
    assert tunnel_name("worker-1", "worker-0") == tunnel_name("worker-0", "worker-1") == "worker-0<->worker-1"
