"""The fold's grouping of a batch by a hash of the key's fields gives exactly the groups of the whole key."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_pcap_synthetic import TS0, eth, ipv4, ipv6, pcap, rows, tcp, udp, write

from ringfence.observe.flows import _pcap_flows
from ringfence.observe.flows.pcap import PcapReader

CAPTURES = Path(__file__).resolve().parents[3].parent / "shared" / "captures" / "tcpdump-tests"
# IPv4 and IPv6, VLAN and QinQ tags, MPLS, GRE, ERSPAN and Geneve tunnels: every field of the key varies.
MIXED = ["802.1ad_QinQ.pcap", "mpls-traceroute.pcap", "mpls-over-udp.pcap", "various_gre.pcap", "geneve.pcap",
         "gso-ipv4-geneve-ipv6.pcap", "erspan-type-ii-2.pcap", "ssh.pcap", "dns_udp.pcap", "ntp.pcap"]  # fmt: skip


class _Spy:
    """Counts what :func:`_pcap_flows._hash_groups` answered."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, force_none: bool = False) -> None:
        self.hashed = 0
        self.fell_back = 0
        real = _pcap_flows._hash_groups

        def spy(c: object, r: object) -> object:
            got = None if force_none else real(c, r)  # type: ignore[arg-type]
            if got is None:
                self.fell_back += 1
            else:
                self.hashed += 1
            return got

        monkeypatch.setattr(_pcap_flows, "_hash_groups", spy)


def _many_flows() -> list[tuple[int, bytes]]:
    """300 conversations in both directions, IPv4 and IPv6, some on the same addresses with other ports."""
    out = []
    for i in range(300):
        a, b = f"10.0.{i // 250}.{i % 250 + 1}", "10.9.0.1"
        six_a, six_b = f"2001:db8::{i + 1:x}", "2001:db8::ffff"
        sport, dport = 40000 + i % 7, 443 + i % 3
        out.append((TS0 + i, eth(ipv4(a, b, 6, tcp(sport, dport, b"x" * (i % 50))))))
        out.append((TS0 + i, eth(ipv4(b, a, 6, tcp(dport, sport, b"y")))))
        out.append((TS0 + i, eth(ipv6(six_a, six_b, 17, udp(sport, 53, b"q")), 0x86DD)))
        out.append((TS0 + i, eth(ipv4(a, b, 17, udp(sport, dport, b"u")), vlans=[(0x8100, 1 + i % 5)])))
    return out


def test_hash_groups_equal_whole_key_groups_and_are_the_path_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, pcap(_many_flows()))
    with monkeypatch.context() as m:
        spy = _Spy(m)
        hashed = PcapReader(batch_packets=97).read(path)
    assert spy.hashed > 0 and spy.fell_back == 0
    with monkeypatch.context() as m:
        whole = _Spy(m, force_none=True)
        keyed = PcapReader(batch_packets=97).read(path)
    assert whole.hashed == 0 and whole.fell_back > 0
    assert rows(hashed.flows) == rows(keyed.flows)
    assert hashed.flows.num_rows == 300 * 3  # a TCP conversation is one flow; UDP v6 and VLAN UDP one each


def test_a_hash_collision_falls_back_to_the_whole_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, pcap(_many_flows()))
    expected = rows(PcapReader(batch_packets=97).read(path).flows)
    # Multipliers of zero: every packet of a batch hashes alike, so only the exactness check stands between
    # the hash and one merged flow.
    monkeypatch.setattr(_pcap_flows, "_MIX", tuple(np.uint64(0) for _ in _pcap_flows._MIX))
    spy = _Spy(monkeypatch)
    got = rows(PcapReader(batch_packets=97).read(path).flows)
    assert spy.fell_back > 0 and spy.hashed == 0
    assert got == expected


@pytest.mark.parametrize("name", MIXED)
def test_real_captures_group_alike_on_both_paths(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    path = CAPTURES / name
    if not path.exists():
        pytest.skip(f"{path} not present")
    for batch in (3, 16384):
        with monkeypatch.context() as m:
            _Spy(m)
            hashed = PcapReader(batch_packets=batch).read(path)
        with monkeypatch.context() as m:
            _Spy(m, force_none=True)
            keyed = PcapReader(batch_packets=batch).read(path)
        assert rows(hashed.flows) == rows(keyed.flows), (name, batch)


def test_first_rows_of_groups_numbered_by_first_appearance_or_not() -> None:
    rng = np.random.default_rng(7)
    labels = rng.integers(0, 50, 2000)
    _, first_seen, g = np.unique(labels, return_index=True, return_inverse=True)
    order = np.argsort(first_seen)  # renumber the groups by first appearance, as Arrow's encoding does
    renumber = np.empty_like(order)
    renumber[order] = np.arange(order.shape[0])
    by_appearance = renumber[g].astype(np.int64)
    np.testing.assert_array_equal(_pcap_flows._first_rows(by_appearance, 50), np.sort(first_seen))
    # numbered by value instead (np.unique's order): the general form answers, and still exactly
    np.testing.assert_array_equal(_pcap_flows._first_rows(g.astype(np.int64), 50), first_seen)
    assert _pcap_flows._first_rows(np.zeros(0, np.int64), 0).shape == (0,)
