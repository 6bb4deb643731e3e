"""The compiled plan's two shortcuts classify exactly as the long way does: small IPv4 CIDR selectors listed
address by address (instead of parsing the text of every address outside the inventory), and port slots that no
rule, service or job tells apart mapped to one representative (instead of one cell per segment)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

import ringfence.analyze.plan as plan_mod
from flow_kit import EXT, MGMT, STORAGE, USER, W0, W1, flows, policy_variant
from ringfence.analyze import classify, communication_matrix, protection_breakdown
from ringfence.analyze.plan import compile_plan
from ringfence.policy import Policy


def _small_cidrs(doc: dict[str, Any]) -> None:
    # a service no rule names: only the service tells its port apart from its neighbours
    doc["services"].append({"name": "metrics", "node": "mgmt", "port": 9100, "class": "management"})
    doc["approved"] += [
        {"id": "offsite-v4", "from": {"node": "storage"}, "to": {"cidr": "198.51.100.0/24"}, "ports": 443,
         "class": "replication"},
        {"id": "offsite-v6", "from": {"node": "storage"}, "to": {"cidr": "2001:db8::/32"}, "ports": 443,
         "class": "replication"},
        {"id": "vpn-in", "from": {"cidr": "192.0.2.0/25"}, "to": {"node": "mgmt"}, "ports": 22,
         "class": "management"},
        {"id": "lab-v4", "from": {"cidr": "10.77.1.0/28"}, "to": {"cidr": "10.77.9.0/30"}, "proto": "udp",
         "ports": "5000-5010", "class": "replication"},
    ]  # fmt: skip


SMALL = policy_variant(_small_cidrs)
# inside and outside each CIDR, inventory addresses inside one, and text the IPv4 parse rejects
ADDRESSES = [W0, W1, STORAGE, MGMT, USER, EXT, "10.77.1.3", "10.77.9.2", "10.77.9.4", "198.51.100.0",
             "198.51.100.255", "198.51.101.1", "192.0.2.127", "192.0.2.128", "198.51.100.007", " 198.51.100.5",
             "2001:db8::5", "2001:db9::5", "::ffff:198.51.100.5", "not-an-address"]  # fmt: skip
# segment bounds of the lab's ranges and the rules above, ports outside 0-65535, and no port (ICMP)
PORTS: list[int | None] = [None, -1, 0, 21, 22, 23, 443, 1023, 1024, 5000, 5010, 5011, 8000, 8080, 9099, 9100, 9101,
                           29500, 65535, 70000]
PROTOS = [6, 17, 1, 47]


def _rows() -> pa.Table:
    rows = []
    for i, src in enumerate(ADDRESSES):
        for j, dst in enumerate(ADDRESSES):
            port = PORTS[(i * 7 + j) % len(PORTS)]
            proto = PROTOS[(i + j) % len(PROTOS)]
            rows.append({"src": src, "dst": dst, "dport": port, "proto": proto, "bytes": 100 + i * 31 + j})
    # every port with every protocol between a few pairs the rules above name
    for src, dst in ((STORAGE, "198.51.100.9"), ("192.0.2.5", MGMT), ("10.77.1.3", "10.77.9.1"), (W0, W1), (W0, MGMT)):
        rows += [{"src": src, "dst": dst, "dport": p, "proto": pr, "bytes": 7} for p in PORTS for pr in PROTOS]
    return flows(rows)


def _sorted(t: pa.Table) -> list[dict[str, Any]]:
    return sorted(t.to_pylist(), key=lambda r: tuple(str(v) for v in r.values()))


def _results(policy: Policy) -> tuple[list[dict[str, Any]], ...]:
    observed = _rows()
    return (
        classify(observed, policy).to_pylist(),
        _sorted(communication_matrix(observed, policy)),
        _sorted(protection_breakdown(observed, policy)),
    )


def test_small_ipv4_cidrs_are_listed_and_classify_as_the_parse_does(monkeypatch: pytest.MonkeyPatch) -> None:
    plan = compile_plan(SMALL)
    assert plan.v4_enumerated and not plan.needs_v4_lookup(dst=True) and not plan.needs_v4_lookup(dst=False)
    listed = set(plan.addresses.column("address").to_pylist())
    assert {"198.51.100.0", "198.51.100.255", "192.0.2.127", "10.77.1.3"} <= listed
    assert not {"192.0.2.128", "198.51.101.1", "198.51.100.007"} & listed
    assert len(plan.addresses.column("address").to_pylist()) == len(listed)  # an inventory address once
    listed_rows = _results(SMALL)
    monkeypatch.setattr(plan_mod, "ENUMERATE_LIMIT", 0)
    fresh = SMALL.model_copy()  # another object: the cached plan of SMALL is not reused
    parsed = compile_plan(fresh)
    assert not parsed.v4_enumerated and parsed.needs_v4_lookup(dst=True) and parsed.needs_v4_lookup(dst=False)
    assert _results(fresh) == listed_rows
    by_rule = {(r["src"], r["dst"], r["dport"], r["proto"]): r["rule"] for r in listed_rows[0]}
    assert by_rule[(STORAGE, "198.51.100.9", 443, 6)] == "offsite-v4"
    assert by_rule[("192.0.2.5", MGMT, 22, 6)] == "vpn-in"
    assert by_rule[("10.77.1.3", "10.77.9.1", 5010, 17)] == "lab-v4"
    assert by_rule[("10.77.1.3", "10.77.9.1", 5011, 17)] is None
    by_class = {(r["src"], r["dst"], r["dport"], r["proto"]): r["class"] for r in listed_rows[0]}
    assert by_class[(W0, MGMT, 9100, 6)] == "management" and by_class[(W0, MGMT, 9101, 6)] == "unclassified"


def test_a_wide_cidr_keeps_the_parse() -> None:
    def wide(doc: dict[str, Any]) -> None:
        _small_cidrs(doc)
        doc["approved"].append({"id": "anywhere", "from": {"node": "storage"}, "to": {"cidr": "0.0.0.0/0"},
                                "ports": 8443, "class": "replication"})  # fmt: skip

    plan = compile_plan(policy_variant(wide))
    assert not plan.v4_enumerated and plan.needs_v4_lookup(dst=True)


def test_port_slots_alike_share_a_cell_and_classify_as_every_segment(monkeypatch: pytest.MonkeyPatch) -> None:
    plan = compile_plan(SMALL)
    assert len(set(plan.slot_rep)) < len(plan.slot_rep)  # the shortcut is in effect on this policy
    assert all(plan.slot_rep[r] == r for r in plan.slot_rep)  # a representative stands for itself
    merged = _results(SMALL)
    # the long way: a cell per segment, found by the balanced tree alone (no equality tests first)
    monkeypatch.setattr(plan_mod, "_slot_representatives", lambda nseg, rules, svc: tuple(range(3 * nseg)))
    monkeypatch.setattr(plan_mod, "POINT_LIMIT", 0)
    fresh = SMALL.model_copy()
    long_way = compile_plan(fresh)
    assert long_way.slot_rep == tuple(range(3 * plan.segments.count))
    assert " WHEN 22 THEN " not in long_way.port_cell_sql("p", "d")
    assert _results(fresh) == merged


def test_single_ports_are_tested_before_the_tree() -> None:
    sql = compile_plan(SMALL).port_cell_sql("p", "d")
    assert "(CASE coalesce(d, 0) WHEN 22 THEN" in sql  # mgmt-ssh's port, between two wider runs
