"""Classification against the lab policy: nodes, zones, jobs, classes, approving rules."""

from __future__ import annotations

import importlib
import json
from datetime import UTC, datetime

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flow_kit import AUX, EXT, JUMP, MGMT, STORAGE, USER, W0, W1, flows, lab_policy, policy_variant
from ringfence.analyze import AnalyzeError, classify
from ringfence.observe.schema import CLASSIFIED_SCHEMA
from ringfence.policy import Policy, parse_policy

POLICY = lab_policy()

CASES = [
    # (src, dst, dport, class, rule, src_job, dst_job)
    (W0, W1, 29500, "collective", "train-a-collective", "train-a", "train-a"),
    (W1, W0, 1024, "collective", "train-a-collective", "train-a", "train-a"),
    (W0, STORAGE, 8080, "storage", "train-a-storage", "train-a", None),
    (AUX, STORAGE, 8080, "storage", None, None, None),
    (W0, MGMT, 8000, "management", "train-a-report", "train-a", None),
    (AUX, MGMT, 8000, "management", "aux-telemetry", None, None),
    (USER, MGMT, 8000, "management", "user-submit", None, None),
    (JUMP, MGMT, 22, "management", "admin-ssh", None, None),
    (AUX, MGMT, 22, "management", None, None, None),
    (STORAGE, EXT, 9000, "replication", "checkpoint-replication", None, None),
    (AUX, W0, 29500, "unclassified", None, None, "train-a"),
    (W0, W1, 80, "unclassified", None, "train-a", "train-a"),  # below the collective range
    (W0, "192.0.2.7", 443, "unclassified", None, "train-a", None),
    (STORAGE, MGMT, 9000, "unclassified", None, None, None),
]


@pytest.fixture(scope="module")
def classified() -> pa.Table:
    return classify(flows([{"src": s, "dst": d, "dport": p} for s, d, p, *_ in CASES]), POLICY)


@pytest.mark.parametrize("i", range(len(CASES)))
def test_class_rule_and_jobs(classified: pa.Table, i: int) -> None:
    src, dst, dport, cls, rule, src_job, dst_job = CASES[i]
    row = classified.slice(i, 1).to_pylist()[0]
    assert (row["src"], row["dst"], row["dport"]) == (src, dst, dport)
    assert row["class"] == cls
    assert row["rule"] == rule
    assert row["approved"] is (rule is not None)
    assert (row["src_job"], row["dst_job"]) == (src_job, dst_job)


def test_nodes_and_zones(classified: pa.Table) -> None:
    rows = classified.to_pylist()
    assert (rows[0]["src_node"], rows[0]["dst_node"], rows[0]["src_zone"], rows[0]["dst_zone"]) == (
        "worker-0",
        "worker-1",
        "workload",
        "workload",
    )
    assert (rows[9]["src_zone"], rows[9]["dst_zone"]) == ("storage", "external")
    unknown = rows[12]
    assert unknown["dst_node"] is None and unknown["dst_zone"] is None


def test_schema_order_and_observed_columns_untouched() -> None:
    t = flows([{"src": W0, "dst": W1, "dport": 2000 + i, "bytes": i} for i in range(50)])
    out = classify(t, POLICY)
    assert out.schema == CLASSIFIED_SCHEMA
    assert out.select(t.column_names).equals(t)  # nanosecond timestamps included


def test_empty_and_reclassification() -> None:
    empty = classify(flows([]), POLICY)
    assert empty.num_rows == 0 and empty.schema == CLASSIFIED_SCHEMA
    once = classify(flows([{"src": AUX, "dst": STORAGE, "dport": 8080}]), POLICY)
    assert classify(once, POLICY).equals(once)


def test_udp_and_portless_protocols() -> None:
    out = classify(
        flows(
            [
                {"src": W0, "dst": W1, "dport": 4791, "proto": 17},  # RoCEv2 between ranks: collective, rule is tcp
                {"src": W0, "dst": W1, "dport": None, "sport": None, "proto": 1},  # ICMP
                {"src": JUMP, "dst": MGMT, "dport": 22, "proto": 17},  # sshd is tcp
            ]
        ),
        POLICY,
    ).to_pylist()
    assert (out[0]["class"], out[0]["rule"]) == ("collective", None)
    assert (out[1]["class"], out[1]["rule"]) == ("unclassified", None)
    assert (out[2]["class"], out[2]["rule"]) == ("unclassified", None)


def test_flow_identities_resolve_jobs_without_inventory_addresses() -> None:
    # Hubble-style records: pod addresses the inventory does not list, identities on the record.
    t = flows(
        [
            {
                "src": "10.200.0.1",
                "dst": "10.200.0.2",
                "dport": 29500,
                "src_identity": "spiffe://lab/job/train-a",
                "dst_identity": "spiffe://lab/job/train-a",
            },
            {"src": "10.200.0.3", "dst": W0, "dport": 29500, "src_identity": "spiffe://lab/node/aux"},
        ]
    )
    rows = classify(t, POLICY).to_pylist()
    assert (rows[0]["class"], rows[0]["rule"], rows[0]["src_job"]) == ("collective", "train-a-collective", "train-a")
    assert rows[0]["src_node"] is None
    assert (rows[1]["src_node"], rows[1]["class"], rows[1]["approved"]) == ("aux", "unclassified", False)


def _with_cidr_rules(doc: dict) -> None:  # type: ignore[type-arg]
    doc["approved"].append(
        {"id": "offsite-v4", "from": {"node": "storage"}, "to": {"cidr": "198.51.100.0/24"}, "ports": 443,
         "class": "replication"}
    )  # fmt: skip
    doc["approved"].append(
        {"id": "offsite-v6", "from": {"node": "storage"}, "to": {"cidr": "2001:db8::/32"}, "ports": 443,
         "class": "replication"}
    )  # fmt: skip
    doc["approved"].append(
        {"id": "vpn-in", "from": {"cidr": "10.77.4.0/24"}, "to": {"service": "mgmt-ssh"}, "class": "management"}
    )


def test_cidr_selectors_match_addresses_inside_and_outside_the_inventory() -> None:
    policy = policy_variant(_with_cidr_rules)
    rows = classify(
        flows(
            [
                {"src": STORAGE, "dst": "198.51.100.20", "dport": 443},
                {"src": STORAGE, "dst": "198.51.101.20", "dport": 443},
                {"src": STORAGE, "dst": "2001:db8::5", "dport": 443},
                {"src": STORAGE, "dst": "2001:db9::5", "dport": 443},
                {"src": USER, "dst": MGMT, "dport": 22},
                {"src": AUX, "dst": "198.51.100.20", "dport": 443},
            ]
        ),
        policy,
    ).to_pylist()
    assert [r["rule"] for r in rows] == ["offsite-v4", None, "offsite-v6", None, "vpn-in", None]
    assert rows[0]["class"] == "replication"  # no service there: the approving entry's class
    assert rows[1]["class"] == "unclassified"


def test_bad_input_is_an_analyze_error() -> None:
    with pytest.raises(AnalyzeError, match="lacks required column"):
        classify(pa.table({"src": ["10.0.0.1"]}), POLICY)


# --- property: port-range matching equals a brute-force reading of the approved entries ---------

_PROTOS = {"tcp": 6, "udp": 17}


def _range_policy(rules: list[tuple[str, int, int]]) -> Policy:
    doc = {
        "cluster": "prop",
        "zones": [{"name": "a"}, {"name": "b"}],
        "nodes": [
            {"name": "n1", "zone": "a", "addresses": ["10.0.0.1"]},
            {"name": "n2", "zone": "b", "addresses": ["10.0.0.2"]},
        ],
        "approved": [
            {
                "id": f"r{i}",
                "from": {"node": "n1"},
                "to": {"node": "n2"},
                "proto": proto,
                "ports": f"{lo}-{hi}" if proto != "any" or lo > 1 or hi < 65535 else None,
                "class": "storage",
            }
            for i, (proto, lo, hi) in enumerate(rules)
        ],  # fmt: skip
        "classes": {c: {} for c in ("storage", "collective", "management", "replication")},
    }
    for r in doc["approved"]:  # type: ignore[union-attr]
        if r["ports"] is None:
            del r["ports"]
    return parse_policy(json.dumps(doc))


def _oracle(rules: list[tuple[str, int, int]], proto: int, port: int | None) -> str | None:
    for i, (rp, lo, hi) in enumerate(rules):
        proto_ok = rp == "any" or _PROTOS[rp] == proto
        if rp == "any" and lo == 1 and hi == 65535:
            lo = 0  # an "any" entry without ports also covers port-less protocols
        if proto_ok and lo <= (port or 0) <= hi:
            return f"r{i}"
    return None


_port = st.integers(1, 65535)
_rule = st.tuples(st.sampled_from(["tcp", "udp", "any"]), _port, _port).map(
    lambda t: (t[0], min(t[1], t[2]), max(t[1], t[2]))
)


@settings(max_examples=40, deadline=None)
@given(
    rules=st.lists(_rule, min_size=1, max_size=6),
    probes=st.lists(st.tuples(st.sampled_from([6, 17, 1]), st.integers(0, 65535)), min_size=1, max_size=25),
)
def test_port_ranges_match_like_the_oracle(rules: list[tuple[str, int, int]], probes: list[tuple[int, int]]) -> None:
    policy = _range_policy(rules)
    t = flows(
        [{"src": "10.0.0.1", "dst": "10.0.0.2", "proto": p, "dport": None if p == 1 else port} for p, port in probes]
    )
    got = classify(t, policy).column("rule").to_pylist()
    assert got == [_oracle(rules, p, None if p == 1 else port) for p, port in probes]


def test_timestamps_survive() -> None:
    t = flows([{"src": W0, "dst": W1, "dport": 5000}])
    out = classify(t, POLICY)
    assert (
        out.column("first_seen")[0].value
        == int(datetime(2026, 11, 30, 10, 0, 0, 123456, tzinfo=UTC).timestamp() * 1e6) * 1000
    )


def test_alternating_policies_are_compiled_once_each(monkeypatch: pytest.MonkeyPatch) -> None:
    """A caller alternating between policies (a candidate and the running one) compiles each once; past
    PLANS_KEPT others, the least recently used is compiled again — and every call classifies by its own."""
    module = importlib.import_module("ringfence.analyze.classify")  # the package's ``classify`` is the function

    compiled: list[int] = []
    real = module.compile_plan

    def counting(policy: Policy, *extra: object) -> object:
        compiled.append(id(policy))
        return real(policy, *extra)  # type: ignore[arg-type]

    monkeypatch.setattr(module, "compile_plan", counting)
    monkeypatch.setattr(module, "_plans", [])
    one, two = lab_policy(), lab_policy()
    table = flows([{"src": W0, "dst": W1, "dport": 29500}])
    for _ in range(3):
        assert classify(table, one).column("class").to_pylist() == ["collective"]
        assert classify(table, two).column("class").to_pylist() == ["collective"]
    assert compiled == [id(one), id(two)]
    others = [lab_policy() for _ in range(module.PLANS_KEPT)]
    for other in others:
        classify(table, other)
    classify(table, one)  # pushed out by the others: compiled again
    assert compiled.count(id(one)) == 2 and len(module._plans) == module.PLANS_KEPT
