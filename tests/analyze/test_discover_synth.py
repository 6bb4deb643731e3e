"""Least-path synthesis on hand-built flow tables: exact proposals, flags, ranges, rendering, diff."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flow_kit import AUX, EXT, JUMP, MGMT, STORAGE, USER, W0, W1, flows, lab_policy, policy_variant
from ringfence.analyze._discover_select import compact_ports
from ringfence.analyze.discover import (
    DiscoverError,
    DiscoverOptions,
    Proposal,
    diff_approved,
    discover,
    evidence_document,
    render_diff,
    render_yaml,
)
from ringfence.policy import Policy, parse_policy


def _inventory(change: Any = None) -> Policy:
    def edit(doc: dict[str, Any]) -> None:
        doc["approved"] = []
        if change is not None:
            change(doc)

    return policy_variant(edit)


INVENTORY = _inventory()
T0 = datetime(2026, 11, 30, 10, 0, 0, tzinfo=UTC)

# The lab's as-found traffic, by hand: every path the lab has, plus an unknown egress and an unclassified port.
LAB_ROWS = [
    {"src": W0, "dst": W1, "dport": 40001, "bytes": 5_000_000},  # gloo pair socket (ephemeral)
    {"src": W1, "dst": W0, "dport": 29500, "bytes": 2_000},  # rendezvous store
    {"src": W0, "dst": STORAGE, "dport": 8080, "first_seen": T0, "last_seen": T0 + timedelta(seconds=1)},
    {"src": W1, "dst": STORAGE, "dport": 8080, "first_seen": T0 + timedelta(seconds=5),
     "last_seen": T0 + timedelta(seconds=6)},
    {"src": W0, "dst": MGMT, "dport": 8000},
    {"src": AUX, "dst": MGMT, "dport": 8000},
    {"src": USER, "dst": MGMT, "dport": 8000},
    {"src": JUMP, "dst": MGMT, "dport": 22},
    {"src": AUX, "dst": MGMT, "dport": 22},
    {"src": AUX, "dst": STORAGE, "dport": 8080},
    {"src": STORAGE, "dst": EXT, "dport": 9000},
    {"src": W0, "dst": "192.0.2.7", "dport": 443},
    {"src": STORAGE, "dst": MGMT, "dport": 9000},
]


def _rows(p: Proposal) -> list[tuple[str, str, str, str, int | str | None, str]]:
    return [(r.rule.id, r.rule.source.describe(), r.rule.destination.describe(), r.rule.proto, r.rule.ports,
             r.rule.traffic_class.value) for r in p.rules]


@pytest.fixture(scope="module")
def lab_like() -> Proposal:
    return discover(flows(LAB_ROWS), INVENTORY)


def test_lab_like_traffic_gives_the_exact_least_path_matrix(lab_like: Proposal) -> None:
    assert _rows(lab_like) == [
        ("train-a-collective", "job:train-a", "job:train-a", "tcp", "32768-60999", "collective"),
        ("train-a-collective-29500", "job:train-a", "job:train-a", "tcp", 29500, "collective"),
        ("train-a-to-storage-http", "job:train-a", "service:storage-http", "tcp", None, "storage"),
        ("train-a-to-mgmt-api", "job:train-a", "service:mgmt-api", "tcp", None, "management"),
        ("aux-to-mgmt-api", "node:aux", "service:mgmt-api", "tcp", None, "management"),
        ("user-to-mgmt-api", "node:user", "service:mgmt-api", "tcp", None, "management"),
        ("jump-to-mgmt-ssh", "node:jump", "service:mgmt-ssh", "tcp", None, "management"),
    ]
    # the rendezvous was observed: nothing assumed
    assert not any("assumed" in n for n in lab_like.notes)
    assert all(r.evidence is not None for r in lab_like.rules)


def test_flags_are_never_approved_and_say_why(lab_like: Proposal) -> None:
    flagged = {(f.source.split(" ")[0], f.destination.split(" ")[0], f.ports): f for f in lab_like.flagged}
    assert set(flagged) == {
        ("aux", "mgmt", "22"), ("aux", "storage", "8080"), ("storage", "external", "9000"),
        ("worker-0", "192.0.2.7", "443"), ("storage", "mgmt", "9000"),
    }
    assert "administrative service mgmt-ssh" in flagged[("aux", "mgmt", "22")].reasons[0]
    assert "member of no job" in flagged[("aux", "storage", "8080")].reasons[0]
    assert flagged[("storage", "external", "9000")].reasons == (
        "egress outside the trust boundary (zone external has trust: external)",)
    unknown = flagged[("worker-0", "192.0.2.7", "443")]
    assert unknown.reasons[0].startswith("unclassified") and "not in the inventory" in unknown.reasons[1]
    assert unknown.suggested is None  # unclassified traffic must be classified before anyone approves it
    egress = flagged[("storage", "external", "9000")].suggested
    assert egress is not None and egress.destination.service == "replica-sink" and egress.source.node == "storage"
    approved = {(r.rule.source.describe(), r.rule.destination.describe()) for r in lab_like.rules}
    assert ("node:aux", "service:mgmt-ssh") not in approved and ("node:storage", "service:replica-sink") not in approved


def test_evidence_counts_bytes_and_time_span(lab_like: Proposal) -> None:
    rule = next(r for r in lab_like.rules if r.rule.id == "train-a-to-storage-http")
    assert rule.evidence is not None
    assert (rule.evidence.flows, rule.evidence.bytes) == (2, 2000)
    assert (rule.evidence.first_seen, rule.evidence.last_seen) == (T0, T0 + timedelta(seconds=6))
    assert rule.evidence.sources == ("worker-0", "worker-1") and rule.evidence.destinations == ("storage",)
    assert rule.protection == "required: tls"
    doc = json.loads(json.dumps(evidence_document(lab_like, ["hand.pcap"])))
    entry = next(a for a in doc["approved"] if a["rule"]["id"] == "train-a-to-storage-http")
    assert entry["evidence"]["first_seen"] == "2026-11-30T10:00:00.000Z"
    assert entry["evidence"]["last_seen"] == "2026-11-30T10:00:06.000Z"
    assert len(doc["flagged"]) == 5 and doc["inputs"] == ["hand.pcap"]


def test_yaml_loads_and_flagged_entries_can_be_approved_by_uncommenting(lab_like: Proposal) -> None:
    text = render_yaml(lab_like, ["header line"])
    loaded = parse_policy(text, "proposal.yaml")
    assert loaded.approved == lab_like.policy.approved
    assert loaded.services == INVENTORY.services and loaded.jobs == INVENTORY.jobs
    assert text.startswith("# header line\n") and "# FLAGGED" in text
    assert ("  # storage, protection required: tls — 2 flow(s), 2.0 KB, "
            "2026-11-30T10:00:00.000Z … 2026-11-30T10:00:06.000Z") in text
    by_hand = text.replace("  # - {", "  - {")
    widened = parse_policy(by_hand, "by-hand.yaml")
    assert len(widened.approved) == len(lab_like.rules) + sum(f.suggested is not None for f in lab_like.flagged)


def test_diff_against_the_shipped_lab_policy(lab_like: Proposal) -> None:
    existing = lab_policy()
    d = diff_approved(existing, lab_like.policy)
    assert [r.id for r in d.added] == ["train-a-collective-29500"]
    assert [r.id for r in d.removed] == ["checkpoint-replication"]  # flagged egress: not proposed
    assert {(c.old.id, c.new.id): c.what for c in d.changed} == {
        ("train-a-collective", "train-a-collective"): ("ports tcp/1024-65535 → tcp/32768-60999",),
        ("user-submit", "user-to-mgmt-api"): ("from zone:user → node:user",),
    }
    assert {(a.id, b.id) for a, b in d.unchanged} == {
        ("train-a-storage", "train-a-to-storage-http"), ("train-a-report", "train-a-to-mgmt-api"),
        ("aux-telemetry", "aux-to-mgmt-api"), ("admin-ssh", "jump-to-mgmt-ssh"),
    }
    text = render_diff(d, existing, lab_like.policy)
    assert "+ train-a-collective-29500: job:train-a → job:train-a tcp/29500 collective" in text
    assert "- checkpoint-replication: node:storage → service:replica-sink tcp/9000 replication" in text
    assert text.endswith("1 added, 1 removed, 2 changed, 4 unchanged\n")
    assert diff_approved(lab_like.policy, lab_like.policy).empty


def test_collective_ports_are_the_ephemeral_range_clipped_to_the_jobs_declared_range() -> None:
    rows = [{"src": W0, "dst": W1, "dport": p} for p in (50_010, 50_500, 50_999)]
    narrow = _inventory(lambda d: d["jobs"][0].update(collective_ports="50000-51000"))
    p = discover(flows(rows), narrow, DiscoverOptions(assume_rendezvous=None))
    assert _rows(p) == [("train-a-collective", "job:train-a", "job:train-a", "tcp", "50000-51000", "collective")]
    # another OS range: the kernel's own range is what the next run draws from
    p = discover(flows(rows), INVENTORY, DiscoverOptions(ephemeral=(49152, 65535), assume_rendezvous=None))
    assert [r.rule.ports for r in p.rules] == ["49152-65535"]
    ev = p.rules[0].evidence
    assert ev is not None and (ev.port_lo, ev.port_hi, ev.flows) == (50_010, 50_999, 3)


def test_unobserved_rendezvous_is_assumed_given_or_left_out() -> None:
    rows = [{"src": W0, "dst": W1, "dport": 40_000}]
    assumed = discover(flows(rows), INVENTORY)
    rdv = assumed.rules[1]
    assert (rdv.rule.ports, rdv.evidence) == (29500, None) and "not observed" in rdv.notes[0]
    assert any("assumed torch.distributed's default port 29500" in n for n in assumed.notes)
    given_ = discover(flows(rows), INVENTORY, DiscoverOptions(rendezvous=(("train-a", 29_501),)))
    assert [r.rule.ports for r in given_.rules] == ["32768-60999", 29501]
    off = discover(flows(rows), INVENTORY, DiscoverOptions(assume_rendezvous=None))
    assert [r.rule.ports for r in off.rules] == ["32768-60999"]


def test_fixed_collective_ports_exact_then_merged_and_udp_separate() -> None:
    rows = [{"src": W0, "dst": W1, "dport": p} for p in (29500, 29501, 29502, 31000)]
    rows.append({"src": W0, "dst": W1, "dport": 4791, "proto": 17})  # RoCEv2
    p = discover(flows(rows), INVENTORY)
    assert _rows(p) == [
        ("train-a-collective-29500-29502", "job:train-a", "job:train-a", "tcp", "29500-29502", "collective"),
        ("train-a-collective-31000", "job:train-a", "job:train-a", "tcp", 31000, "collective"),
        ("train-a-collective-4791-udp", "job:train-a", "job:train-a", "udp", 4791, "collective"),
    ]
    many = discover(flows([{"src": W0, "dst": W1, "dport": 20000 + 2 * i} for i in range(6)]), INVENTORY)
    assert [r.rule.ports for r in many.rules] == ["20000-20010"]
    assert any("merged into one range 20000-20010" in n for n in many.notes)


def test_cross_job_traffic_is_flagged_not_approved() -> None:
    def two_jobs(doc: dict[str, Any]) -> None:
        doc["jobs"][0]["members"] = ["worker-0"]
        doc["jobs"].append({"name": "train-b", "identity": "spiffe://lab/job/train-b", "members": ["worker-1"]})

    p = discover(flows([{"src": W0, "dst": W1, "dport": 40_000}]), _inventory(two_jobs))
    assert p.rules == ()
    assert p.flagged[0].reasons[0].startswith("unclassified")
    assert any("job train-a: no collective traffic observed" in n for n in p.notes)


def test_zone_selector_only_when_every_node_of_the_zone_was_seen() -> None:
    def users(doc: dict[str, Any]) -> None:
        doc["nodes"] += [{"name": "user-2", "zone": "user", "addresses": ["10.77.4.11"]},
                         {"name": "user-3", "zone": "user", "addresses": ["10.77.4.12"]}]

    inv = _inventory(users)
    all_three = [{"src": a, "dst": MGMT, "dport": 8000} for a in (USER, "10.77.4.11", "10.77.4.12")]
    assert _rows(discover(flows(all_three), inv))[0][1:3] == ("zone:user", "service:mgmt-api")
    two = discover(flows(all_three[:2]), inv)
    assert [r[1] for r in _rows(two)] == ["node:user", "node:user-2"]


def test_node_destinations_are_grouped_like_sources() -> None:
    # The inventory's own entry classifies monitoring scrapes; discovery narrows its zone selectors.
    def monitoring(doc: dict[str, Any]) -> None:
        doc["approved"] = [{"id": "scrape", "from": {"zone": "management"}, "to": {"zone": "workload"},
                            "ports": 9100, "class": "management"}]

    inv = policy_variant(monitoring)
    rows = [{"src": MGMT, "dst": a, "dport": 9100} for a in (W0, W1, AUX)]
    assert _rows(discover(flows(rows), inv)) == [
        ("mgmt-to-train-a-9100", "node:mgmt", "job:train-a", "tcp", 9100, "management"),
        ("mgmt-to-aux-9100", "node:mgmt", "node:aux", "tcp", 9100, "management"),
    ]


def test_sources_outside_the_inventory_are_flagged_with_identity_or_cidr() -> None:
    rows = [{"src": "10.9.9.9", "dst": MGMT, "dport": 8000, "src_identity": "spiffe://lab/ns/ci/sa/runner"},
            {"src": "10.9.9.8", "dst": MGMT, "dport": 8000}]
    p = discover(flows(rows), INVENTORY)
    assert p.rules == ()
    suggested = sorted(f.suggested.source.describe() for f in p.flagged if f.suggested is not None)
    assert suggested == ["cidr:10.9.9.8/32", "identity:spiffe://lab/ns/ci/sa/runner"]
    assert all("not in the inventory" in f.reasons[0] for f in p.flagged)


def test_admin_zones_option_moves_the_admin_boundary() -> None:
    rows = [{"src": JUMP, "dst": MGMT, "dport": 22}]
    assert [r.rule.id for r in discover(flows(rows), INVENTORY).rules] == ["jump-to-mgmt-ssh"]
    p = discover(flows(rows), INVENTORY, DiscoverOptions(admin_zones=("management",)))
    assert p.rules == () and "admin zones: management" in p.flagged[0].reasons[0]


def test_no_flows_gives_an_empty_matrix_that_loads() -> None:
    p = discover(flows([]), INVENTORY)
    assert p.rules == () and p.flagged == () and p.flows == 0
    assert parse_policy(render_yaml(p), "empty").approved == ()


def test_bad_options_are_clear_errors() -> None:
    with pytest.raises(DiscoverError, match="admin zone"):
        discover(flows([]), INVENTORY, DiscoverOptions(admin_zones=("nope",)))
    with pytest.raises(DiscoverError, match="rendezvous given for job"):
        discover(flows([]), INVENTORY, DiscoverOptions(rendezvous=(("nope", 1),)))
    with pytest.raises(DiscoverError, match="ephemeral port range"):
        DiscoverOptions(ephemeral=(5000, 10))


@given(st.sets(st.integers(1, 400), max_size=60))
def test_compact_ports_covers_exactly_the_ports(ports: set[int]) -> None:
    runs = compact_ports(ports)
    assert {p for lo, hi in runs for p in range(lo, hi + 1)} == ports
    assert all(b[0] > a[1] + 1 for a, b in zip(runs, runs[1:], strict=False))  # maximal, sorted

