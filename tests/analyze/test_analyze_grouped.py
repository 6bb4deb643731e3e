"""The grouped path (classification looked up per group, CIDR classes added after the first group-by)
agrees with classifying every flow and then grouping — for any mix of addresses, ports and protocols."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flow_kit import AUX, EXT, JUMP, MGMT, STORAGE, USER, W0, W1, flows, policy_variant
from ringfence.analyze import classify, communication_matrix, protection_breakdown


def _cidr_rules(doc: dict[str, Any]) -> None:
    doc["approved"] += [
        {"id": "offsite-v4", "from": {"node": "storage"}, "to": {"cidr": "198.51.100.0/24"}, "ports": 443,
         "class": "replication"},
        {"id": "anywhere", "from": {"node": "storage"}, "to": {"cidr": "0.0.0.0/0"}, "ports": 8443,
         "class": "replication"},
        {"id": "vpn-in", "from": {"cidr": "192.0.2.0/25"}, "to": {"node": "mgmt"}, "ports": 22,
         "class": "management"},
    ]  # fmt: skip


POLICY = policy_variant(_cidr_rules)
ADDRESSES = [W0, W1, AUX, STORAGE, MGMT, USER, JUMP, EXT]
ADDRESSES += ["198.51.100.20", "198.51.101.20", "192.0.2.5", "192.0.2.200", "2001:db8::5", "255.255.255.255"]
ADDRESSES += ["0.0.0.0", "10.77.1.010", "not-an-address", "1.2.3.4.5"]
PORTS = [0, 22, 443, 1023, 1024, 8000, 8080, 8443, 9000, 29500, 65535]


def _sorted(t: pa.Table) -> list[dict[str, Any]]:
    return sorted(t.to_pylist(), key=lambda r: tuple(str(v) for v in r.values()))


def test_ipv6_outside_the_inventory_is_not_in_an_ipv4_cidr() -> None:
    # An IPv6 address has no IPv4 integer; the CIDR lookup must give it "no class", not the top
    # IPv4 segment's class (which 0.0.0.0/0 covers).
    rows = classify(
        flows(
            [{"src": STORAGE, "dst": "2001:db8::9", "dport": 8443}, {"src": STORAGE, "dst": "8.8.8.8", "dport": 8443}]
        ),
        POLICY,
    ).to_pylist()
    assert [r["rule"] for r in rows] == [None, "anywhere"]
    m = communication_matrix(
        flows([{"src": STORAGE, "dst": "2001:db8::9", "dport": 8443, "bytes": 5}]), POLICY
    ).to_pylist()
    observed = [r for r in m if r["status"] != "unused"]
    assert [(r["rule"], r["status"], r["bytes"]) for r in observed] == [(None, "unapproved", 5)]


def test_source_cidr_and_text_that_is_not_an_address() -> None:
    rows = [
        {"src": "192.0.2.5", "dst": MGMT, "dport": 22, "bytes": 10},
        {"src": "192.0.2.200", "dst": MGMT, "dport": 22, "bytes": 20},
        {"src": STORAGE, "dst": "not-an-address", "dport": 8443, "bytes": 40},
    ]
    m = [r for r in communication_matrix(flows(rows), POLICY).to_pylist() if r["status"] != "unused"]
    assert {(r["rule"], r["dst_zone"], r["bytes"]) for r in m} == {
        ("vpn-in", "management", 10),
        (None, "management", 20),
        (None, None, 40),
    }


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.sampled_from(ADDRESSES),
            st.sampled_from(ADDRESSES),
            st.sampled_from(PORTS),
            st.sampled_from([6, 17, 1]),
            st.integers(0, 10_000),
            st.sampled_from(["encrypted", "plaintext", "unknown"]),
        ),
        max_size=30,
    )
)
def test_grouped_equals_classify_then_group(rows: list[tuple[str, str, int, int, int, str]]) -> None:
    observed = flows(
        [{"src": s, "dst": d, "dport": p, "proto": pr, "bytes": b, "protection": pt} for s, d, p, pr, b, pt in rows]
    )
    per_flow = classify(observed, POLICY)
    assert _sorted(communication_matrix(observed, POLICY)) == _sorted(communication_matrix(per_flow, POLICY))
    assert _sorted(protection_breakdown(observed, POLICY)) == _sorted(protection_breakdown(per_flow, POLICY))
